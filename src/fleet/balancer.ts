/**
 * Which replica a new session goes to: an `up` one by the configured policy, else a `suspect`
 * one (better than refusing while it may answer); none when every candidate is down.
 */
import type { Config } from '../config/schema.js';
import type { Health } from './health.js';

export type BalancerPolicy = Config['balancer'];

export interface Candidate {
  readonly status: Health;
  /** Sessions this instance bound to it and saw alive within the idle TTL (least-sessions). */
  readonly sessions: number;
}

export class Balancer {
  /** Round robin's turn, shared by every pick so that the turn moves on whichever pool it was. */
  #next = 0;

  pick<C extends Candidate>(candidates: readonly C[], policy: BalancerPolicy): C | undefined {
    const up = candidates.filter((c) => c.status === 'up');
    const pool = up.length > 0 ? up : candidates.filter((c) => c.status === 'suspect');
    if (pool.length === 0) return undefined;
    if (policy === 'least-sessions') return pool.reduce((best, c) => (c.sessions < best.sessions ? c : best));
    return pool[this.#next++ % pool.length];
  }
}

/** The sessions one replica holds for least-sessions: each with when it was last seen alive. */
export class SessionTally {
  readonly #seen = new Map<string, number>();

  seen(sessionId: string, at: number): void {
    this.#seen.set(sessionId, at);
  }

  ended(sessionId: string): void {
    this.#seen.delete(sessionId);
  }

  clear(): void {
    this.#seen.clear();
  }

  /** How many were seen since `oldest`; the others (idle past their TTL) are forgotten. */
  count(oldest: number): number {
    for (const [id, at] of this.#seen) if (at < oldest) this.#seen.delete(id);
    return this.#seen.size;
  }
}
