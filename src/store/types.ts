/**
 * The store holds what every gateway instance must agree on: which replica owns which session,
 * and the fleet-wide epoch of each replica (a replica declared gone gets a new epoch, and every
 * session bound under an older epoch is lost with it).
 *
 * Two implementations: memory (one gateway process) and Redis (a fleet of gateways). Both pass the
 * same contract suite (test/store/contract.ts). Every failure surfaces as a StoreError
 * (src/errors.ts).
 */

export type SessionState = 'active' | 'terminated' | 'lost';

export interface SessionRecord {
  readonly sessionId: string;
  /** Id of the replica that answered `initialize` (configuration `replicas[].id`). */
  readonly owner: string;
  /** The owner's fleet epoch when the session was bound; a different current epoch means lost. */
  readonly ownerEpoch: string;
  readonly state: SessionState;
  /** Milliseconds since the epoch, when the session was bound. */
  readonly createdAt: number;
}

export interface NewSession {
  readonly sessionId: string;
  readonly owner: string;
  readonly ownerEpoch: string;
}

export interface Store {
  readonly kind: 'memory' | 'redis';

  /**
   * Records a new active session that expires after `idleTtlMs` without activity.
   * Returns false, and changes nothing, when a record with that id exists (in any state).
   */
  bindSession(session: NewSession, idleTtlMs: number): Promise<boolean>;

  /**
   * Reads a session. An active one has its idle TTL extended to `idleTtlMs` in the same atomic
   * step; an ended one (a tombstone) is returned unchanged. Null when the store holds nothing.
   */
  touchSession(sessionId: string, idleTtlMs: number): Promise<SessionRecord | null>;

  /**
   * Ends a session. The record stays as a tombstone, with `state`, for `tombstoneTtlMs`, so that
   * a late request can be told why. Ending an unknown session does nothing; ending an ended one
   * keeps its first state (a session lost stays lost even if the client then sends DELETE).
   */
  endSession(sessionId: string, state: 'terminated' | 'lost', tombstoneTtlMs: number): Promise<void>;

  /** Current epochs of the replicas that have one; a replica never declared gone has none. */
  replicaEpochs(): Promise<Record<string, string>>;

  /**
   * Compare-and-set of a replica's epoch: when its current epoch is `expected` ('' for none),
   * it becomes `next`. Returns the epoch in force afterwards, whoever set it, so that several
   * gateways declaring the same replica gone at once retire its epoch only once.
   */
  retireReplicaEpoch(replicaId: string, expected: string, next: string): Promise<string>;

  /** Resolves when the store answers; rejects with a StoreError otherwise. */
  ping(): Promise<void>;

  close(): Promise<void>;
}
