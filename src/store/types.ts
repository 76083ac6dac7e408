/**
 * The store holds what every gateway instance must agree on: which replica owns which session;
 * each SSE stream's incarnation (its owner, the upstream id behind each position its cursors name,
 * the attachment that may write it, the POST requests still unanswered); the fleet-wide epoch of
 * each replica (a replica declared gone gets a new epoch, and every session bound under an older
 * epoch is lost with it); which replica holds each task of the 2026-07-28 era (§9 M2), under a
 * digest of its id; and the cursor secret, when none is configured. It tells every instance when
 * a binding changes (watchBindings), so that each may cache the bindings it routes by.
 *
 * Two implementations: memory (one gateway process) and Redis (a fleet of gateways). Both pass the
 * same contract suite (test/store/contract.ts). Every failure surfaces as a StoreError
 * (src/errors.ts).
 */

import type { JournalFrames } from './journal-frames.js';

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
  /**
   * A session of the 2024-11-05 HTTP+SSE transport (§9): the path and query on the owner where its
   * messages are posted, from the owner's `endpoint` event. Absent for a Streamable HTTP session.
   */
  readonly endpoint?: string;
  /**
   * J6: the principal the session was bound to at `initialize` (trust/principal.ts), as the
   * owner last accepted it. Absent for a session bound before principals were recorded.
   */
  readonly principal?: string;
}

export interface NewSession {
  readonly sessionId: string;
  readonly owner: string;
  readonly ownerEpoch: string;
  /** See SessionRecord.endpoint. */
  readonly endpoint?: string;
  /** See SessionRecord.principal. */
  readonly principal?: string;
}

/**
 * The replica that answered a `tools/call` with a task (§9 M2). Recorded under a digest of the
 * task id (eras/tasks.ts), never the id itself: a task id is a bearer secret, and a dump of the
 * store must not hand it out.
 */
export interface TaskRecord {
  readonly owner: string;
  /** The owner's fleet epoch when the task was recorded; a different current epoch means lost. */
  readonly ownerEpoch: string;
}

/** A JSON-RPC request id, as the client sent it. */
export type JsonRpcId = string | number;

export type IncarnationKind = 'get' | 'post';

export type IncarnationState = 'open' | 'closed' | 'diverged';

/**
 * One SSE stream as the gateway saw it begin (CONTRACT.md §4, §5): owned by the replica that
 * produced it, numbered by the gateway. Position `seq` is the event that carried cursor `seq`;
 * seq 0 is the position before the first event and is never a cursor.
 */
export interface IncarnationRecord {
  readonly id: string;
  readonly sessionId: string;
  /** Replica id of the owner. */
  readonly owner: string;
  readonly kind: IncarnationKind;
  /**
   * open: may go on; closed: the gateway ended it on purpose and nothing will follow; diverged:
   * its owner's log numbered events anew (CONTRACT.md §4 E6): what was recorded stays readable,
   * but nothing of the owner continues it.
   */
  readonly state: IncarnationState;
  /** The last sequence number issued (0 before the first event). */
  readonly head: number;
  /** The lowest position still recorded; positions base..head have their upstream ids. */
  readonly base: number;
  /** Bumped by every attachment (the first stream and each continuation): only the newest records. */
  readonly attach: number;
  /** POST streams: the request ids whose responses have not been forwarded yet. */
  readonly pending: readonly JsonRpcId[];
  /** J3: instance id of the pump ('' when none) and when its lease ends (ms since the epoch; 0 none). */
  readonly pump: string;
  readonly pumpUntil: number;
  /** J3: until when (ms since the epoch) some instance has a client attached by tailing; 0 none. */
  readonly tailUntil: number;
  /**
   * J2: true while the pump holds the stream with no client attached to it in its process (set by
   * the pump through setHeld; cleared when a client attaches there, or with the pump's lease).
   */
  readonly held: boolean;
  /**
   * The last position written to a client of this stream, as its pump (setHeld) or a tailing
   * instance (endTail) last told: where a client that takes the held stream over starts. 0 before any.
   */
  readonly clientSeq: number;
  /**
   * The trace context (W3C traceparent) of the span that carries the stream on its pump's
   * instance, as the pump told when it held the stream (setHeld), with traces on: a continuation
   * through another instance links its span to it. Absent when none was told.
   */
  readonly holderSpan?: string;
  /**
   * J1: true when every event position base..head has its journaled bytes (position 0 is no
   * event). False once a batch without payloads was recorded, until its positions are trimmed.
   */
  readonly journaled: boolean;
}

export interface NewIncarnation {
  readonly id: string;
  readonly sessionId: string;
  readonly owner: string;
  readonly kind: IncarnationKind;
  /** POST streams: the ids of the JSON-RPC requests in the body. */
  readonly pending?: readonly JsonRpcId[];
  /** E4: a GET opened without Last-Event-ID supersedes the session's earlier GET incarnations. */
  readonly supersede: boolean;
  /**
   * J2/J3: the instance that will pump the stream, its lease set from the start (as a batch with
   * `pump` sets it), so that a stream that carries no event yet is known pumped too.
   */
  readonly pump?: { readonly instanceId: string; readonly leaseMs: number };
}

export interface EventBatch {
  /** The attachment that writes: a batch of a stale attachment is refused. */
  readonly attach: number;
  /** Must be head + 1: sequence numbers are never issued twice (E2, E3). */
  readonly fromSeq: number;
  /**
   * Upstream id of each event from fromSeq on; null for an event the gateway made itself. Never
   * with LF (an SSE id cannot hold one): a batch with such an id is refused with a StoreError.
   */
  readonly upstreamIds: readonly (string | null)[];
  /** Request ids whose responses are in this batch. */
  readonly responded: readonly JsonRpcId[];
  /**
   * Creates the incarnation when it is not recorded yet, in the same atomic step as the batch
   * (a stream whose incarnation need not exist before its first event: POST streams). Only with
   * attach 1 and fromSeq 1. Never supersedes anything.
   */
  readonly create?: { readonly owner: string; readonly kind: IncarnationKind; readonly pending: readonly JsonRpcId[] };
  /**
   * J1: each event's bytes as journaled (its SSE block without the `id:` line, as the rewriter
   * serializes it), framed (journal-frames.ts), as many as upstreamIds (any other length is refused with a
   * StoreError). Absent: nothing is journaled (journal off, or a modern-era stream), and the
   * incarnation is no longer `journaled` until these positions are trimmed. Written in the same
   * atomic step (Redis: the same script, one round trip) as the positions.
   */
  readonly payloads?: JournalFrames;
  /** J2/J3: the instance that pumps this stream (reads the replica); its lease is renewed for leaseMs. */
  readonly pump?: { readonly instanceId: string; readonly leaseMs: number };
}

export type RecordResult = 'ok' | 'stale' | 'missing';

/** What a resumption needs to know about a cursor's incarnation, read in one step. */
export interface IncarnationView {
  readonly record: IncarnationRecord;
  /** The session's newest GET incarnation (E4), if any. */
  readonly currentGet: string | undefined;
  /** Upstream ids of positions after..head, in order (null: made by the gateway). */
  readonly after: readonly (string | null)[];
  /** Upstream id at position `afterSeq` itself (the cursor's); undefined when that position is not recorded. */
  readonly at: string | null | undefined;
}

/** What readJournal returns: the record and the journaled events after a position. */
export interface JournalRead {
  readonly record: IncarnationRecord;
  /**
   * Journaled events after `afterSeq`, in order, contiguous from afterSeq+1, at most `limit`.
   * Empty when position afterSeq+1 is not journaled: below the window (afterSeq < base - 1),
   * recorded without payloads, or not yet recorded (afterSeq >= head).
   */
  readonly events: readonly { readonly seq: number; readonly payload: string }[];
}

/** A note about one incarnation's journal, from any gateway instance sharing the store. */
export type JournalNote =
  | { readonly kind: 'head'; readonly head: number } // new events were journaled, up to head
  | { readonly kind: 'closed' } // closeIncarnation
  | { readonly kind: 'superseded' } // a new GET of the session superseded it (E4)
  | { readonly kind: 'release' }; // releaseHeldGet: let the stream go if it is held (no client attached)

/**
 * What releaseHeldGet did: `asked` (the note went to the session's current GET incarnation, whose
 * pump's lease runs and which no client tails), `tailed` (a client is attached to it through a
 * tailing instance: not asked), `none` (no current GET incarnation open with a pump's lease running).
 */
export type HeldGetRelease = 'asked' | 'tailed' | 'none';

/** How many of a session's incarnations are listed at most (the Redis store indexes the newest this many). */
export const INCARNATIONS_LISTED = 256;

/** A session as an operator inspects it: read as it stands, never touched by the read. */
export interface SessionInspection {
  /** The record, in any state (a tombstone too); null when the store holds none. */
  readonly session: SessionRecord | null;
  /** The session's newest GET incarnation (E4), if any. */
  readonly currentGet: string | undefined;
  /** Its incarnations still recorded, newest first, at most the limit asked for. */
  readonly incarnations: readonly IncarnationRecord[];
}

/** A change of bindings, told to every gateway instance that watches the store. */
export type BindingNote =
  /** The session ended (DELETE, or lost): it is no longer active. */
  | { readonly kind: 'ended'; readonly sessionId: string }
  /** The replica's epoch was retired: every session bound under an older one is lost (R4). */
  | { readonly kind: 'retired'; readonly replicaId: string; readonly epoch: string };

export interface BindingWatcher {
  /** A binding changed, through any instance. */
  changed(note: BindingNote): void;
  /**
   * Whether notes reach this watcher: false from the moment some may be missed (the connection
   * that carries them dropped), true once every change is noted again.
   */
  flowing(on: boolean): void;
  /** The store's connection dropped: what was read from it may no longer hold (it may be back empty). */
  reset(): void;
}

/** One session to read in refreshSessions, its idle TTL extended or not. */
export interface SessionRefresh {
  readonly sessionId: string;
  readonly touch: boolean;
}

/** How keepInstanceAlive renews (docs/journal.md#instance-liveness). */
export interface LivenessOptions {
  readonly ttlMs: number;
  readonly everyMs: number;
  /**
   * The instance's own event loop may lag this long (its beats to the renewing path late) before
   * it is taken as hung and let lapse: a stalled loop still holds its streams, a hung one must not.
   */
  readonly maxStallMs: number;
  /** After each renewal that the store answered: how late it landed against its schedule, in ms. */
  readonly renewed: (lateMs: number) => void;
}

export interface InstanceLiveness {
  /** Stops renewing and withdraws the liveness; resolves once the store answered (or failed). */
  stop(): Promise<void>;
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
   * touchSession and, when an incarnation is named, readIncarnation of it in the same atomic step
   * (one round trip for a resumption's decision). The view is read whatever the session's state.
   */
  touchAndRead(
    sessionId: string,
    idleTtlMs: number,
    read?: { incarnationId: string; afterSeq: number },
  ): Promise<{ session: SessionRecord | null; view: IncarnationView | null }>;

  /**
   * Reads several sessions in one round trip, in order: each as touchSession would when `touch`,
   * as it stands otherwise (its TTL left alone). Null for a session the store does not hold.
   */
  refreshSessions(reads: readonly SessionRefresh[], idleTtlMs: number): Promise<(SessionRecord | null)[]>;

  /**
   * J6: binds an active session to `principal` (one its owner accepted for it: a refreshed
   * credential of the same user). An ended or unknown session is left as it is.
   */
  setPrincipal(sessionId: string, principal: string): Promise<void>;

  /**
   * Ends a session. The record stays as a tombstone, with `state`, for `tombstoneTtlMs`, so that
   * a late request can be told why. Ending an unknown session does nothing; ending an ended one
   * keeps its first state (a session lost stays lost even if the client then sends DELETE).
   * Every watcher is told (`ended`) when the session was active.
   */
  endSession(sessionId: string, state: 'terminated' | 'lost', tombstoneTtlMs: number): Promise<void>;

  /**
   * Records the task whose id digests to `taskKey` as held by `task.owner`, for `ttlMs`. Returns
   * false, and changes nothing, when that key is recorded already (whoever holds it).
   */
  bindTask(taskKey: string, task: TaskRecord, ttlMs: number): Promise<boolean>;

  /** The task's record; null when none is held (never recorded, or expired). */
  readTask(taskKey: string): Promise<TaskRecord | null>;

  /** Current epochs of the replicas that have one; a replica never declared gone has none. */
  replicaEpochs(): Promise<Record<string, string>>;

  /**
   * Compare-and-set of a replica's epoch: when its current epoch is `expected` ('' for none),
   * it becomes `next`. Returns the epoch in force afterwards, whoever set it, so that several
   * gateways declaring the same replica gone at once retire its epoch only once. Every watcher is
   * told (`retired`, with the new epoch) when it changed.
   */
  retireReplicaEpoch(replicaId: string, expected: string, next: string): Promise<string>;

  /**
   * Records a new incarnation (attach 1, head 0, open) that expires with `ttlMs` of inactivity,
   * and, when `supersede`, makes it the session's current GET incarnation, in one atomic step.
   */
  openIncarnation(incarnation: NewIncarnation, ttlMs: number): Promise<void>;

  /**
   * A continuation attaches a new connection to an incarnation: bumps `attach`, so that batches
   * from the previous connection are refused from now on, and returns it with the incarnation as
   * it stands after the bump (positions after `afterSeq`), in one atomic step. Null when not recorded.
   */
  attachIncarnation(
    sessionId: string,
    incarnationId: string,
    ttlMs: number,
    afterSeq: number,
  ): Promise<{ attach: number; view: IncarnationView } | null>;

  /**
   * Appends a batch of positions atomically: only when `attach` is current and `fromSeq` is
   * head + 1. Keeps at most `maxPositions` positions (the oldest go, raising base). Sets the
   * incarnation's TTL to `ttlMs`, or leaves it when `ttlMs` is 0 (a batch with `create` must give one). 'stale': another attachment or a lost race; 'missing': not recorded.
   * Idempotent: a batch that already landed (the same ids at the same positions, for the current
   * attachment) is 'ok' again, so that a write retried after a timeout does not end its stream.
   * With `batch.create`, an incarnation that has no record at all is first created as openIncarnation
   * would without supersede, in the same atomic step (one round trip instead of two); for any other
   * the batch is handled as without `create` (a retry of the first batch is 'ok'; a closed, stale or
   * half-evicted incarnation is never recreated). A batch with `create` must be attach 1 and fromSeq
   * 1: any other is refused with a StoreError before the store is touched.
   *
   * J1: with `batch.payloads`, the events' bytes are journaled at the same positions. The journal
   * keeps at most `maxJournalBytes` of payload bytes (UTF-8) per incarnation, unbounded when
   * absent: the oldest positions go first, and `base` rises for the positions and the journal
   * together, so one window describes both (the head is always kept). A retry is 'ok' only when
   * its payloads are the ones that landed. A batch with payloads notes 'head' to the watchers.
   * With `batch.pump`, the pump lease is set to that instance until now + leaseMs.
   */
  recordEvents(
    sessionId: string,
    incarnationId: string,
    batch: EventBatch,
    maxPositions: number,
    ttlMs: number,
    maxJournalBytes?: number,
  ): Promise<RecordResult>;

  /** The incarnation, the session's current GET, and the positions after `afterSeq`. */
  readIncarnation(sessionId: string, incarnationId: string, afterSeq: number): Promise<IncarnationView | null>;

  /**
   * Marks an incarnation closed (ended on purpose), or `diverged` (E6), and notes 'closed' to its
   * watchers; unknown ones are ignored. A diverged incarnation is never closed again.
   */
  closeIncarnation(sessionId: string, incarnationId: string, state?: 'closed' | 'diverged'): Promise<void>;

  /** J3: journaled events after afterSeq (at most limit) with the record, in one step; null: not recorded. */
  readJournal(sessionId: string, incarnationId: string, afterSeq: number, limit: number): Promise<JournalRead | null>;

  /**
   * J3: notes about one incarnation, from any gateway instance sharing the store (Redis: sharded
   * pub/sub on a channel in the session's hash tag, so in its Cluster slot; one subscriber
   * connection per gateway, per Cluster shard, created on the first watch and shared by all).
   * Best effort: a lost note only delays (callers re-read on a timer), and a note may arrive
   * before the subscription is in force only if it was published after this call. Returns unwatch.
   * recordEvents with payloads notes 'head'; closeIncarnation notes 'closed'; openIncarnation
   * with supersede notes 'superseded' to the session's previous current GET incarnation;
   * releaseHeldGet notes 'release'.
   */
  watchJournal(sessionId: string, incarnationId: string, listener: (note: JournalNote) => void): () => void;

  /** J3: a tailing instance says a client is attached until now + leaseMs (the pump's hold restarts). Unknown ones are ignored. */
  touchTail(sessionId: string, incarnationId: string, leaseMs: number): Promise<void>;

  /**
   * J2 with E4: asks the pump of the session's current GET incarnation, whichever instance it is
   * on, to let the stream go if it is held (notes 'release'; the pump alone knows whether a client
   * is attached to it in its process), unless a client tails it (tailUntil after now), in one
   * atomic step. For a new stream whose fresh GET the owner refuses with 409 while the held one is
   * open (CONTRACT.md §5, §8).
   */
  releaseHeldGet(sessionId: string): Promise<HeldGetRelease>;

  /**
   * J2: the pump tells whether it holds the stream with no client attached (`clientSeq`: the last
   * position written to the client that left) or has a client again (undefined). Only when
   * `instanceId` holds the pump's lease; unknown incarnations are ignored. `holderSpan` (traces
   * on: the stream's span as a traceparent) is kept on the record as its holderSpan.
   */
  setHeld(sessionId: string, incarnationId: string, instanceId: string, clientSeq: number | undefined, holderSpan?: string): Promise<void>;

  /**
   * J3: a client attached by tailing left, having been written up to `clientSeq`: its tail lease
   * ends now (tailUntil no later than now) and clientSeq rises to it. Unknown ones are ignored.
   */
  endTail(sessionId: string, incarnationId: string, clientSeq: number): Promise<void>;

  /** The session's current GET incarnation (E4) as it stands; null when it has none or it is not recorded. */
  readCurrentGet(sessionId: string): Promise<IncarnationRecord | null>;

  /** J3: the pump gives up its lease (hold ended, stream ended), and the stream is no longer held; only when `instanceId` holds it. */
  releasePump(sessionId: string, incarnationId: string, instanceId: string): Promise<void>;

  /** Extends an open stream's incarnation, so that it lives as long as its session. */
  touchIncarnation(sessionId: string, incarnationId: string, ttlMs: number): Promise<void>;

  /**
   * The fleet's cursor secret: the first candidate ever offered wins, and every later call
   * returns it (E2: gateways sharing a store agree on one when none is configured).
   */
  agreeSecret(candidate: string): Promise<string>;

  /**
   * Publishes this gateway instance's cursor-key fingerprint (a digest, never the key), alive for
   * `ttlMs` unless published again, and returns the fingerprint of every instance alive, this one
   * included, by instance id, in one atomic step. Instances that stopped publishing drop out.
   */
  publishKeyFingerprint(instanceId: string, fingerprint: string, ttlMs: number): Promise<Record<string, string>>;

  /**
   * Removes this instance's fingerprint at once (a graceful stop), rather than leaving it to expire:
   * the others stop counting it at their next publish. Nothing when it has none.
   */
  withdrawKeyFingerprint(instanceId: string): Promise<void>;

  /**
   * J3: this gateway instance lives (docs/journal.md#instance-liveness) for `ttlMs` from now,
   * unless renewed. What proves that the pumps of its streams still read them, whatever their own
   * leases say.
   */
  renewInstance(instanceId: string, ttlMs: number): Promise<void>;

  /** J3: whether the instance's liveness (renewInstance) runs now. */
  instanceAlive(instanceId: string): Promise<boolean>;

  /** The instance's liveness ends at once (a graceful stop). Nothing when it has none. */
  withdrawInstance(instanceId: string): Promise<void>;

  /**
   * Renews the instance's liveness every `everyMs` for `ttlMs`, on a path of its own that no other
   * work of the instance delays (Redis: a thread with its own connection), until stop(), which
   * withdraws it. Not a store round trip itself: synchronous.
   */
  keepInstanceAlive(instanceId: string, options: LivenessOptions): InstanceLiveness;

  /**
   * What the store holds of a session, for operators (admin endpoint, explain): its record, its
   * current GET, and its incarnations still recorded, newest first, at most `limit` (itself at
   * most INCARNATIONS_LISTED). Changes nothing: no TTL is extended.
   */
  inspectSession(sessionId: string, limit: number): Promise<SessionInspection>;

  /** The cursor secret agreed through the store (agreeSecret), without offering one; null when none is. */
  readSecret(): Promise<string | null>;

  /**
   * The store's generation: the first candidate ever offered wins and every later call returns it,
   * until the store loses its data (a restart or failover to an empty node); the next candidate
   * then wins. A generation that changed tells an instance that what it read before is gone.
   */
  agreeGeneration(candidate: string): Promise<string>;

  /**
   * Tells `watcher` of every binding change, through any instance, until the returned function is
   * called. `flowing(true)` comes once the notes flow (at once, or once subscribed).
   */
  watchBindings(watcher: BindingWatcher): () => void;

  /** Resolves when the store answers; rejects with a StoreError otherwise. */
  ping(): Promise<void>;

  /**
   * At start: resolves once the store answers and lets the gateway do everything it does (every
   * command, on its keys and channels); rejects with StoreRefusedError, naming the cause, when it
   * refuses the gateway for good (a certificate, the credentials, a permission), or with a
   * StoreError when it does not answer within `timeoutMs`. Meanwhile the store's connection errors
   * are the check's to tell, not reported as they happen.
   */
  checkAccess(timeoutMs: number): Promise<void>;

  close(): Promise<void>;
}
