/**
 * The cursor codec's secret: the configured one, or else one that every gateway sharing the store
 * agrees on (E2): the first random candidate offered to the store wins. Offered again every
 * health.intervalMs (refresh, from src/server.ts), so that an instance notices a store that lost the
 * secret with the rest of its data.
 */
import { randomBytes } from 'node:crypto';
import { CursorCodec } from './codec.js';
import type { Logger } from '../logger.js';
import type { Store } from '../store/types.js';

export class CursorKeys {
  #codec: Promise<CursorCodec> | undefined;
  #secret: string | undefined;

  constructor(
    private readonly configured: string | undefined,
    private readonly store: Store,
    private readonly logger: Logger,
    /** Told each secret agreed through the store (so that the log can scrub it). */
    private readonly onAgreed: (secret: string) => void = () => undefined,
  ) {
    if (configured) this.#codec = Promise.resolve(new CursorCodec(configured));
  }

  /** The codec in force; rejects with a StoreError while no secret could be agreed. */
  codec(): Promise<CursorCodec> {
    this.#codec ??= this.#agree(randomBytes(32).toString('base64url'))
      .then((secret) => new CursorCodec(secret))
      .catch((err: unknown) => {
        this.#codec = undefined;
        throw err;
      });
    return this.#codec;
  }

  /** Offers the secret in force again; adopts another one if the store holds another. */
  async refresh(): Promise<void> {
    if (this.configured || this.#secret === undefined) return;
    const before = this.#secret;
    const secret = await this.#agree(before);
    // The same secret keeps its codec: deriving the keys again (HKDF) every tick would change nothing.
    if (secret === before) return;
    this.logger.warn('the store holds another cursor secret (it lost its data?): cursors issued before are foreign now');
    this.#codec = Promise.resolve(new CursorCodec(secret));
  }

  /** The secret the store holds after offering `candidate`; a new one is told to onAgreed once. */
  async #agree(candidate: string): Promise<string> {
    const secret = await this.store.agreeSecret(candidate);
    if (secret !== this.#secret) this.onAgreed(secret);
    this.#secret = secret;
    return secret;
  }
}
