/**
 * The cursor codec's keys: the configured ones (cursor.secret signs, cursor.previousSecrets only
 * verify), or else one secret that every gateway sharing the store agrees on (E2): the first
 * random candidate offered to the store wins. Offered again every health.intervalMs (refresh,
 * from src/server.ts), so that an instance notices a store that lost the secret with the rest of
 * its data.
 *
 * One codec serves the process from the first cursor on: a reload (reconfigure) or a secret the
 * store replaced changes its keys in place, and every stream open then signs with the new key from
 * its next event (CursorCodec.setKeys).
 */
import { randomBytes } from 'node:crypto';
import { CursorCodec } from './codec.js';
import type { Config } from '../config/schema.js';
import type { Logger } from '../logger.js';
import type { Store } from '../store/types.js';

export type CursorKeyConfig = Config['cursor'];

export class CursorKeys {
  /** The codec, once there is one: the same object from then on. */
  #ring: CursorCodec | undefined;
  #agreeing: Promise<CursorCodec> | undefined;
  /** The secret agreed through the store; undefined while the keys are configured ones. */
  #secret: string | undefined;
  #configured: CursorKeyConfig;

  constructor(
    configured: CursorKeyConfig | undefined,
    private readonly store: Store,
    private readonly logger: Logger,
    /** Told each secret agreed through the store (so that the log can scrub it). */
    private readonly onAgreed: (secret: string) => void = () => undefined,
  ) {
    this.#configured = configured ?? {};
    const { secret, previousSecrets } = this.#configured;
    if (secret) this.#ring = new CursorCodec(secret, previousSecrets);
  }

  /** The codec in force; rejects with a StoreError while no secret could be agreed. */
  codec(): Promise<CursorCodec> {
    if (this.#ring) return Promise.resolve(this.#ring);
    this.#agreeing ??= this.#agree(randomBytes(32).toString('base64url'))
      .then((secret) => (this.#ring ??= new CursorCodec(secret)))
      .finally(() => {
        this.#agreeing = undefined;
      });
    return this.#agreeing;
  }

  /**
   * How `sessionId` appears in logs and spans (CursorCodec.sessionFingerprint, under the signing
   * key); undefined until there is a key (a secret to be agreed through a store that has not
   * answered yet), and then the field is left out rather than shown in any other form.
   */
  readonly sessionFingerprint = (sessionId: string): string | undefined => this.#ring?.sessionFingerprint(sessionId);

  /**
   * A reload's cursor keys, in force from now on (the configuration was validated: the codec
   * takes them). Without cursor.secret the keys are agreed through the store again, at the next
   * refresh; until then the running ones stay.
   */
  reconfigure(next: CursorKeyConfig): void {
    const before = this.#configured;
    this.#configured = next;
    if (before.secret === next.secret && sameList(before.previousSecrets, next.previousSecrets)) return;
    const { secret, previousSecrets } = next;
    if (!secret) {
      // Offered afresh at the next refresh, which adopts the store's secret.
      this.#secret = undefined;
      return;
    }
    if (this.#ring) this.#ring.setKeys(secret, previousSecrets);
    else this.#ring = new CursorCodec(secret, previousSecrets);
    this.#secret = undefined;
    this.logger.info({ previousKeys: previousSecrets?.length ?? 0 }, 'cursor keys changed: new cursors are signed with cursor.secret, and every key listed verifies');
  }

  /** Offers the secret in force again; adopts another one if the store holds another. */
  async refresh(): Promise<void> {
    // Before the first cursor nothing is agreed: codec() agrees when it is first needed.
    if (this.#configured.secret || this.#ring === undefined) return;
    const before = this.#secret;
    const secret = await this.#agree(before ?? randomBytes(32).toString('base64url'));
    // The same secret keeps its keys: deriving them again (HKDF) every tick would change nothing.
    // A reload that configured keys meanwhile has the last word.
    if (secret === before || this.#configured.secret) return;
    if (before !== undefined) this.logger.warn('the store holds another cursor secret (it lost its data?): cursors issued before are foreign now');
    this.#ring.setKeys(secret);
  }

  /** The secret the store holds after offering `candidate`; a new one is told to onAgreed once. */
  async #agree(candidate: string): Promise<string> {
    const secret = await this.store.agreeSecret(candidate);
    if (secret !== this.#secret) this.onAgreed(secret);
    this.#secret = secret;
    return secret;
  }
}

function sameList(a: readonly string[] | undefined, b: readonly string[] | undefined): boolean {
  const x = a ?? [];
  const y = b ?? [];
  return x.length === y.length && x.every((value, i) => value === y[i]);
}
