/**
 * One stream's records that wait for the store (CONTRACT.md §7): held in order, counted against
 * the bounds, and written late, the next held batches merged into one write, once the store
 * answers again. A write that may have landed unseen is resent exactly as it was; once one batch
 * is given up, no later one of the stream is written.
 */
import { isStoreError } from '../errors.js';
import type { EventBatch, RecordResult } from '../store/types.js';
import { JournalFrames } from '../store/journal-frames.js';
import type { Backlog, RecordsHost, RecordTarget, StopReason } from './record-target.js';

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

interface Queued {
  readonly batch: EventBatch;
  readonly events: number;
  readonly cost: number;
  /** Sent already and not answered: it may have landed, so it is resent exactly as it was, never merged. */
  readonly sent?: boolean;
}

/** What a batch is counted as against the bounds while it is held. */
export function heldCost(batch: EventBatch): number {
  let cost = BATCH_COST_BYTES;
  for (const id of batch.upstreamIds) cost += EVENT_COST_BYTES + (id === null ? 0 : id.length);
  // J1: a journaled event's bytes are held with its record.
  return cost + (batch.payloads?.frames.length ?? 0);
}

export class RecordBacklog implements Backlog {
  readonly #target: RecordTarget;
  readonly #host: RecordsHost;
  #queue: Queued[] = [];
  /** Attempted and not answered: it may have landed, so it is resent exactly as it was. */
  #inFlight: Queued | undefined;
  #bytes = 0;
  #events = 0;
  #stopped = false;

  constructor(target: RecordTarget, host: RecordsHost) {
    this.#target = target;
    this.#host = host;
  }

  get pending(): boolean {
    return this.#inFlight !== undefined || this.#queue.length > 0;
  }

  /** True once this stream's records were given up: later batches are not written either. */
  get stopped(): boolean {
    return this.#stopped;
  }

  /**
   * Holds a batch for a late write, or gives the stream's records up when it does not fit.
   * `attempted`: written once and failed, it goes first; `sent`: it may have landed.
   */
  hold(batch: EventBatch, attempted: boolean, sent = false): void {
    if (this.#stopped) return;
    const cost = heldCost(batch);
    const host = this.#host;
    const over: StopReason | undefined = host.closed
      ? 'shutdown'
      : this.#bytes + cost > host.streamBytes
        ? 'stream_limit'
        : !host.fits(cost)
          ? 'total_limit'
          : undefined;
    if (over !== undefined) {
      this.stop(over);
      return;
    }
    const queued: Queued = { batch, events: batch.upstreamIds.length, cost, ...(sent ? { sent } : {}) };
    if (attempted) this.#inFlight = queued;
    else this.#queue.push(queued);
    this.#bytes += cost;
    this.#events += queued.events;
    host.held(this, queued.events, cost);
  }

  /** Gives up what is held; later batches are not written. Returns the events given up. */
  stop(reason: StopReason): number {
    if (this.#stopped) return 0;
    this.#stopped = true;
    const events = this.#events;
    this.#host.released(this.#events, this.#bytes);
    this.#queue = [];
    this.#inFlight = undefined;
    this.#bytes = 0;
    this.#events = 0;
    this.#host.emptied(this);
    this.#host.stopped(reason, events, this.#target);
    return events;
  }

  /** One late write: the batch in flight again, or the next held batches merged into one. */
  async writeNext(): Promise<'ok' | 'store_failed'> {
    const next = this.#inFlight ?? this.#merge();
    if (next === undefined) return 'ok';
    this.#inFlight = next;
    let result: RecordResult;
    try {
      result = await this.#host.write(this.#target, next.batch, 0);
    } catch (err) {
      if (isStoreError(err)) return 'store_failed';
      // Not the store's passing failure: this batch will never be written.
      this.#host.failed(err);
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
    this.#host.released(next.events, next.cost);
    this.#host.lateWrite();
    if (!this.pending) this.#host.emptied(this);
    return 'ok';
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
