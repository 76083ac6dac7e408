/**
 * Each replica's fleet-wide epoch (R4): a replica declared gone gets a new epoch in the store, and
 * every session bound under the old one is lost, on every gateway instance. Each instance caches
 * the epochs it knows; the store decides.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from '../logger.js';
import type { Store } from '../store/types.js';

/** What this instance knows of one replica's epoch. */
export interface CachedEpoch {
  readonly replicaId: string;
  /** The epoch known to this instance; '' until the replica is first declared gone. */
  epoch: string;
  /** Declared gone while the store could not be told: retried at every tick. */
  retirePending: boolean;
}

export function cachedEpoch(replicaId: string): CachedEpoch {
  return { replicaId, epoch: '', retirePending: false };
}

export class EpochCache {
  readonly #store: Store;
  readonly #logger: Logger;

  constructor(store: Store, logger: Logger) {
    this.#store = store;
    this.#logger = logger;
  }

  /** Reads every epoch from the store, except those of retirements still to be recorded. Rejects with a StoreError. */
  async refresh(cached: Iterable<CachedEpoch>): Promise<void> {
    const epochs = await this.#store.replicaEpochs();
    for (const entry of cached) {
      if (!entry.retirePending) entry.epoch = epochs[entry.replicaId] ?? '';
    }
  }

  /** Another instance retired the replica's epoch: known here at once, unless a retirement of ours is pending. */
  learn(entry: CachedEpoch, epoch: string): void {
    if (!entry.retirePending) entry.epoch = epoch;
  }

  /** The replica is gone: retires its epoch, or keeps the retirement pending when the store fails. */
  async retire(entry: CachedEpoch): Promise<void> {
    entry.retirePending = true;
    await this.#record(entry);
  }

  /** Tries a pending retirement again. */
  async retryPending(entry: CachedEpoch): Promise<void> {
    if (entry.retirePending) await this.#record(entry);
  }

  /** Retires the epoch in the store, once across the fleet (compare-and-set). */
  async #record(entry: CachedEpoch): Promise<void> {
    const next = randomBytes(9).toString('base64url');
    try {
      entry.epoch = await this.#store.retireReplicaEpoch(entry.replicaId, entry.epoch, next);
      entry.retirePending = false;
      this.#logger.warn({ replica: entry.replicaId }, 'replica declared gone: its sessions are lost');
    } catch (err) {
      this.#logger.error({ err, replica: entry.replicaId }, 'cannot record that the replica is gone; retrying');
    }
  }
}
