/**
 * This instance's liveness (docs/journal.md#instance-liveness): one record per instance, renewed
 * on a schedule of its own, that proves the pumps of its journaled streams alive whatever their
 * own leases say. A stream's lease renewed late under load (its renewal behind the instance's other
 * work) is then not taken for a dead instance; only an instance whose liveness lapsed too is gone.
 */
import type { Metrics } from '../metrics.js';
import type { IncarnationRecord, InstanceLiveness, Store } from '../store/types.js';

/**
 * The instance's event loop may stall this long (a burst of work) and its streams still count as
 * read: it reads them again once it runs. Stalled longer, it is taken as hung and its streams
 * taken over.
 */
export const LIVENESS_MAX_STALL_MS = 30_000;

/**
 * A lease this late while its instance lives is not lateness: its release never landed (the store
 * failed it when the stream ended). Past what a live instance's lease can lag: its liveness lapses
 * once its loop has stalled for LIVENESS_MAX_STALL_MS, plus one lease.
 */
export const LEASE_LATE_MAX_MS = 60_000;

/**
 * A stream's pump lease lapsed, lately enough that its instance may be alive and the renewal only
 * late: whether it is, its liveness tells (store.instanceAlive).
 */
export function leaseLate(record: Pick<IncarnationRecord, 'pump' | 'pumpUntil'>, now: number): boolean {
  return record.pump !== '' && record.pumpUntil <= now && record.pumpUntil > now - LEASE_LATE_MAX_MS;
}

/** Starts renewing: for `leaseMs` (resumption.journal.leaseMs at start), every third of it. */
export function keepAlive(store: Store, instanceId: string, leaseMs: number, metrics: Metrics): InstanceLiveness {
  const late = metrics.leaseRenewalLateness.labels({ lease: 'instance' });
  return store.keepInstanceAlive(instanceId, {
    ttlMs: leaseMs,
    everyMs: leaseMs / 3,
    maxStallMs: LIVENESS_MAX_STALL_MS,
    renewed: (ms) => late.observe(ms / 1000),
  });
}
