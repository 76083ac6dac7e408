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
 *
 * This file is the instance's side: the bounds over every stream and the flusher. One stream's
 * records are stream-records.ts, and what it holds for a late write is record-backlog.ts.
 */
import type { Config } from '../config/schema.js';
import { describe, isStoreError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import { retryWithin } from '../retry.js';
import type { EventBatch, RecordResult, Store } from '../store/types.js';
import type { Backlog, RecordsHost, RecordTarget, StopReason } from './record-target.js';
import { StreamRecords } from './stream-records.js';

/** Backlogs written at once while the store answers; while it does not, one write probes it. */
const WRITES_AT_ONCE = 16;
/**
 * Pauses between attempts while the store does not answer: soon at first, then every 200 ms, so
 * that what flowed during an outage is recorded within a second of the store's return (CONTRACT.md
 * §7; a decision elsewhere may be waiting for it). One small write per probe: cheap for a store
 * that is back, nothing for one that refuses connections.
 */
const PAUSE = { firstMs: 50, maxMs: 200 };
/** Retries within recordRetryMs: soon at first, then once a second. */
const RETRY_PAUSES = { firstMs: 50, maxMs: 1000 };

export interface UnrecordedDeps {
  config: () => Config;
  store: Store;
  metrics: Metrics;
  logger: Logger;
}

/** The records of every stream of this instance that wait for the store. */
export class UnrecordedRecords implements RecordsHost {
  readonly #deps: UnrecordedDeps;
  /** Streams with a backlog, in the order they are served (one write each per round). */
  readonly #backlogs = new Set<Backlog>();
  /** When each stream's keys were last extended (performance.now()); see #extension. */
  readonly #extendedAt = new WeakMap<RecordTarget, number>();
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

  // --- for the streams' records (RecordsHost) ---

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
    const attempt = () => {
      const ttlMs = this.#extension(target, batch, config.sessions.idleTtlMs);
      const written = this.#deps.store.recordEvents(
        target.sessionId,
        target.incarnation,
        batch,
        // J1: one window for positions and journal, bounded by both.
        batch.payloads ? Math.min(config.resumption.recordedEvents, journal.maxEvents) : config.resumption.recordedEvents,
        ttlMs,
        batch.payloads ? journal.maxBytes : undefined,
      );
      // An extension that may not have landed is asked for again by the next batch.
      if (ttlMs > 0) void written.then((result) => result === 'ok' || this.#extendedAt.delete(target), () => this.#extendedAt.delete(target));
      return written;
    };
    return retryWithin(retryMs, RETRY_PAUSES, attempt, isStoreError);
  }

  /**
   * The TTL a batch extends its incarnation's keys to, or 0 to leave them: a stream's keys are
   * extended once every quarter of idleTtlMs, to idleTtlMs and a quarter, so that they never
   * expire sooner than idleTtlMs after its last batch, and a paced stream's batches do not each
   * pay for four more commands in the script.
   */
  #extension(target: RecordTarget, batch: EventBatch, idleTtlMs: number): number {
    const now = performance.now();
    const at = this.#extendedAt.get(target);
    // A batch that may create its incarnation always gives it its TTL.
    if (batch.create === undefined && at !== undefined && now - at < idleTtlMs / 4) return 0;
    this.#extendedAt.set(target, now);
    return Math.ceil(idleTtlMs * 1.25);
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

  held(backlog: Backlog, events: number, bytes: number): void {
    this.#bytes += bytes;
    this.#deps.metrics.unrecordedEvents.inc(events);
    this.#deps.metrics.unrecordedBytes.inc(bytes);
    this.#backlogs.add(backlog);
    void this.#flush();
  }

  released(events: number, bytes: number): void {
    this.#bytes -= bytes;
    this.#deps.metrics.unrecordedEvents.dec(events);
    this.#deps.metrics.unrecordedBytes.dec(bytes);
  }

  emptied(backlog: Backlog): void {
    this.#backlogs.delete(backlog);
    if (this.#backlogs.size === 0) {
      for (const resolve of this.#idle.splice(0)) resolve();
    }
  }

  stopped(reason: StopReason, events: number, target: RecordTarget): void {
    this.#deps.metrics.streamsStoppedRecording.inc({ reason });
    if (reason !== 'shutdown') {
      this.#deps.logger.warn({ reason, events, attach: target.attach }, 'a stream stopped being recorded: its later cursors will be unknown_stream');
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
