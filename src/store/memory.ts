/**
 * The memory store: one gateway process, no Redis. Records carry an expiry time on an injected
 * clock, so tests advance time instead of sleeping. An expired record is invisible at once; the
 * periodic sweep only reclaims its memory. Every operation runs to completion without awaiting,
 * so each is as atomic as a Lua script in the Redis store.
 */

import { StoreError } from '../errors.js';
import { EventEmitter } from 'node:events';
import type {
  BindingNote,
  BindingWatcher,
  EventBatch,
  HeldGetRelease,
  IncarnationKind,
  IncarnationState,
  IncarnationRecord,
  IncarnationView,
  InstanceLiveness,
  JournalNote,
  JournalRead,
  JsonRpcId,
  LivenessOptions,
  NewIncarnation,
  NewSession,
  RecordResult,
  SessionInspection,
  SessionRecord,
  SessionRefresh,
  SessionState,
  Store,
  TaskRecord,
} from './types.js';
import { INCARNATIONS_LISTED } from './types.js';
import { renewOnSchedule } from './renewals.js';

export interface MemoryStoreOptions {
  /** Milliseconds since the epoch; tests pass a clock they can advance. */
  now?: () => number;
  /** How often expired records are removed from the maps. */
  sweepIntervalMs?: number;
}

interface Entry {
  record: SessionRecord;
  expiresAt: number;
  /** The session's current GET incarnation (E4). */
  getInc?: string;
}

interface IncarnationEntry {
  readonly sessionId: string;
  readonly owner: string;
  readonly kind: IncarnationKind;
  state: IncarnationState;
  head: number;
  base: number;
  attach: number;
  pending: JsonRpcId[];
  /** Upstream ids of positions base..head (index = seq - base); position 0 has none. */
  ids: (string | null)[];
  /** Journaled bytes of positions base..head (index = seq - base); null where none. */
  payloads: (string | null)[];
  /** Sum of the UTF-8 lengths of `payloads`. */
  journalBytes: number;
  /** The highest position recorded without its bytes (0: none): only later ones can be read. */
  unjournaled: number;
  pump: string;
  pumpUntil: number;
  tailUntil: number;
  held: boolean;
  clientSeq: number;
  holderSpan?: string;
  expiresAt: number;
}

const DEFAULT_SWEEP_INTERVAL_MS = 30_000;

export function createMemoryStore(opts: MemoryStoreOptions = {}): Store {
  const now = opts.now ?? Date.now;
  const sessions = new Map<string, Entry>();
  const epochs = new Map<string, string>();
  /** Keyed by incarnationKey(sessionId, incarnationId): an incarnation belongs to its session. */
  const incarnations = new Map<string, IncarnationEntry>();
  const tasks = new Map<string, { record: TaskRecord; expiresAt: number }>();
  let secret: string | undefined;
  let generation: string | undefined;
  const watchers = new Set<BindingWatcher>();
  const fingerprints = new Map<string, { fingerprint: string; expiresAt: number }>();
  /** Each instance's liveness: until when (renewInstance). */
  const alive = new Map<string, number>();
  let closed = false;
  /** watchJournal's listeners, by incarnationKey(): notes are delivered in this process only. */
  const notes = new EventEmitter();
  notes.setMaxListeners(0);

  // Unref'd so that an open store never keeps the process alive on its own.
  const sweeper = setInterval(sweep, opts.sweepIntervalMs ?? DEFAULT_SWEEP_INTERVAL_MS);
  sweeper.unref();

  function sweep(): void {
    const t = now();
    for (const [id, entry] of sessions) {
      if (entry.expiresAt <= t) sessions.delete(id);
    }
    for (const [key, entry] of incarnations) {
      if (entry.expiresAt <= t) incarnations.delete(key);
    }
    for (const [key, entry] of tasks) {
      if (entry.expiresAt <= t) tasks.delete(key);
    }
  }

  /** The live task record, dropping it first if it has expired. */
  function liveTask(taskKey: string): TaskRecord | undefined {
    const entry = tasks.get(taskKey);
    if (entry === undefined) return undefined;
    if (entry.expiresAt > now()) return entry.record;
    tasks.delete(taskKey);
    return undefined;
  }

  /** The live entry for `sessionId`, dropping it first if it has expired. */
  function live(sessionId: string): Entry | undefined {
    const entry = sessions.get(sessionId);
    if (entry === undefined) return undefined;
    if (entry.expiresAt > now()) return entry;
    sessions.delete(sessionId);
    return undefined;
  }

  /** The live incarnation, dropping it first if it has expired. */
  function liveIncarnation(sessionId: string, incarnationId: string): IncarnationEntry | undefined {
    const key = incarnationKey(sessionId, incarnationId);
    const entry = incarnations.get(key);
    if (entry === undefined) return undefined;
    if (entry.expiresAt > now()) return entry;
    incarnations.delete(key);
    return undefined;
  }

  /** Records a new incarnation: open, attach 1, head 0, position 0 without an upstream id. */
  function createIncarnation(
    sessionId: string,
    incarnationId: string,
    fields: Pick<NewIncarnation, 'owner' | 'kind' | 'pending'>,
    ttlMs: number,
  ): IncarnationEntry {
    const entry: IncarnationEntry = {
      sessionId,
      owner: fields.owner,
      kind: fields.kind,
      state: 'open',
      head: 0,
      base: 0,
      attach: 1,
      pending: [...(fields.pending ?? [])],
      ids: [null],
      payloads: [null],
      journalBytes: 0,
      unjournaled: 0,
      pump: '',
      pumpUntil: 0,
      tailUntil: 0,
      held: false,
      clientSeq: 0,
      expiresAt: now() + ttlMs,
    };
    incarnations.set(incarnationKey(sessionId, incarnationId), entry);
    return entry;
  }

  /** touchSession's step, shared with touchAndRead. */
  function touch(sessionId: string, idleTtlMs: number): SessionRecord | null {
    const entry = live(sessionId);
    if (entry === undefined) return null;
    if (entry.record.state === 'active') entry.expiresAt = now() + idleTtlMs;
    return entry.record;
  }

  /** readIncarnation's step, shared with touchAndRead. */
  function readView(sessionId: string, incarnationId: string, afterSeq: number): IncarnationView | null {
    const entry = liveIncarnation(sessionId, incarnationId);
    return entry === undefined ? null : view(sessionId, incarnationId, entry, afterSeq);
  }

  /** A live incarnation as readIncarnation returns it, shared with attachIncarnation. */
  function view(sessionId: string, incarnationId: string, entry: IncarnationEntry, afterSeq: number): IncarnationView {
    const record = toRecord(incarnationId, entry);
    const currentGet = live(sessionId)?.getInc;
    const recorded = Number.isSafeInteger(afterSeq) && afterSeq >= entry.base && afterSeq <= entry.head;
    if (!recorded) return { record, currentGet, after: [], at: undefined };
    const index = afterSeq - entry.base;
    return { record, currentGet, after: entry.ids.slice(index + 1), at: entry.ids[index] };
  }

  /**
   * Delivers a note to this process's watchers after the operation has returned, as a note from
   * Redis arrives: a listener never runs inside a store operation.
   */
  function note(sessionId: string, incarnationId: string, journalNote: JournalNote): void {
    const key = incarnationKey(sessionId, incarnationId);
    if (notes.listenerCount(key) > 0) queueMicrotask(() => notes.emit(key, journalNote));
  }

  /** Tells every binding watcher, as note() does: after the operation has returned. */
  function tell(bindingNote: BindingNote): void {
    if (watchers.size > 0) queueMicrotask(() => watchers.forEach((watcher) => watcher.changed(bindingNote)));
  }

  /** Same failure surface as the Redis store: a closed store rejects every operation. */
  function assertOpen(op: string): void {
    if (closed) throw new StoreError(op, { cause: new Error('store is closed') });
  }

  return {
    kind: 'memory',

    async bindSession(session: NewSession, idleTtlMs: number): Promise<boolean> {
      assertOpen('bindSession');
      if (live(session.sessionId) !== undefined) return false;
      const t = now();
      const record: SessionRecord = Object.freeze({
        sessionId: session.sessionId,
        owner: session.owner,
        ownerEpoch: session.ownerEpoch,
        state: 'active',
        createdAt: t,
        ...(session.endpoint === undefined ? {} : { endpoint: session.endpoint }),
        ...(session.principal === undefined ? {} : { principal: session.principal }),
      });
      sessions.set(session.sessionId, { record, expiresAt: t + idleTtlMs });
      return true;
    },

    async touchSession(sessionId: string, idleTtlMs: number): Promise<SessionRecord | null> {
      assertOpen('touchSession');
      return touch(sessionId, idleTtlMs);
    },

    async touchAndRead(
      sessionId: string,
      idleTtlMs: number,
      read?: { incarnationId: string; afterSeq: number },
    ): Promise<{ session: SessionRecord | null; view: IncarnationView | null }> {
      assertOpen('touchAndRead');
      const session = touch(sessionId, idleTtlMs);
      return { session, view: read === undefined ? null : readView(sessionId, read.incarnationId, read.afterSeq) };
    },

    async refreshSessions(reads: readonly SessionRefresh[], idleTtlMs: number): Promise<(SessionRecord | null)[]> {
      assertOpen('refreshSessions');
      return reads.map(({ sessionId, touch: extend }) => (extend ? touch(sessionId, idleTtlMs) : (live(sessionId)?.record ?? null)));
    },

    async setPrincipal(sessionId: string, principal: string): Promise<void> {
      assertOpen('setPrincipal');
      const entry = live(sessionId);
      if (entry === undefined || entry.record.state !== 'active') return;
      entry.record = Object.freeze({ ...entry.record, principal });
    },

    async endSession(sessionId: string, state: Exclude<SessionState, 'active'>, tombstoneTtlMs: number): Promise<void> {
      assertOpen('endSession');
      const entry = live(sessionId);
      if (entry === undefined || entry.record.state !== 'active') return;
      entry.record = Object.freeze({ ...entry.record, state });
      entry.expiresAt = now() + tombstoneTtlMs;
      tell({ kind: 'ended', sessionId });
    },

    async bindTask(taskKey: string, task: TaskRecord, ttlMs: number): Promise<boolean> {
      assertOpen('bindTask');
      if (liveTask(taskKey) !== undefined) return false;
      tasks.set(taskKey, { record: Object.freeze({ owner: task.owner, ownerEpoch: task.ownerEpoch }), expiresAt: now() + ttlMs });
      return true;
    },

    async readTask(taskKey: string): Promise<TaskRecord | null> {
      assertOpen('readTask');
      return liveTask(taskKey) ?? null;
    },

    async replicaEpochs(): Promise<Record<string, string>> {
      assertOpen('replicaEpochs');
      return Object.fromEntries(epochs);
    },

    async retireReplicaEpoch(replicaId: string, expected: string, next: string): Promise<string> {
      assertOpen('retireReplicaEpoch');
      const current = epochs.get(replicaId) ?? '';
      if (current !== expected) return current;
      epochs.set(replicaId, next);
      tell({ kind: 'retired', replicaId, epoch: next });
      return next;
    },

    async openIncarnation(incarnation: NewIncarnation, ttlMs: number): Promise<void> {
      assertOpen('openIncarnation');
      const { id, sessionId } = incarnation;
      // Reopening would restart the numbering and issue the same cursors twice (E2, E3).
      if (liveIncarnation(sessionId, id) !== undefined) {
        throw new StoreError('openIncarnation', { cause: new Error(`incarnation ${id} is already recorded`) });
      }
      const entry = createIncarnation(sessionId, id, incarnation, ttlMs);
      if (incarnation.pump) {
        entry.pump = incarnation.pump.instanceId;
        entry.pumpUntil = now() + incarnation.pump.leaseMs;
      }
      if (incarnation.supersede) {
        const session = live(sessionId);
        if (session !== undefined) {
          const previous = session.getInc;
          session.getInc = id;
          if (previous !== undefined && previous !== id) note(sessionId, previous, { kind: 'superseded' });
        }
      }
    },

    async attachIncarnation(
      sessionId: string,
      incarnationId: string,
      ttlMs: number,
      afterSeq: number,
    ): Promise<{ attach: number; view: IncarnationView } | null> {
      assertOpen('attachIncarnation');
      const entry = liveIncarnation(sessionId, incarnationId);
      if (entry === undefined) return null;
      entry.attach += 1;
      entry.expiresAt = now() + ttlMs;
      return { attach: entry.attach, view: view(sessionId, incarnationId, entry, afterSeq) };
    },

    async recordEvents(
      sessionId: string,
      incarnationId: string,
      batch: EventBatch,
      maxPositions: number,
      ttlMs: number,
      maxJournalBytes?: number,
    ): Promise<RecordResult> {
      assertOpen('recordEvents');
      checkBatch(batch, ttlMs);
      let entry = liveIncarnation(sessionId, incarnationId);
      if (entry === undefined && batch.create !== undefined) entry = createIncarnation(sessionId, incarnationId, batch.create, ttlMs);
      if (entry === undefined) return 'missing';
      // A closed incarnation promised that nothing follows; a stale writer must not break that.
      if (entry.state !== 'open' || batch.attach !== entry.attach) return 'stale';
      if (batch.fromSeq !== entry.head + 1) return alreadyRecorded(entry, batch) ? 'ok' : 'stale';
      const { payloads } = batch;
      const texts = payloads?.texts();
      for (const [i, id] of batch.upstreamIds.entries()) {
        entry.ids.push(id === '' ? null : id);
        entry.payloads.push(texts?.[i] ?? null);
      }
      if (payloads !== undefined) entry.journalBytes += payloads.payloadBytes;
      entry.head += batch.upstreamIds.length;
      if (payloads === undefined && batch.upstreamIds.length > 0) {
        // Nothing up to here can be read from the journal any more: its bytes are dropped, as Redis drops its list.
        entry.unjournaled = entry.head;
        entry.payloads.fill(null);
        entry.journalBytes = 0;
      }
      for (const id of batch.responded) {
        // One response settles one request: === keeps 1 and "1" apart, as JSON-RPC does.
        const index = entry.pending.indexOf(id);
        if (index !== -1) entry.pending.splice(index, 1);
      }
      trim(entry, keptPositions(maxPositions), maxJournalBytes ?? Infinity);
      if (batch.pump !== undefined) {
        entry.pump = batch.pump.instanceId;
        entry.pumpUntil = now() + batch.pump.leaseMs;
      }
      if (ttlMs > 0) entry.expiresAt = now() + ttlMs;
      if (payloads !== undefined && payloads.length > 0) note(sessionId, incarnationId, { kind: 'head', head: entry.head });
      return 'ok';
    },

    async readIncarnation(sessionId: string, incarnationId: string, afterSeq: number): Promise<IncarnationView | null> {
      assertOpen('readIncarnation');
      return readView(sessionId, incarnationId, afterSeq);
    },

    async closeIncarnation(sessionId: string, incarnationId: string, state: 'closed' | 'diverged' = 'closed'): Promise<void> {
      assertOpen('closeIncarnation');
      const entry = liveIncarnation(sessionId, incarnationId);
      if (entry === undefined) return;
      if (entry.state !== 'diverged') entry.state = state;
      note(sessionId, incarnationId, { kind: 'closed' });
    },

    async readJournal(sessionId: string, incarnationId: string, afterSeq: number, limit: number): Promise<JournalRead | null> {
      assertOpen('readJournal');
      const entry = liveIncarnation(sessionId, incarnationId);
      if (entry === undefined) return null;
      const [first, last] = journalRange(entry, afterSeq, limit);
      const events: { seq: number; payload: string }[] = [];
      for (let seq = first; seq <= last; seq++) events.push({ seq, payload: entry.payloads[seq - entry.base] ?? '' });
      return { record: toRecord(incarnationId, entry), events };
    },

    watchJournal(sessionId: string, incarnationId: string, listener: (note: JournalNote) => void): () => void {
      const key = incarnationKey(sessionId, incarnationId);
      notes.on(key, listener);
      return () => {
        notes.off(key, listener);
      };
    },

    async touchTail(sessionId: string, incarnationId: string, leaseMs: number): Promise<void> {
      assertOpen('touchTail');
      const entry = liveIncarnation(sessionId, incarnationId);
      // Two tailing instances: the later lease stands.
      if (entry !== undefined) entry.tailUntil = Math.max(entry.tailUntil, now() + leaseMs);
    },

    async releaseHeldGet(sessionId: string): Promise<HeldGetRelease> {
      assertOpen('releaseHeldGet');
      const current = live(sessionId)?.getInc;
      const entry = current === undefined ? undefined : liveIncarnation(sessionId, current);
      const t = now();
      if (current === undefined || entry === undefined || entry.state !== 'open' || entry.pump === '' || entry.pumpUntil <= t) return 'none';
      if (entry.tailUntil > t) return 'tailed';
      note(sessionId, current, { kind: 'release' });
      return 'asked';
    },

    async releasePump(sessionId: string, incarnationId: string, instanceId: string): Promise<void> {
      assertOpen('releasePump');
      const entry = liveIncarnation(sessionId, incarnationId);
      if (entry === undefined || entry.pump !== instanceId) return;
      entry.pump = '';
      entry.pumpUntil = 0;
      entry.held = false;
    },

    async setHeld(sessionId: string, incarnationId: string, instanceId: string, clientSeq: number | undefined, holderSpan?: string): Promise<void> {
      assertOpen('setHeld');
      const entry = liveIncarnation(sessionId, incarnationId);
      if (entry === undefined || entry.pump !== instanceId) return;
      entry.held = clientSeq !== undefined;
      if (clientSeq !== undefined) entry.clientSeq = clientSeq;
      if (holderSpan !== undefined) entry.holderSpan = holderSpan;
    },

    async endTail(sessionId: string, incarnationId: string, clientSeq: number): Promise<void> {
      assertOpen('endTail');
      const entry = liveIncarnation(sessionId, incarnationId);
      if (entry === undefined) return;
      entry.tailUntil = Math.min(entry.tailUntil, now());
      entry.clientSeq = Math.max(entry.clientSeq, clientSeq);
    },

    async readCurrentGet(sessionId: string): Promise<IncarnationRecord | null> {
      assertOpen('readCurrentGet');
      const current = live(sessionId)?.getInc;
      const entry = current === undefined ? undefined : liveIncarnation(sessionId, current);
      return current === undefined || entry === undefined ? null : toRecord(current, entry);
    },

    async touchIncarnation(sessionId: string, incarnationId: string, ttlMs: number): Promise<void> {
      assertOpen('touchIncarnation');
      const entry = liveIncarnation(sessionId, incarnationId);
      if (entry !== undefined) entry.expiresAt = now() + ttlMs;
    },

    async inspectSession(sessionId: string, limit: number): Promise<SessionInspection> {
      assertOpen('inspectSession');
      const entry = live(sessionId);
      // Insertion order is creation order: the newest are last.
      const newest: IncarnationRecord[] = [];
      for (const [key, inc] of [...incarnations].reverse()) {
        if (newest.length >= Math.min(limit, INCARNATIONS_LISTED)) break;
        if (inc.sessionId !== sessionId || inc.expiresAt <= now()) continue;
        newest.push(toRecord(idOf(key), inc));
      }
      return { session: entry?.record ?? null, currentGet: entry?.getInc, incarnations: newest };
    },

    async readSecret(): Promise<string | null> {
      assertOpen('readSecret');
      return secret ?? null;
    },

    async agreeSecret(candidate: string): Promise<string> {
      assertOpen('agreeSecret');
      secret ??= candidate;
      return secret;
    },

    async agreeGeneration(candidate: string): Promise<string> {
      assertOpen('agreeGeneration');
      generation ??= candidate;
      return generation;
    },

    watchBindings(watcher: BindingWatcher): () => void {
      watchers.add(watcher);
      // In process, nothing can be missed: the notes flow from the start.
      watcher.flowing(true);
      return () => watchers.delete(watcher);
    },

    async publishKeyFingerprint(instanceId: string, fingerprint: string, ttlMs: number): Promise<Record<string, string>> {
      assertOpen('publishKeyFingerprint');
      const at = now();
      fingerprints.set(instanceId, { fingerprint, expiresAt: at + ttlMs });
      const alive: Record<string, string> = {};
      for (const [id, entry] of fingerprints) {
        if (entry.expiresAt <= at) fingerprints.delete(id);
        else alive[id] = entry.fingerprint;
      }
      return alive;
    },

    async withdrawKeyFingerprint(instanceId: string): Promise<void> {
      assertOpen('withdrawKeyFingerprint');
      fingerprints.delete(instanceId);
    },

    async renewInstance(instanceId: string, ttlMs: number): Promise<void> {
      assertOpen('renewInstance');
      alive.set(instanceId, now() + ttlMs);
    },

    async instanceAlive(instanceId: string): Promise<boolean> {
      assertOpen('instanceAlive');
      const until = alive.get(instanceId);
      if (until !== undefined && until <= now()) alive.delete(instanceId);
      return until !== undefined && until > now();
    },

    async withdrawInstance(instanceId: string): Promise<void> {
      assertOpen('withdrawInstance');
      alive.delete(instanceId);
    },

    keepInstanceAlive(instanceId: string, options: LivenessOptions): InstanceLiveness {
      // In one process, nothing runs beside the event loop that every instance shares anyway.
      const renew = async (): Promise<boolean> => {
        if (closed) return false;
        alive.set(instanceId, now() + options.ttlMs);
        return true;
      };
      const stop = renewOnSchedule(renew, options.everyMs, options.renewed);
      return {
        stop: async () => {
          stop();
          if (!closed) alive.delete(instanceId);
        },
      };
    },

    async ping(): Promise<void> {
      assertOpen('ping');
    },

    async checkAccess(): Promise<void> {
      assertOpen('checkAccess');
    },

    async close(): Promise<void> {
      closed = true;
      watchers.clear();
      clearInterval(sweeper);
      notes.removeAllListeners();
    },
  };
}

function incarnationKey(sessionId: string, incarnationId: string): string {
  return JSON.stringify([sessionId, incarnationId]);
}

function idOf(key: string): string {
  return (JSON.parse(key) as [string, string])[1];
}

/** The head is always kept, whatever the limit: the newest cursor must stay resumable. */
function keptPositions(maxPositions: number): number {
  return Math.max(1, Math.floor(maxPositions));
}

/** Refuses, before anything changes, what the Redis store refuses too. */
function checkBatch(batch: EventBatch, ttlMs: number): void {
  if (batch.create !== undefined && (batch.attach !== 1 || batch.fromSeq !== 1)) {
    // Only the first batch of the first attachment may create its incarnation.
    throw new StoreError('recordEvents', { cause: new Error('a batch with create must be attach 1 and fromSeq 1') });
  }
  if (batch.create !== undefined && !(ttlMs > 0)) {
    throw new StoreError('recordEvents', { cause: new Error('a batch with create must give a TTL') });
  }
  if (batch.upstreamIds.some((id) => id !== null && id.includes('\n'))) {
    // As the Redis store, which sends the ids joined by LF.
    throw new StoreError('recordEvents', { cause: new Error('an upstream id contains LF') });
  }
  if (batch.payloads !== undefined && batch.payloads.length !== batch.upstreamIds.length) {
    throw new StoreError('recordEvents', { cause: new Error('payloads and upstream ids differ in length') });
  }
}

/**
 * Drops the oldest positions, raising base, until at most `maxPositions` are kept and their
 * journaled bytes fit in `maxBytes`; the head stays whatever its size.
 */
function trim(entry: IncarnationEntry, maxPositions: number, maxBytes: number): void {
  let drop = Math.max(0, entry.ids.length - maxPositions);
  let bytes = entry.journalBytes;
  for (let i = 0; i < drop; i++) bytes -= payloadBytes(entry.payloads[i]);
  while (bytes > maxBytes && drop < entry.ids.length - 1) bytes -= payloadBytes(entry.payloads[drop++]);
  if (drop === 0) return;
  entry.ids.splice(0, drop);
  entry.payloads.splice(0, drop);
  entry.journalBytes = bytes;
  entry.base += drop;
}

function payloadBytes(payload: string | null | undefined): number {
  return payload == null ? 0 : Buffer.byteLength(payload);
}

/**
 * The positions readJournal returns, first..last (none when first > last): from afterSeq + 1,
 * when that position is journaled, up to the head and at most `limit` of them.
 */
function journalRange(entry: IncarnationEntry, afterSeq: number, limit: number): [number, number] {
  const first = afterSeq + 1;
  if (!Number.isSafeInteger(afterSeq) || first < Math.max(entry.base, 1) || first <= entry.unjournaled) return [1, 0];
  return [first, Math.min(entry.head, afterSeq + Math.max(0, Math.floor(limit)))];
}

function toRecord(id: string, entry: IncarnationEntry): IncarnationRecord {
  return Object.freeze({
    id,
    sessionId: entry.sessionId,
    owner: entry.owner,
    kind: entry.kind,
    state: entry.state,
    head: entry.head,
    base: entry.base,
    attach: entry.attach,
    pending: Object.freeze([...entry.pending]),
    pump: entry.pump,
    pumpUntil: entry.pumpUntil,
    tailUntil: entry.tailUntil,
    held: entry.held,
    clientSeq: entry.clientSeq,
    ...(entry.holderSpan !== undefined ? { holderSpan: entry.holderSpan } : {}),
    journaled: entry.unjournaled < Math.max(entry.base, 1),
  });
}

/**
 * A retried batch that did land the first time: the same ids at the same positions, and, when
 * it carries payloads, the same bytes, journaled.
 */
function alreadyRecorded(entry: IncarnationEntry, batch: EventBatch): boolean {
  const { fromSeq, upstreamIds } = batch;
  if (fromSeq < entry.base || fromSeq + upstreamIds.length - 1 > entry.head) return false;
  if (batch.payloads !== undefined && fromSeq <= entry.unjournaled) return false;
  const payloads = batch.payloads?.texts();
  return upstreamIds.every(
    (id, i) =>
      entry.ids[fromSeq - entry.base + i] === (id === '' ? null : id) &&
      (payloads === undefined || entry.payloads[fromSeq - entry.base + i] === payloads[i]),
  );
}
