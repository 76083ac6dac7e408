/**
 * Instances that share a store must share the cursor key (E2): one with another `cursor.secret`
 * turns every cursor of the others into foreign_cursor, and nothing else would say why. Each
 * instance publishes its key's fingerprint in the store at every fleet tick and compares it with
 * the others'. A peer that disagrees is logged once (again only after it agreed in between),
 * counted in mcp_gateway_cursor_key_mismatch_instances and named in /readyz's warnings; the
 * instance stays ready, since it serves its own cursors correctly.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { CursorKeys } from './keys.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import type { Store } from '../store/types.js';

/** A fingerprint outlives a few missed ticks of its instance; one that stopped without withdrawing it (a crash) drops out then. */
const TICKS_ALIVE = 3;
const MIN_ALIVE_MS = 10_000;

/** A name for this process among the instances sharing the store. */
export function newInstanceId(): string {
  return `${hostname()}/${process.pid}/${randomBytes(3).toString('hex')}`;
}

export class KeyAgreement {
  /** This process, among the instances sharing the store. */
  readonly instanceId: string;
  #disagreeing: readonly string[] = [];
  readonly #logged = new Set<string>();
  /** Whether a fingerprint may be in the store: a start that stopped before the first tick has none to withdraw. */
  #published = false;

  constructor(
    private readonly deps: { keys: CursorKeys; store: Store; logger: Logger; metrics: Metrics; instanceId?: string },
  ) {
    this.instanceId = deps.instanceId ?? newInstanceId();
  }

  /** Publishes this instance's fingerprint and compares; rejects with a StoreError. */
  async check(intervalMs: number): Promise<void> {
    const { fingerprint } = await this.deps.keys.codec();
    // Set before the write: one that failed may still have reached the store.
    this.#published = true;
    const all = await this.deps.store.publishKeyFingerprint(this.instanceId, fingerprint, Math.max(MIN_ALIVE_MS, intervalMs * TICKS_ALIVE));
    const disagreeing = Object.keys(all).filter((id) => id !== this.instanceId && all[id] !== fingerprint).sort();
    for (const id of disagreeing) {
      if (this.#logged.has(id)) continue;
      this.#logged.add(id);
      this.deps.logger.warn(
        { peer: id, fingerprint, peerFingerprint: all[id] },
        'another gateway instance on this store uses another cursor key: cursors of one are foreign_cursor on the other; give every instance the same cursor.secret',
      );
    }
    for (const id of this.#logged) if (!disagreeing.includes(id)) this.#logged.delete(id);
    this.#disagreeing = disagreeing;
    this.deps.metrics.cursorKeyMismatch.set(disagreeing.length);
  }

  /**
   * At a graceful stop: this instance's fingerprint leaves the store now, so that the others stop
   * counting it (a mismatch it caused clears at their next tick, not once its entry expires). A
   * store that does not answer is logged; the entry then expires as after a crash.
   */
  async withdraw(): Promise<void> {
    if (!this.#published) return;
    await this.deps.store.withdrawKeyFingerprint(this.instanceId).catch((err: unknown) => {
      this.deps.logger.warn({ err }, 'could not withdraw the cursor key fingerprint from the store: the other instances count this one until it expires');
    });
  }

  /** For /readyz: what is wrong without making the instance unready. */
  warnings(): string[] {
    const n = this.#disagreeing.length;
    if (n === 0) return [];
    return [`cursor key mismatch: ${n} other instance(s) on this store use another cursor.secret (${this.#disagreeing.join(', ')}); their cursors are foreign here`];
  }
}
