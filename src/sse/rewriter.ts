/**
 * The response path of every SSE stream (CONTRACT.md §4): each event id the replica sends is
 * replaced by the gateway's cursor, and its position recorded before the event leaves (E5; the
 * sink decides what that means while the store does not answer, §7). Records are written once per
 * batch, not once per event.
 *
 * Two steps, so that a stream can read ahead (streams/pipe.ts): prepare parses a chunk, numbers
 * its events and writes them out with their cursors, synchronously; commit writes the batch's
 * records and only then releases its bytes. Batches prepared one after the other can be joined
 * into one (one record), and are committed one at a time in the order they were prepared; the
 * getters (head, verified, answered) say what was committed, so what was only prepared counts for
 * nothing yet (a shutdown does not end a stream whose response is read but not recorded).
 *
 * A continuation first passes through a verifying phase (§5 check 7): the owner's replayed events
 * must be exactly the recorded ones after the cursor, in order; they leave with their original
 * cursors (E3). Only then does the stream go live, numbering on from the recorded head.
 *
 * With the journal (CONTRACT.md §8 J1), every event gets a cursor, with an upstream id or without,
 * and its bytes (its block without the id line) are recorded with its position in the same batch.
 *
 * Nothing half-rewritten is ever sent: a block is forwarded only when complete and recorded; an
 * oversized event, a refused record or a broken replay ends the output where it stands.
 */
import type { CursorCodec, CursorIssuer } from '../cursor/codec.js';
import { responseIds } from '../jsonrpc.js';
import type { JsonRpcId, RecordResult } from '../store/types.js';
import { SseParser, type SseEvent, type SseItem } from './parser.js';
import { commentText, eventText, eventTextWithCursor, journaledWithCursor } from './serializer.js';

export interface RecordSink {
  /**
   * Records positions fromSeq, fromSeq+1, ... with these upstream ids (null: none, or made by the
   * gateway) and, with the journal, each event's bytes without its id line (J1).
   * 'ok': the events may leave. A rejection is a record that cannot be made at all.
   */
  record(fromSeq: number, upstreamIds: readonly (string | null)[], responded: readonly JsonRpcId[], payloads?: readonly string[]): Promise<RecordResult>;
  /** J3: renews the pump's lease with nothing recorded after `head` ('ok' when there is none to renew). */
  renew?(head: number): Promise<RecordResult>;
}

export type EndReason =
  /** The replica sent an event larger than limits.sseEventBytes. */
  | 'event_too_large'
  /** The store refused the records: another connection took the stream over, or it expired. */
  | 'stale'
  | 'missing'
  /** The sink failed: the events cannot leave without their records (E5). */
  | 'store_failed'
  /** Check 7: the owner's replay was not exactly the recorded events. */
  | 'gap';

export interface RewriteResult {
  /** Bytes for the client, in order. */
  readonly out: Buffer;
  /** Events among them (for the metrics). */
  readonly events: number;
  /** Set when the stream must end after `out`. */
  readonly end?: EndReason;
}

export interface CursorTarget {
  codec: CursorCodec;
  sessionId: string;
  incarnation: string;
  sink: RecordSink;
  /** J1: every event gets a cursor and is journaled. */
  journal?: boolean;
}

export interface RewriterOptions {
  /**
   * Where cursors come from. Without one (a stream outside any session, or a store that cannot
   * record), ids are removed: an upstream id never reaches the client (E1, E2).
   */
  cursors: CursorTarget | undefined;
  /** The last position already issued on the incarnation. */
  head: number;
  maxEventBytes: number;
  /** POST streams: note the JSON-RPC responses that pass, so that pending requests are known. */
  trackResponses: boolean;
  /**
   * POST streams: the request ids whose responses the stream is to carry. Until each has passed
   * (with a cursor or without), the stream is a call in flight, which a shutdown lets finish.
   */
  awaiting?: readonly JsonRpcId[];
  /** A continuation: the owner's ids expected first, in order, renumbered as positions fromSeq+1... */
  verify?: { readonly expected: readonly string[]; readonly fromSeq: number };
}

/**
 * A chunk parsed, numbered and written out (cursors included) whose records are still to be made:
 * what SseRewriter.prepare returns and commit records and releases. Made ahead of the records of
 * the batches before it (read-ahead, see streams/pipe.ts), and joined with the ones after it.
 */
export interface Batch {
  /** Bytes for the client, in order, once the records are made. */
  readonly out: readonly Buffer[];
  /** Events among them (for the metrics). */
  readonly events: number;
  /** Set when the stream must end after `out`. */
  readonly end?: EndReason;
  /** The records: positions fromSeq, fromSeq+1, ..., one per upstream id. */
  readonly fromSeq: number;
  readonly upstreamIds: readonly (string | null)[];
  readonly responded: readonly JsonRpcId[];
  /** J1: the events' bytes, with a journal. */
  readonly payloads: readonly string[] | undefined;
  /** The awaited requests whose responses passed in it. */
  readonly answers: readonly JsonRpcId[];
  /** The last position issued, and the replayed events checked, once it is committed. */
  readonly head: number;
  readonly checked: number;
}

/** Batches prepared one after the other, as one batch (one record). */
export function joinBatches(batches: readonly Batch[]): Batch {
  if (batches.length === 1) return batches[0]!;
  const last = batches[batches.length - 1]!;
  const recorded = batches.find((b) => b.upstreamIds.length > 0);
  const journaled = batches.some((b) => b.payloads !== undefined);
  const end = batches.find((b) => b.end !== undefined)?.end;
  return {
    out: batches.flatMap((b) => b.out),
    events: batches.reduce((sum, b) => sum + b.events, 0),
    ...(end ? { end } : {}),
    // Prepared in turn, their records are contiguous.
    fromSeq: (recorded ?? last).fromSeq,
    upstreamIds: batches.flatMap((b) => b.upstreamIds),
    responded: batches.flatMap((b) => b.responded),
    payloads: journaled ? batches.flatMap((b) => b.payloads ?? []) : undefined,
    answers: batches.flatMap((b) => b.answers),
    head: last.head,
    checked: last.checked,
  };
}

export class SseRewriter {
  readonly #options: RewriterOptions;
  readonly #parser: SseParser;
  #items: SseItem[] = [];
  /** What was committed (recorded and released for the client), in the order it was prepared. */
  #head: number;
  #verified: number;
  #ended: EndReason | undefined;
  /** What was prepared: may run ahead of the committed state by the batches not committed yet. */
  #issued: number;
  #checked: number;
  #stopped: EndReason | undefined;
  #issuer: CursorIssuer | undefined;
  readonly #cursors: CursorTarget | undefined;
  readonly #awaiting: Set<JsonRpcId>;

  constructor(options: RewriterOptions) {
    this.#options = options;
    this.#awaiting = new Set(options.awaiting);
    this.#head = this.#issued = options.head;
    this.#cursors = options.cursors;
    this.#verified = this.#checked = options.verify ? 0 : Infinity;
    this.#parser = new SseParser((item) => this.#items.push(item), { maxEventBytes: options.maxEventBytes });
  }

  /** The last position committed so far. */
  get head(): number {
    return this.#head;
  }

  /** True once every replayed event was checked and committed (at once when nothing is replayed). */
  get verified(): boolean {
    return this.#verified >= (this.#options.verify?.expected.length ?? 0);
  }

  /** True once the response of every awaited request has been committed (at once when none is awaited). */
  get answered(): boolean {
    return this.#awaiting.size === 0;
  }

  /** Rewrites one chunk from the replica. Resolves once its records are in the store. */
  push(chunk: Uint8Array): Promise<RewriteResult> {
    return this.commit(this.prepare(chunk));
  }

  /**
   * Parses, numbers and writes out one chunk without recording it: commit it (or a join of it with
   * the batches prepared after it) next, once the batches prepared before it were committed.
   */
  prepare(chunk: Uint8Array): Batch {
    if (this.#stopped) return this.#nothing(this.#stopped);
    this.#parser.push(chunk);
    const items = this.#items;
    this.#items = [];
    return this.#prepare(items);
  }

  /**
   * Records a batch (E5) and releases its bytes: batches are committed one at a time, in the order
   * they were prepared. After a refusal (or a batch that ends the stream) nothing more is released.
   */
  async commit(batch: Batch): Promise<RewriteResult> {
    if (this.#ended) return { out: EMPTY, events: 0, end: this.#ended };
    if (batch.upstreamIds.length > 0) {
      const { fromSeq, upstreamIds, responded, payloads } = batch;
      const result = await this.#cursors!.sink.record(fromSeq, upstreamIds, responded, payloads).catch(() => 'store_failed' as const);
      if (result !== 'ok') {
        // Nothing of this batch may leave without its records: what came before it already did.
        this.#ended = result;
        return { out: EMPTY, events: 0, end: result };
      }
    }
    this.#head = batch.head;
    this.#verified = batch.checked;
    for (const id of batch.answers) this.#awaiting.delete(id);
    if (batch.end) this.#ended = batch.end;
    const out = batch.out.length === 1 ? batch.out[0]! : batch.out.length === 0 ? EMPTY : Buffer.concat(batch.out);
    return { out, events: batch.events, ...(batch.end ? { end: batch.end } : {}) };
  }

  /** The replica's stream ended (every batch committed): an incomplete last block is dropped (never sent half). */
  end(): RewriteResult {
    this.#parser.end();
    this.#items = [];
    if (!this.#ended && !this.verified) this.#ended = 'gap';
    return { out: EMPTY, events: 0, ...(this.#ended ? { end: this.#ended } : {}) };
  }

  /**
   * J3: renews the pump's lease between two pushes, nothing recorded. A refusal ('stale', 'missing')
   * ends the stream as a refused record would.
   */
  async renew(): Promise<RecordResult> {
    if (this.#ended || !this.#cursors?.sink.renew) return 'ok';
    const result = await this.#cursors.sink.renew(this.#head);
    if (result !== 'ok') this.#ended ??= result;
    return result;
  }

  /** An event made by the gateway itself (a signal), numbered and recorded like any other. */
  synthetic(data: string): Promise<RewriteResult> {
    return this.commit(this.#prepare([{ kind: 'event', id: '', event: undefined, data, retry: undefined, size: 0 }], true));
  }

  #nothing(end: EndReason | undefined): Batch {
    return {
      out: [],
      events: 0,
      ...(end ? { end } : {}),
      fromSeq: this.#issued + 1,
      upstreamIds: [],
      responded: [],
      payloads: undefined,
      answers: NO_IDS,
      head: this.#issued,
      checked: this.#checked,
    };
  }

  #prepare(items: readonly SseItem[], synthetic = false): Batch {
    if (items.length === 0) return this.#nothing(undefined);
    // The batch is written as text and encoded once; events that carry a cursor get it in a second
    // pass, all numbered at once (one AES call for the whole read, see CursorIssuer).
    const parts: string[] = [];
    const numbered: SseEvent[] = [];
    const slots: number[] = [];
    const seqs: number[] = [];
    const upstreamIds: (string | null)[] = [];
    const responded: JsonRpcId[] = [];
    const answered: JsonRpcId[] = [];
    const journal = this.#cursors?.journal === true;
    const payloads: string[] = [];
    const fromSeq = this.#issued + 1;
    let events = 0;
    let end: EndReason | undefined;
    const number = (item: SseEvent, seq: number) => {
      numbered.push(item);
      slots.push(parts.length);
      seqs.push(seq);
      parts.push('');
    };

    for (const item of items) {
      if (item.kind === 'comment') {
        parts.push(commentText(item.text));
        continue;
      }
      if (item.kind === 'truncated') continue;
      if (item.kind === 'error') {
        end = 'event_too_large';
        break;
      }
      if (this.#checked < (this.#options.verify?.expected.length ?? 0)) {
        // Check 7: the next replayed event must be the next recorded one, nothing else.
        const { expected, fromSeq: base } = this.#options.verify!;
        if (!item.id || item.id !== expected[this.#checked]) {
          end = 'gap';
          break;
        }
        number(item, base + 1 + this.#checked);
        this.#checked++;
        events++;
        continue;
      }
      const answers = this.#options.trackResponses && item.data ? responseIds(item.data) : NO_IDS;
      if (answers.length > 0) answered.push(...answers);
      if (item.id && !this.#cursors) {
        parts.push(eventText({ ...item, id: undefined }));
      } else if (synthetic || item.id || journal) {
        const seq = fromSeq + upstreamIds.length;
        upstreamIds.push(synthetic || !item.id ? null : item.id);
        responded.push(...answers);
        if (journal) payloads.push(eventText({ ...item, id: undefined }));
        number(item, seq);
      } else {
        // No id (or an empty one, which resets the client's last id): passes as it is (E1).
        parts.push(eventText(item));
      }
      events++;
    }

    this.#issued = fromSeq + upstreamIds.length - 1;
    if (end) this.#stopped = end;
    if (seqs.length > 0) {
      const cursors = this.#issue(seqs);
      // A journaled event leaves as its journal replays it: the same bytes (E3).
      const replayed = numbered.length - payloads.length;
      for (let i = 0; i < numbered.length; i++) {
        parts[slots[i]!] = i < replayed ? eventTextWithCursor(numbered[i]!, cursors[i]!) : journaledWithCursor(payloads[i - replayed]!, cursors[i]!);
      }
    }
    return {
      out: parts.length === 0 ? [] : [Buffer.from(parts.join(''), 'utf8')],
      events,
      ...(end ? { end } : {}),
      fromSeq,
      upstreamIds,
      responded,
      payloads: journal ? payloads : undefined,
      answers: answered,
      head: this.#issued,
      checked: this.#checked,
    };
  }

  #issue(seqs: readonly number[]): string[] {
    if (!this.#issuer) {
      const { codec, sessionId, incarnation } = this.#cursors!;
      this.#issuer = codec.issuer(sessionId, incarnation);
    }
    return this.#issuer.encode(seqs);
  }
}

const EMPTY = Buffer.alloc(0);
const NO_IDS: readonly JsonRpcId[] = [];
