/**
 * The response path of every SSE stream (CONTRACT.md §4): each event id the replica sends is
 * replaced by the gateway's cursor, and its position recorded before the event leaves (E5; the
 * sink decides what that means while the store does not answer, §7). Records are written once per
 * chunk the replica sends, not once per event.
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

export class SseRewriter {
  readonly #options: RewriterOptions;
  readonly #parser: SseParser;
  #items: SseItem[] = [];
  #head: number;
  #verified: number;
  #ended: EndReason | undefined;
  #issuer: CursorIssuer | undefined;
  readonly #cursors: CursorTarget | undefined;
  readonly #awaiting: Set<JsonRpcId>;

  constructor(options: RewriterOptions) {
    this.#options = options;
    this.#awaiting = new Set(options.awaiting);
    this.#head = options.head;
    this.#cursors = options.cursors;
    this.#verified = options.verify ? 0 : Infinity;
    this.#parser = new SseParser((item) => this.#items.push(item), { maxEventBytes: options.maxEventBytes });
  }

  /** The last position issued so far. */
  get head(): number {
    return this.#head;
  }

  /** True once every replayed event was checked (at once when nothing is replayed). */
  get verified(): boolean {
    return this.#verified >= (this.#options.verify?.expected.length ?? 0);
  }

  /** True once the response of every awaited request has passed (at once when none is awaited). */
  get answered(): boolean {
    return this.#awaiting.size === 0;
  }

  /** Rewrites one chunk from the replica. Resolves once its records are in the store. */
  push(chunk: Uint8Array): Promise<RewriteResult> {
    if (this.#ended) return Promise.resolve({ out: EMPTY, events: 0, end: this.#ended });
    this.#parser.push(chunk);
    const items = this.#items;
    this.#items = [];
    return this.#emit(items);
  }

  /** The replica's stream ended: an incomplete last block is dropped (never sent half). */
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
    return this.#emit([{ kind: 'event', id: '', event: undefined, data, retry: undefined, size: 0 }], true);
  }

  async #emit(items: readonly SseItem[], synthetic = false): Promise<RewriteResult> {
    // The batch is written as text and encoded once; events that carry a cursor get it in a second
    // pass, all numbered at once (one AES call for the whole read, see CursorIssuer).
    const parts: string[] = [];
    const numbered: SseEvent[] = [];
    const slots: number[] = [];
    const seqs: number[] = [];
    const upstreamIds: (string | null)[] = [];
    const responded: JsonRpcId[] = [];
    const journal = this.#cursors?.journal === true;
    const payloads: string[] = [];
    const fromSeq = this.#head + 1;
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
      if (!this.verified) {
        // Check 7: the next replayed event must be the next recorded one, nothing else.
        const { expected, fromSeq: base } = this.#options.verify!;
        if (!item.id || item.id !== expected[this.#verified]) {
          end = 'gap';
          break;
        }
        number(item, base + 1 + this.#verified);
        this.#verified++;
        events++;
        continue;
      }
      const answers = this.#options.trackResponses && item.data ? responseIds(item.data) : NO_IDS;
      for (const id of answers) this.#awaiting.delete(id);
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

    if (upstreamIds.length > 0) {
      const result = await this.#cursors!.sink.record(fromSeq, upstreamIds, responded, journal ? payloads : undefined).catch(() => 'store_failed' as const);
      if (result !== 'ok') {
        // Nothing of this batch may leave without its records: what came before it already did.
        this.#ended = result;
        return { out: EMPTY, events: 0, end: result };
      }
      this.#head = fromSeq + upstreamIds.length - 1;
    }
    if (seqs.length > 0) {
      const cursors = this.#issue(seqs);
      // A journaled event leaves as its journal replays it: the same bytes (E3).
      const replayed = numbered.length - payloads.length;
      for (let i = 0; i < numbered.length; i++) {
        parts[slots[i]!] = i < replayed ? eventTextWithCursor(numbered[i]!, cursors[i]!) : journaledWithCursor(payloads[i - replayed]!, cursors[i]!);
      }
    }
    if (end) this.#ended = end;
    return { out: parts.length === 0 ? EMPTY : Buffer.from(parts.join(''), 'utf8'), events, ...(end ? { end } : {}) };
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
