/**
 * Instances that share a store must accept each other's cursors (E2): one whose signing key the
 * others do not verify turns its cursors into foreign_cursor there, and nothing else would say
 * why. Each instance publishes its keys' fingerprints in the store at every fleet tick, the
 * signing key's first and then those that only verify (`sign,verify,...`; an instance of before
 * rotation publishes its one key), and compares them with the others'. A peer disagrees when its
 * signing key is not among this instance's keys, or this instance's signing key is not among its
 * own: during a rotation (docs/security.md#cursor-keys) instances sign with different keys and
 * still agree. A peer that disagrees is logged once (again only after it agreed in between),
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

  /** Publishes this instance's fingerprints and compares; rejects with a StoreError. */
  async check(intervalMs: number): Promise<void> {
    const own = (await this.deps.keys.codec()).fingerprints;
    // Set before the write: one that failed may still have reached the store.
    this.#published = true;
    const all = await this.deps.store.publishKeyFingerprint(this.instanceId, publishedKeys(own), Math.max(MIN_ALIVE_MS, intervalMs * TICKS_ALIVE));
    const disagreeing: string[] = [];
    for (const id of Object.keys(all).sort()) {
      if (id === this.instanceId) continue;
      const peer = parsePublishedKeys(all[id]!);
      const theirsForeignHere = !own.includes(peer[0]!);
      const oursForeignThere = !peer.includes(own[0]!);
      if (!theirsForeignHere && !oursForeignThere) continue;
      disagreeing.push(id);
      if (this.#logged.has(id)) continue;
      this.#logged.add(id);
      const which = theirsForeignHere && oursForeignThere ? 'each one\'s cursors are foreign_cursor on the other' : theirsForeignHere ? 'its cursors are foreign_cursor here' : "this instance's cursors are foreign_cursor there";
      this.deps.logger.warn(
        { peer: id, fingerprint: own[0], verifies: own.slice(1), peerFingerprint: peer[0], peerVerifies: peer.slice(1) },
        `another gateway instance on this store uses another cursor key: ${which}; every instance must verify the key that each one signs with (cursor.secret, cursor.previousSecrets)`,
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
    return [`cursor key mismatch: ${n} other instance(s) on this store sign with a key that this one does not verify, or do not verify the key that this one signs with (${this.#disagreeing.join(', ')}); cursors of one are foreign on the other`];
  }
}

/** What an instance publishes of its keys: their fingerprints (base64url, never a comma), the signing key's first. */
export function publishedKeys(fingerprints: readonly string[]): string {
  return fingerprints.join(',');
}

/** The fingerprints an instance published, the signing key's first (one alone: a key that signs and no other). */
export function parsePublishedKeys(published: string): string[] {
  return published.split(',');
}
