/**
 * The memory store: one gateway process, no Redis. Records carry an expiry time on an injected
 * clock, so tests advance time instead of sleeping. An expired record is invisible at once; the
 * periodic sweep only reclaims its memory.
 */

import { StoreError } from '../errors.js';
import type { NewSession, SessionRecord, SessionState, Store } from './types.js';

export interface MemoryStoreOptions {
  /** Milliseconds since the epoch; tests pass a clock they can advance. */
  now?: () => number;
  /** How often expired records are removed from the maps. */
  sweepIntervalMs?: number;
}

interface Entry {
  record: SessionRecord;
  expiresAt: number;
}

const DEFAULT_SWEEP_INTERVAL_MS = 30_000;

export function createMemoryStore(opts: MemoryStoreOptions = {}): Store {
  const now = opts.now ?? Date.now;
  const sessions = new Map<string, Entry>();
  const epochs = new Map<string, string>();
  let closed = false;

  // Unref'd so that an open store never keeps the process alive on its own.
  const sweeper = setInterval(sweep, opts.sweepIntervalMs ?? DEFAULT_SWEEP_INTERVAL_MS);
  sweeper.unref();

  function sweep(): void {
    const t = now();
    for (const [id, entry] of sessions) {
      if (entry.expiresAt <= t) sessions.delete(id);
    }
  }

  /** The live entry for `sessionId`, dropping it first if it has expired. */
  function live(sessionId: string): Entry | undefined {
    const entry = sessions.get(sessionId);
    if (entry === undefined) return undefined;
    if (entry.expiresAt > now()) return entry;
    sessions.delete(sessionId);
    return undefined;
  }

  /** Same failure surface as the Redis store: a closed store rejects every operation. */
  function open(op: string): void {
    if (closed) throw new StoreError(op, { cause: new Error('store is closed') });
  }

  return {
    kind: 'memory',

    async bindSession(session: NewSession, idleTtlMs: number): Promise<boolean> {
      open('bindSession');
      if (live(session.sessionId) !== undefined) return false;
      const t = now();
      const record: SessionRecord = Object.freeze({
        sessionId: session.sessionId,
        owner: session.owner,
        ownerEpoch: session.ownerEpoch,
        state: 'active',
        createdAt: t,
      });
      sessions.set(session.sessionId, { record, expiresAt: t + idleTtlMs });
      return true;
    },

    async touchSession(sessionId: string, idleTtlMs: number): Promise<SessionRecord | null> {
      open('touchSession');
      const entry = live(sessionId);
      if (entry === undefined) return null;
      if (entry.record.state === 'active') entry.expiresAt = now() + idleTtlMs;
      return entry.record;
    },

    async endSession(sessionId: string, state: Exclude<SessionState, 'active'>, tombstoneTtlMs: number): Promise<void> {
      open('endSession');
      const entry = live(sessionId);
      if (entry === undefined || entry.record.state !== 'active') return;
      entry.record = Object.freeze({ ...entry.record, state });
      entry.expiresAt = now() + tombstoneTtlMs;
    },

    async replicaEpochs(): Promise<Record<string, string>> {
      open('replicaEpochs');
      return Object.fromEntries(epochs);
    },

    async retireReplicaEpoch(replicaId: string, expected: string, next: string): Promise<string> {
      open('retireReplicaEpoch');
      const current = epochs.get(replicaId) ?? '';
      if (current !== expected) return current;
      epochs.set(replicaId, next);
      return next;
    },

    async ping(): Promise<void> {
      open('ping');
    },

    async close(): Promise<void> {
      closed = true;
      clearInterval(sweeper);
    },
  };
}
