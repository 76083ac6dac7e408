/**
 * One stream's records: written at once while the store answers, pipelined one behind the other,
 * and held in order for a late write (record-backlog.ts) while the store does not answer.
 */
import { isStoreError } from '../errors.js';
import type { EventBatch, JsonRpcId, RecordResult } from '../store/types.js';
import { JournalFrames } from '../store/journal-frames.js';
import { RecordBacklog } from './record-backlog.js';
import type { RecordsHost, RecordTarget, StopReason } from './record-target.js';

const noop = (): void => undefined;

export class StreamRecords {
  readonly #target: RecordTarget;
  readonly #host: RecordsHost;
  readonly #backlog: RecordBacklog;
  /** The last record() still to be answered, settled or not: a batch recorded meanwhile is pipelined behind it. */
  #writing: Promise<void> | undefined;
  /** When a batch was last written (performance.now()), so that a lease is not renewed needlessly. */
  #lastWrite = -Infinity;

  constructor(target: RecordTarget, host: RecordsHost) {
    this.#target = target;
    this.#host = host;
    this.#backlog = new RecordBacklog(target, host);
  }

  /** Something is waiting to be written. */
  get pending(): boolean {
    return this.#backlog.pending;
  }

  /** True once this stream's records were given up: later batches are not written either. */
  get stopped(): boolean {
    return this.#backlog.stopped;
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
    if (this.stopped) return Promise.resolve('ok');
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
   * J3: renews the pump's lease between events with an empty batch after `head`, unless a batch
   * was written within `idleMs`. Skipped while records wait for the store (their late write
   * renews it). 'stale': another attachment took the stream over (or it was closed); 'missing':
   * it is gone.
   */
  async renew(head: number, idleMs: number): Promise<RecordResult> {
    const { pump } = this.#target;
    // A lazily recorded stream has no record to renew before its first batch; one opened before
    // its first event (a GET) has, and an idle one must keep its lease as much as a busy one.
    const unrecorded = head === 0 && this.#target.create !== undefined;
    if (this.stopped || pump === undefined || unrecorded || this.#waiting()) return 'ok';
    // A batch written lately renewed it.
    if (performance.now() - this.#lastWrite < idleMs) return 'ok';
    const batch: EventBatch = { attach: this.#target.attach, fromSeq: head + 1, upstreamIds: [], responded: [], payloads: JournalFrames.EMPTY, pump };
    try {
      return await this.#host.write(this.#target, batch, 0);
    } catch (err) {
      if (!isStoreError(err)) throw err;
      return 'ok';
    }
  }

  /** Gives up what is held; later batches are not written. Returns the events given up. */
  stop(reason: StopReason): number {
    return this.#backlog.stop(reason);
  }

  /** Records wait for the store (or nothing more is written): a new batch is held behind them. */
  #waiting(): boolean {
    return this.pending || this.#host.down || this.#host.closed;
  }

  /**
   * Writes a batch now (retrying within retryMs), or holds it for a late write. `sent`: it was
   * written once already and not answered, so it may have landed.
   */
  async #record(batch: EventBatch, retryMs: number, sent = false): Promise<RecordResult> {
    if (this.stopped) return 'ok';
    if (this.#waiting()) {
      this.#backlog.hold(batch, false, sent);
      return 'ok';
    }
    try {
      this.#lastWrite = performance.now();
      return await this.#host.write(this.#target, batch, retryMs);
    } catch (err) {
      if (!isStoreError(err)) throw err;
      this.#host.storeFailed();
      this.#backlog.hold(batch, true);
      return 'ok';
    }
  }

  /** A batch written while `ahead` (the batch before it) is: sent at once, answered after it. */
  async #pipelined(ahead: Promise<void>, batch: EventBatch, retryMs: number): Promise<RecordResult> {
    let early: Promise<RecordResult | Error | undefined> | undefined;
    if (!this.#waiting()) {
      this.#lastWrite = performance.now();
      // One attempt, no retries: a store that does not answer is the ordered path's to handle.
      early = this.#host.write(this.#target, batch, 0).catch((err: unknown) => (isStoreError(err) ? undefined : (err as Error)));
    }
    await ahead;
    const answer = await early;
    if (answer instanceof Error) throw answer;
    if (answer === 'ok') return 'ok';
    // Refused or unanswered, perhaps only because it ran before the batch ahead of it landed: written
    // again, now in order (a copy that did land is answered 'ok', and a real refusal is refused again).
    return this.#record(batch, retryMs, early !== undefined && answer === undefined);
  }
}
