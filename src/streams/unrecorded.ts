/**
 * Records of events that left while the store did not answer (CONTRACT.md §7, the one exception
 * to E5). An open stream never waits for the store longer than one attempt (plus
 * resumption.recordRetryMs): a batch whose record cannot be written goes to a bounded in-memory
 * backlog of its stream, its events leave at once, and a flusher writes the backlog, in order and
 * a few large writes at a time, once the store answers again.
 *
 * What a client can then see on resumption: a cursor whose record arrived is continued exactly; one
 * whose record never arrived (its stream went over a bound, the store refused the late batch, or
 * this instance died first) is `unknown_stream`, because the store's head stays below it. Never a
 * gap or a duplicate: batches of one stream are written strictly in order, a write that may have
 * landed unseen is resent exactly as it was (recordEvents answers 'ok' again), and once one batch of
 * a stream is given up, no later one of that stream is written. A journaled stream's batches carry
 * their events' bytes (J1): held, counted and written late with their records, so what is journaled
 * late is journaled in order.
 */
import type { Config } from '../config/schema.js';
import { describe, isStoreError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import { retryWithin } from '../retry.js';
import type { EventBatch, JsonRpcId, RecordResult, Store } from '../store/types.js';
import { JournalFrames } from '../store/journal-frames.js';

const noop = (): void => undefined;

/** Where a stream's records go: its incarnation, as the attachment that writes it. */
export interface RecordTarget {
  readonly sessionId: string;
  readonly incarnation: string;
  readonly attach: number;
  /** A lazily recorded incarnation (POST streams): created by its first batch. */
  readonly create?: EventBatch['create'];
  /** J2, J3: the instance that pumps a journaled stream, named in each of its batches (its lease). */
  readonly pump?: EventBatch['pump'];
}

export type StopReason = 'stream_limit' | 'total_limit' | 'refused' | 'shutdown';

/**
 * What an unrecorded event is counted as against the bounds: its slot in the batch's array and its
 * upstream id (a V8 string: a header and the characters), plus a fixed cost per batch (its objects
 * and arrays). Measured by bench/store-outage.ts: with 45-character ids, V8 held 299 bytes per
 * event in batches of one and 118 in batches of ten; these count 301 and 121.
 */
export const EVENT_COST_BYTES = 56;
export const BATCH_COST_BYTES = 200;
/** A late write carries at most this many events: one script run must not block Redis for long. */
const MAX_WRITE_EVENTS = 10_000;
/** Backlogs written at once while the store answers; while it does not, one write probes it. */
const WRITES_AT_ONCE = 16;
/** Pauses between attempts while the store does not answer: soon at first, then once a second. */
const PAUSE = { firstMs: 50, maxMs: 1000 };
/** Retries within recordRetryMs, as the pauses above. */
const RETRY_PAUSES = { firstMs: 50, maxMs: 1000 };

export interface UnrecordedDeps {
  config: () => Config;
  store: Store;
  metrics: Metrics;
  logger: Logger;
}

interface Queued {
  readonly batch: EventBatch;
  readonly events: number;
  readonly cost: number;
  /** Sent already and not answered: it may have landed, so it is resent exactly as it was, never merged. */
  readonly sent?: boolean;
}

/** The records of every stream of this instance that wait for the store. */
export class UnrecordedRecords {
  readonly #deps: UnrecordedDeps;
  /** Streams with a backlog, in the order they are served (one write each per round). */
  readonly #backlogs = new Set<StreamRecords>();
  #bytes = 0;
  #down = false;
  #flushing = false;
  #closed = false;
  #idle: (() => void)[] = [];
  #wake: (() => void) | undefined;

  constructor(deps: UnrecordedDeps) {
    this.#deps = deps;
  }

  /** Bytes held for unrecorded events, as counted against the bounds. */
  get bytes(): number {
    return this.#bytes;
  }

  /** The records of one stream (one attachment), written in order. */
  stream(target: RecordTarget): StreamRecords {
    return new StreamRecords(target, this);
  }

  /**
   * Graceful stop: writes what it can within `withinMs`, then gives up the rest (those cursors
   * become unknown_stream, as if the instance had died) and takes nothing more.
   */
  async settle(withinMs: number): Promise<void> {
    if (this.#backlogs.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      const idle = new Promise<void>((resolve) => this.#idle.push(resolve));
      await Promise.race([idle, new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.max(0, withinMs))))]);
      clearTimeout(timer);
    }
    this.#closed = true;
    this.#wake?.();
    let events = 0;
    for (const stream of [...this.#backlogs]) events += stream.stop('shutdown');
    if (events > 0) this.#deps.logger.warn({ events }, 'shutdown: events left unrecorded; their cursors will be unknown_stream');
  }

  // --- for StreamRecords ---

  get down(): boolean {
    return this.#down;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Writes a batch now, retrying within recordRetryMs; rejects with a StoreError after that. */
  write(target: RecordTarget, batch: EventBatch, retryMs: number): Promise<RecordResult> {
    const config = this.#deps.config();
    const { journal } = config.resumption;
    const attempt = () =>
      this.#deps.store.recordEvents(
        target.sessionId,
        target.incarnation,
        batch,
        // J1: one window for positions and journal, bounded by both.
        batch.payloads ? Math.min(config.resumption.recordedEvents, journal.maxEvents) : config.resumption.recordedEvents,
        config.sessions.idleTtlMs,
        batch.payloads ? journal.maxBytes : undefined,
      );
    return retryWithin(retryMs, RETRY_PAUSES, attempt, isStoreError);
  }

  storeFailed(): void {
    this.#down = true;
  }

  /** The bound of one stream's held bytes. */
  get streamBytes(): number {
    return this.#deps.config().resumption.unrecorded.streamBytes;
  }

  /** Whether `cost` more bytes fit in the total bound. */
  fits(cost: number): boolean {
    return this.#bytes + cost <= this.#deps.config().resumption.unrecorded.totalBytes;
  }

  held(stream: StreamRecords, events: number, bytes: number): void {
    this.#bytes += bytes;
    this.#deps.metrics.unrecordedEvents.inc(events);
    this.#deps.metrics.unrecordedBytes.inc(bytes);
    this.#backlogs.add(stream);
    void this.#flush();
  }

  released(events: number, bytes: number): void {
    this.#bytes -= bytes;
    this.#deps.metrics.unrecordedEvents.dec(events);
    this.#deps.metrics.unrecordedBytes.dec(bytes);
  }

  emptied(stream: StreamRecords): void {
    this.#backlogs.delete(stream);
    if (this.#backlogs.size === 0) {
      for (const resolve of this.#idle.splice(0)) resolve();
    }
  }

  stopped(reason: StopReason, events: number, stream: RecordTarget): void {
    this.#deps.metrics.streamsStoppedRecording.inc({ reason });
    if (reason !== 'shutdown') {
      this.#deps.logger.warn({ reason, events, attach: stream.attach }, 'a stream stopped being recorded: its later cursors will be unknown_stream');
    }
  }

  failed(err: unknown): void {
    this.#deps.logger.error({ err: describe(err) }, 'a late record failed for a reason other than the store');
  }

  lateWrite(): void {
    this.#deps.metrics.lateRecordBatches.inc();
  }

  /** Writes the backlogs until none is left, pausing while the store does not answer. */
  async #flush(): Promise<void> {
    if (this.#flushing) return;
    this.#flushing = true;
    let pause = PAUSE.firstMs;
    try {
      while (this.#backlogs.size > 0 && !this.#closed) {
        // Served in turn: a stream written moves behind the others.
        const round = [...this.#backlogs].slice(0, this.#down ? 1 : WRITES_AT_ONCE);
        const outcomes = await Promise.all(round.map((stream) => stream.writeNext()));
        if (outcomes.includes('store_failed')) {
          this.#down = true;
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, pause);
            this.#wake = () => {
              clearTimeout(timer);
              resolve();
            };
          });
          this.#wake = undefined;
          pause = Math.min(pause * 2, PAUSE.maxMs);
          continue;
        }
        this.#down = false;
        pause = PAUSE.firstMs;
        for (const stream of round) {
          if (this.#backlogs.delete(stream) && stream.pending) this.#backlogs.add(stream);
        }
      }
    } finally {
      this.#flushing = false;
    }
  }
}

/** One stream's records: written at once while the store answers, held in order while it does not. */
export class StreamRecords {
  readonly #target: RecordTarget;
  readonly #all: UnrecordedRecords;
  #queue: Queued[] = [];
  /** Attempted and not answered: it may have landed, so it is resent exactly as it was. */
  #inFlight: Queued | undefined;
  #bytes = 0;
  #events = 0;
  #stopped = false;
  /** The last record() still to be answered, settled or not: a batch recorded meanwhile is pipelined behind it. */
  #writing: Promise<void> | undefined;
  /** When a batch was last written (performance.now()), so that a lease is not renewed needlessly. */
  #lastWrite = -Infinity;

  constructor(target: RecordTarget, all: UnrecordedRecords) {
    this.#target = target;
    this.#all = all;
  }

  /** Something is waiting to be written. */
  get pending(): boolean {
    return this.#inFlight !== undefined || this.#queue.length > 0;
  }

  /** True once this stream's records were given up: later batches are not written either. */
  get stopped(): boolean {
    return this.#stopped;
  }

  /**
   * Records positions fromSeq... 'ok' when the events may leave: recorded, or held for a late
   * write. 'stale' or 'missing' when the store refused the batch at once (the stream must end,
   * as another attachment took it over or it is gone).
   *
   * A batch recorded while the one before it is still being written goes out at once, behind it
   * (pipelined), and its answer counts only once that one's has come. The store appends a batch
   * only right after the head (or answers 'ok' again for the same batch), so the early write can
   * never land out of order; an answer other than 'ok' may just mean that it ran before the one
   * ahead of it landed, so the batch is then recorded again, in order, as if it had not been sent.
   */
  record(
    fromSeq: number,
    upstreamIds: readonly (string | null)[],
    responded: readonly JsonRpcId[],
    retryMs: number,
    payloads?: JournalFrames,
  ): Promise<RecordResult> {
    if (this.#stopped) return Promise.resolve('ok');
    const { create, pump } = this.#target;
    const batch: EventBatch = {
      attach: this.#target.attach,
      fromSeq,
      upstreamIds,
      responded,
      ...(create && fromSeq === 1 ? { create } : {}),
      ...(payloads ? { payloads } : {}),
      ...(pump ? { pump } : {}),
    };
    const ahead = this.#writing;
    const result = ahead === undefined ? this.#record(batch, retryMs) : this.#pipelined(ahead, batch, retryMs);
    const settled = result.then(noop, noop);
    this.#writing = settled;
    void settled.then(() => {
      if (this.#writing === settled) this.#writing = undefined;
    });
    return result;
  }

  /**
   * Writes a batch now (retrying within retryMs), or holds it for a late write. `sent`: it was
   * written once already and not answered, so it may have landed.
   */
  async #record(batch: EventBatch, retryMs: number, sent = false): Promise<RecordResult> {
    if (this.#stopped) return 'ok';
    if (this.pending || this.#all.down || this.#all.closed) {
      this.#hold(batch, false, sent);
      return 'ok';
    }
    try {
      this.#lastWrite = performance.now();
      return await this.#all.write(this.#target, batch, retryMs);
    } catch (err) {
      if (!isStoreError(err)) throw err;
      this.#all.storeFailed();
      this.#hold(batch, true);
      return 'ok';
    }
  }

  /** A batch written while `ahead` (the batch before it) is: sent at once, answered after it. */
  async #pipelined(ahead: Promise<void>, batch: EventBatch, retryMs: number): Promise<RecordResult> {
    let early: Promise<RecordResult | Error | undefined> | undefined;
    if (!this.pending && !this.#all.down && !this.#all.closed) {
      this.#lastWrite = performance.now();
      // One attempt, no retries: a store that does not answer is the ordered path's to handle.
      early = this.#all.write(this.#target, batch, 0).catch((err: unknown) => (isStoreError(err) ? undefined : (err as Error)));
    }
    await ahead;
    const answer = await early;
    if (answer instanceof Error) throw answer;
    if (answer === 'ok') return 'ok';
    // Refused or unanswered, perhaps only because it ran before the batch ahead of it landed: written
    // again, now in order (a copy that did land is answered 'ok', and a real refusal is refused again).
    return this.#record(batch, retryMs, early !== undefined && answer === undefined);
  }

  /**
   * J3: renews the pump's lease between events with an empty batch after `head`, unless a batch
   * was written within `idleMs`. Skipped while records wait for the store (their late write
   * renews it). 'stale': another attachment took the
   * stream over (or it was closed); 'missing': it is gone.
   */
  async renew(head: number, idleMs: number): Promise<RecordResult> {
    const { pump } = this.#target;
    // A lazily recorded stream has no record to renew before its first batch; one opened before
    // its first event (a GET) has, and an idle one must keep its lease as much as a busy one.
    const unrecorded = head === 0 && this.#target.create !== undefined;
    if (this.#stopped || pump === undefined || unrecorded || this.pending || this.#all.down || this.#all.closed) return 'ok';
    // A batch written lately renewed it.
    if (performance.now() - this.#lastWrite < idleMs) return 'ok';
    const batch: EventBatch = { attach: this.#target.attach, fromSeq: head + 1, upstreamIds: [], responded: [], payloads: JournalFrames.EMPTY, pump };
    try {
      return await this.#all.write(this.#target, batch, 0);
    } catch (err) {
      if (!isStoreError(err)) throw err;
      return 'ok';
    }
  }

  /** Gives up what is held; later batches are not written. Returns the events given up. */
  stop(reason: StopReason): number {
    if (this.#stopped) return 0;
    this.#stopped = true;
    const events = this.#events;
    this.#all.released(this.#events, this.#bytes);
    this.#queue = [];
    this.#inFlight = undefined;
    this.#bytes = 0;
    this.#events = 0;
    this.#all.emptied(this);
    this.#all.stopped(reason, events, this.#target);
    return events;
  }

  /** One late write: the batch in flight again, or the next held batches merged into one. */
  async writeNext(): Promise<'ok' | 'store_failed'> {
    const next = this.#inFlight ?? this.#merge();
    if (next === undefined) return 'ok';
    this.#inFlight = next;
    let result: RecordResult;
    try {
      result = await this.#all.write(this.#target, next.batch, 0);
    } catch (err) {
      if (isStoreError(err)) return 'store_failed';
      // Not the store's passing failure: this batch will never be written.
      this.#all.failed(err);
      this.stop('refused');
      return 'ok';
    }
    if (this.#stopped || this.#inFlight !== next) return 'ok';
    if (result !== 'ok') {
      this.stop('refused');
      return 'ok';
    }
    this.#inFlight = undefined;
    this.#bytes -= next.cost;
    this.#events -= next.events;
    this.#all.released(next.events, next.cost);
    this.#all.lateWrite();
    if (!this.pending) this.#all.emptied(this);
    return 'ok';
  }

  #hold(batch: EventBatch, attempted: boolean, sent = false): void {
    if (this.#stopped) return;
    let cost = BATCH_COST_BYTES;
    for (const id of batch.upstreamIds) cost += EVENT_COST_BYTES + (id === null ? 0 : id.length);
    // J1: a journaled event's bytes are held with its record.
    cost += batch.payloads?.frames.length ?? 0;
    const limits = this.#all;
    if (limits.closed) {
      this.stop('shutdown');
      return;
    }
    if (this.#bytes + cost > limits.streamBytes) {
      this.stop('stream_limit');
      return;
    }
    if (!limits.fits(cost)) {
      this.stop('total_limit');
      return;
    }
    const queued: Queued = { batch, events: batch.upstreamIds.length, cost, ...(sent ? { sent } : {}) };
    if (attempted) this.#inFlight = queued;
    else this.#queue.push(queued);
    this.#bytes += cost;
    this.#events += queued.events;
    this.#all.held(this, queued.events, cost);
  }

  /**
   * The held batches from the front, as one batch of at most MAX_WRITE_EVENTS events (or one batch).
   * Only batches that agree on carrying payloads are merged: the journal can be switched by a
   * reload between two batches, and a batch whose payloads do not match its ids is refused.
   */
  #merge(): Queued | undefined {
    const first = this.#queue[0];
    if (first === undefined) return undefined;
    let take = 1;
    let events = first.events;
    const journaled = first.batch.payloads !== undefined;
    // A batch that may have landed already is resent as it was: the store answers 'ok' again only to the same batch.
    const joins = (next: Queued): boolean =>
      !first.sent && !next.sent && events + next.events <= MAX_WRITE_EVENTS && (next.batch.payloads !== undefined) === journaled;
    while (take < this.#queue.length && joins(this.#queue[take]!)) events += this.#queue[take++]!.events;
    if (take === 1) {
      this.#queue.shift();
      return first;
    }
    const parts = this.#queue.splice(0, take);
    const batch: EventBatch = {
      ...first.batch,
      upstreamIds: parts.flatMap((p) => p.batch.upstreamIds),
      responded: parts.flatMap((p) => p.batch.responded),
      ...(first.batch.payloads ? { payloads: JournalFrames.join(parts.map((p) => p.batch.payloads!)) } : {}),
    };
    return { batch, events, cost: parts.reduce((sum, p) => sum + p.cost, 0) };
  }
}
