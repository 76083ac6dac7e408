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
 * A block that the replica wrote already as serializer.ts would write it (canonical.ts: what the
 * MCP SDK's servers write) is copied as bytes, its id line replaced, and journaled as bytes too
 * (never decoded: JournalFrames); any other block is parsed and written again. The client sees the
 * same bytes, and the journal keeps the same payloads, either way.
 *
 * Nothing half-rewritten is ever sent: a block is forwarded only when complete and recorded; an
 * oversized event, a refused record or a broken replay ends the output where it stands.
 */
import { isAscii, isUtf8 } from 'node:buffer';
import type { CursorCodec, CursorIssuer } from '../cursor/codec.js';
import { responseIds } from '../jsonrpc.js';
import { JournalFrames, JournalFramesBuilder, textOf } from '../store/journal-frames.js';
import type { JsonRpcId, RecordResult } from '../store/types.js';
import { scanCanonical, type CanonicalSpan } from './canonical.js';
import { compareReplayed, eventTag } from './event-tag.js';
import { SseParser, type SseEvent, type SseItem } from './parser.js';
import { commentText, eventText, eventTextWithCursor, journaledWithCursor } from './serializer.js';

export interface RecordSink {
  /**
   * Records positions fromSeq, fromSeq+1, ... with these upstream ids, each as its tag (event-tag.ts:
   * the id and a digest of the event; null: none, or made by the gateway) and, with the journal,
   * each event's bytes without its id line (J1).
   * 'ok': the events may leave. A rejection is a record that cannot be made at all.
   */
  record(fromSeq: number, upstreamIds: readonly (string | null)[], responded: readonly JsonRpcId[], payloads?: JournalFrames): Promise<RecordResult>;
  /** J3: renews the pump's lease with nothing recorded after `head` ('ok' when there is none to renew). */
  renew?(head: number): Promise<RecordResult>;
  /**
   * E6: the owner of a continuation sent an event under an upstream id already recorded for the
   * incarnation, not as its faithful replay (`replay`: among the events it was to replay; `live`:
   * after them). Marks the incarnation, so that no instance continues it from the owner again;
   * awaited before the stream ends. Its failure is the sink's to report: the stream ends anyway.
   */
  diverged?(when: 'replay' | 'live'): Promise<void>;
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
  | 'gap'
  /** E6: the owner sent an event under an upstream id recorded for another event (it numbers anew). */
  | 'reused';

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
  /**
   * J1: the stream begins with a priming event (see priming()): a continuation's whenever it has
   * cursors, a new stream's when they journal.
   */
  prime?: boolean;
  /** A continuation from the owner's log: see Verify. */
  verify?: Verify;
}

/**
 * A continuation from the owner's log (§5 check 7, E6): the recorded events after the cursor,
 * expected first, in order, as their tags (event-tag.ts), renumbered as positions fromSeq+1...;
 * then the live stream, whose events must be new.
 */
export interface Verify {
  readonly expected: readonly string[];
  readonly fromSeq: number;
  /**
   * The upstream ids recorded for the incarnation, as far as the gateway read them: an event under
   * one of them that is not its faithful replay is never forwarded (E6). The rewriter adds the ids
   * of the live stream as they pass, at most `limit` in all (the oldest go).
   */
  readonly recorded?: Set<string>;
  readonly limit?: number;
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
  readonly payloads: JournalFrames | undefined;
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
    payloads: journaled ? JournalFrames.join(batches.map((b) => b.payloads ?? JournalFrames.EMPTY)) : undefined,
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
  /** The last commit not released yet: the next one is released after it. */
  #committing: Promise<RewriteResult> | undefined;
  readonly #awaiting: Set<JsonRpcId>;
  /** scanCanonical's answer, one object for the stream. */
  readonly #span: CanonicalSpan = { start: 0, idStart: 0, idEnd: 0, end: 0 };

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
    const draft = new Draft(this.#issued + 1);
    this.#read(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength), draft);
    return this.#finish(draft);
  }

  /**
   * Records a batch (E5) and releases its bytes: batches are committed in the order they were
   * prepared. A batch may be committed while the one before it still is: its records are written
   * at once (the sink orders them, see streams/unrecorded.ts), and it is released only after that
   * one. After a refusal (or a batch that ends the stream) nothing more is released.
   */
  commit(batch: Batch): Promise<RewriteResult> {
    const ahead = this.#committing;
    const recorded =
      this.#ended === undefined && batch.upstreamIds.length > 0
        ? this.#cursors!.sink.record(batch.fromSeq, batch.upstreamIds, batch.responded, batch.payloads).catch(() => 'store_failed' as const)
        : undefined;
    const done = this.#release(ahead, batch, recorded);
    this.#committing = done;
    void done.then(() => {
      if (this.#committing === done) this.#committing = undefined;
    });
    return done;
  }

  async #release(ahead: Promise<RewriteResult> | undefined, batch: Batch, recorded: Promise<RecordResult | 'store_failed'> | undefined): Promise<RewriteResult> {
    if (ahead) await ahead;
    if (this.#ended) return { out: EMPTY, events: 0, end: this.#ended };
    const result = recorded ? await recorded : 'ok';
    if (this.#ended) return { out: EMPTY, events: 0, end: this.#ended };
    if (result !== 'ok') {
      // Nothing of this batch may leave without its records: what came before it already did.
      this.#ended = result;
      return { out: EMPTY, events: 0, end: result };
    }
    this.#head = batch.head;
    this.#verified = batch.checked;
    for (const id of batch.answers) this.#awaiting.delete(id);
    if (batch.end) this.#ended = batch.end;
    if (batch.end === 'reused') {
      // Marked before the stream ends, so that the client's reconnection finds it (E6).
      const when = batch.checked < (this.#options.verify?.expected.length ?? 0) ? 'replay' : 'live';
      await this.#cursors?.sink.diverged?.(when);
    }
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

  /** J1: every event of the stream gets a cursor and is journaled. */
  get journaled(): boolean {
    return this.#cursors?.journal === true;
  }

  /**
   * J1: how a stream begins. A continuation (the owner's replay, journal or not), with the priming
   * event for the position it continues after: the cursor the client already holds, nothing to
   * record, so that a client cut before the next event keeps its place. A journaled stream that
   * has issued no cursor yet, with one of its own at its first position ('record': prime()). None
   * for a new stream that is not journaled, or whose first event already carries a cursor (a
   * signal).
   */
  priming(): Buffer | 'record' | undefined {
    const cursors = this.#cursors;
    if (!this.#options.prime || !cursors) return undefined;
    const { verify } = this.#options;
    if (verify) return primingEvent(cursors.codec.issuer(cursors.sessionId, cursors.incarnation).encode([verify.fromSeq])[0]!);
    return this.journaled && this.#issued === 0 ? 'record' : undefined;
  }

  /** J1: the gateway's priming event (empty data), numbered, recorded and journaled like any other. */
  prime(): Promise<RewriteResult> {
    return this.synthetic('');
  }

  /** An event made by the gateway itself (a signal), numbered and recorded like any other. */
  synthetic(data: string): Promise<RewriteResult> {
    const draft = new Draft(this.#issued + 1);
    this.#take([{ kind: 'event', id: '', event: undefined, data, retry: undefined, size: 0 }], draft, true);
    return this.commit(this.#finish(draft));
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

  /**
   * Reads one chunk into the draft, in order. Blocks already in canonical form (canonical.ts) are
   * copied as bytes, their id lines replaced; the parser reads everything else, and always reads on
   * to the end of a block it began. Copying needs cursors, a live stream (a replay is checked event
   * by event), and no responses to look for (their data is parsed).
   */
  #read(buf: Buffer, draft: Draft): void {
    const len = buf.length;
    let pos = 0;
    draft.source(buf);
    // The bytes of this chunk that blocks may be copied from: whole lines, no CR, valid UTF-8.
    let limit = -1;
    let ascii = false;
    while (pos < len && draft.end === undefined) {
      const copying = this.#cursors !== undefined && !this.#options.trackResponses && this.#checked >= (this.#options.verify?.expected.length ?? 0);
      let next = len;
      if (copying && this.#parser.atBoundary) {
        if (limit < 0) {
          const lastLF = buf.lastIndexOf(LF);
          const cr = buf.indexOf(CR, pos);
          const end = cr !== -1 && cr <= lastLF ? cr : lastLF + 1;
          const region = buf.subarray(pos, Math.max(pos, end));
          ascii = isAscii(region);
          limit = ascii || isUtf8(region) ? end : pos;
        }
        if (pos < limit) {
          pos = this.#copy(buf, pos, limit, ascii, draft);
          if (pos >= len) break;
          // Not canonical: the parser reads this block, and copying goes on after it.
          next = blockEnd(buf, pos);
        }
      } else if (copying) {
        next = blockEnd(buf, pos);
      }
      this.#parser.push(pos === 0 && next === len ? buf : buf.subarray(pos, next));
      const items = this.#items;
      this.#items = [];
      this.#take(items, draft, false);
      pos = next;
    }
  }

  /** Copies the canonical blocks and comments from `pos` on; returns where the first other thing starts. */
  #copy(buf: Buffer, pos: number, limit: number, ascii: boolean, draft: Draft): number {
    const span = this.#span;
    const journal = this.#cursors!.journal === true;
    for (;;) {
      const kind = scanCanonical(buf, pos, limit, this.#options.maxEventBytes, span);
      if (kind === 'other') return pos;
      pos = span.end;
      if (kind === 'blank') continue;
      if (kind === 'comment') {
        draft.copy(span.start, span.end);
        continue;
      }
      const { start, idStart, idEnd, end } = span;
      draft.events++;
      const hasId = idEnd - idStart > ID_LINE_EMPTY;
      if (!journal && !hasId) {
        // No id (or an empty one): passes as it is (E1).
        draft.copy(start, end);
        continue;
      }
      const id = hasId ? textOf(buf, ascii, idStart + ID_LINE_START.length, idEnd - 1) : null;
      if (id !== null && this.#reused(id)) {
        draft.end = 'reused';
        return buf.length;
      }
      draft.upstreamIds.push(id === null ? null : eventTag(id, buf.subarray(start, end)));
      // J1: its bytes without the id line, as they are (the region is valid UTF-8).
      if (journal) draft.journal.copied(start, idStart, idEnd, end, ascii);
      draft.copy(start, idStart);
      draft.cursor(draft.fromSeq + draft.upstreamIds.length - 1);
      draft.copy(idEnd, end);
    }
  }

  /** Adds the parser's items to the draft. */
  #take(items: readonly SseItem[], draft: Draft, synthetic: boolean): void {
    const journal = this.#cursors?.journal === true;
    for (const item of items) {
      if (item.kind === 'comment') {
        draft.text(commentText(item.text));
        continue;
      }
      if (item.kind === 'truncated') continue;
      if (item.kind === 'error') {
        draft.end = 'event_too_large';
        break;
      }
      if (this.#checked < (this.#options.verify?.expected.length ?? 0)) {
        // Check 7: the next replayed event must be the next recorded one, nothing else.
        const { expected, fromSeq: base, recorded = NO_RECORDED } = this.#options.verify!;
        const compared = item.id ? compareReplayed(expected, this.#checked, item.id, () => eventText(item), recorded) : 'other';
        if (compared !== 'same') {
          draft.end = compared === 'reused' ? 'reused' : 'gap';
          break;
        }
        draft.number(item, base + 1 + this.#checked, -1);
        this.#checked++;
        draft.events++;
        continue;
      }
      if (item.id && !synthetic && this.#reused(item.id)) {
        draft.end = 'reused';
        break;
      }
      const answers = this.#options.trackResponses && item.data ? responseIds(item.data) : NO_IDS;
      if (answers.length > 0) draft.answers.push(...answers);
      if (item.id && !this.#cursors) {
        draft.text(eventText({ ...item, id: undefined }));
      } else if (synthetic || item.id || journal) {
        const seq = draft.fromSeq + draft.upstreamIds.length;
        draft.upstreamIds.push(synthetic || !item.id ? null : eventTag(item.id, eventText(item)));
        draft.responded.push(...answers);
        draft.number(item, seq, journal ? draft.journaled(eventText({ ...item, id: undefined })) : -1);
      } else {
        // No id (or an empty one, which resets the client's last id): passes as it is (E1).
        draft.text(eventText(item));
      }
      draft.events++;
    }
  }

  /**
   * E6, on the live stream of a continuation from the owner: true when `id` was recorded for the
   * incarnation already (the owner numbers anew); else it is recorded among the ids now.
   */
  #reused(id: string): boolean {
    const recorded = this.#options.verify?.recorded;
    if (recorded === undefined) return false;
    if (recorded.has(id)) return true;
    recorded.add(id);
    if (recorded.size > (this.#options.verify!.limit ?? Infinity)) recorded.delete(recorded.values().next().value!);
    return false;
  }

  #finish(draft: Draft): Batch {
    if (draft.events === 0 && draft.end === undefined && draft.parts.length === 0 && draft.ops.length === 0) return this.#nothing(undefined);
    const { fromSeq, upstreamIds, end } = draft;
    this.#issued = fromSeq + upstreamIds.length - 1;
    if (end) this.#stopped = end;
    const journal = this.#cursors?.journal === true;
    if ((draft.seqs.length > 0 || draft.numbered.length > 0) && !this.#issuer) {
      const { codec, sessionId, incarnation } = this.#cursors!;
      this.#issuer = codec.issuer(sessionId, incarnation);
    }
    return {
      out: draft.bytes(this.#issuer),
      events: draft.events,
      ...(end ? { end } : {}),
      fromSeq,
      upstreamIds,
      responded: draft.responded,
      payloads: journal ? draft.frames() : undefined,
      answers: draft.answers,
      head: this.#issued,
      checked: this.#checked,
    };
  }
}

/** J1: a priming event, as the client gets it: `cursor` and an empty data field. */
export function primingEvent(cursor: string): Buffer {
  return Buffer.from(`id: ${cursor}\ndata: \n\n`, 'latin1');
}

const EMPTY = Buffer.alloc(0);
const NO_IDS: readonly JsonRpcId[] = [];
const NO_RECORDED: ReadonlySet<string> = new Set();
const NO_CURSORS: readonly string[] = [];
const LF = 0x0a;
const CR = 0x0d;
const BLANK_LINE = Buffer.from('\n\n');
/** `id: ` and its LF: an id line no longer than this carries an empty id. */
const ID_LINE_EMPTY = 'id: \n'.length;
const ID_LINE_START = 'id: ';

/** Where the block that `pos` is in ends (after its blank line), or the end of the chunk. */
function blockEnd(buf: Buffer, pos: number): number {
  const blank = buf.indexOf(BLANK_LINE, pos);
  return blank === -1 ? buf.length : blank + BLANK_LINE.length;
}

// What the output is made of, three numbers an operation: bytes of the chunk, a cursor's id line,
// or texts that the parser's items became.
const COPY = 0;
const CURSOR = 1;
const TEXTS = 2;

/**
 * One batch as it is read: its records, and its output in order, cursors left blank until the
 * whole batch is numbered (one AES call, see CursorIssuer). The output is text (what the parser
 * read, serialized again) and, once blocks are copied, byte ranges of the chunk beside it.
 */
class Draft {
  readonly fromSeq: number;
  events = 0;
  end: EndReason | undefined;
  readonly upstreamIds: (string | null)[] = [];
  readonly responded: JsonRpcId[] = [];
  readonly answers: JsonRpcId[] = [];
  /** J1: the events' bytes, in order. */
  readonly journal = new JournalFramesBuilder();
  /** J1: the payloads of the parsed events, which their output is written from. */
  readonly #texts: string[] = [];
  /** The positions of the copied events, in order: their id lines are written as bytes (CursorIssuer.lines). */
  readonly seqs: number[] = [];
  /** Texts for the client; '' where a parsed event waits for its cursor. */
  readonly parts: string[] = [];
  /** The parsed events that wait for a cursor: their part, position and payload (-1: none). */
  readonly numbered: SseEvent[] = [];
  readonly #slots: number[] = [];
  readonly #numberedSeqs: number[] = [];
  readonly #payloadAt: number[] = [];
  /** Once something is copied: the whole output as operations (COPY from to, CURSOR index, TEXTS from to). */
  readonly ops: number[] = [];
  /** The chunk being read: what COPY operations and copied payloads are ranges of. */
  #chunk: Buffer = EMPTY;
  #textsFrom = 0;

  constructor(fromSeq: number) {
    this.fromSeq = fromSeq;
  }

  text(text: string): void {
    this.parts.push(text);
  }

  number(item: SseEvent, seq: number, payloadAt: number): void {
    this.numbered.push(item);
    this.#slots.push(this.parts.length);
    this.#numberedSeqs.push(seq);
    this.#payloadAt.push(payloadAt);
    this.parts.push('');
  }

  /** Bytes [from, to) of the chunk being read (one chunk a draft), joined to the range before when they follow it. */
  copy(from: number, to: number): void {
    if (from === to) return;
    this.#flushTexts();
    const ops = this.ops;
    const n = ops.length;
    if (n > 0 && ops[n - 3] === COPY && ops[n - 1] === from) ops[n - 1] = to;
    else ops.push(COPY, from, to);
  }

  /** The id line of the cursor for `seq`. */
  cursor(seq: number): void {
    this.#flushTexts();
    this.ops.push(CURSOR, this.seqs.length, 0);
    this.seqs.push(seq);
  }

  source(chunk: Buffer): void {
    this.#chunk = chunk;
  }

  /** J1: the events' bytes, framed. */
  frames(): JournalFrames {
    return this.journal.build(this.#chunk);
  }

  /** J1: a parsed event's payload, journaled: where number finds it. */
  journaled(text: string): number {
    this.journal.text(text);
    return this.#texts.push(text) - 1;
  }

  /**
   * The output, with the cursors from `issuer` (one AES call for the parsed events, one for the
   * copied ones, each only for its own).
   */
  bytes(issuer: CursorIssuer | undefined): Buffer[] {
    const { parts, seqs, numbered } = this;
    const cursors = numbered.length > 0 ? issuer!.encode(this.#numberedSeqs) : NO_CURSORS;
    for (let i = 0; i < numbered.length; i++) {
      const cursor = cursors[i]!;
      const payloadAt = this.#payloadAt[i]!;
      // A journaled event leaves as its journal replays it: the same bytes (E3).
      parts[this.#slots[i]!] = payloadAt < 0 ? eventTextWithCursor(numbered[i]!, cursor) : journaledWithCursor(this.#texts[payloadAt]!, cursor);
    }
    if (this.ops.length === 0) return parts.length === 0 ? [] : [Buffer.from(parts.join(''), 'utf8')];
    this.#flushTexts();
    const { ops } = this;
    // The copied events' id lines are written as bytes, without a string for each cursor.
    const lines = seqs.length > 0 ? issuer!.lines(seqs, ID_LINE_START, '\n') : undefined;
    const texts: string[] = [];
    let size = 0;
    for (let i = 0; i < ops.length; i += 3) {
      const op = ops[i];
      if (op === COPY) size += ops[i + 2]! - ops[i + 1]!;
      else if (op === CURSOR) size += lines!.length(ops[i + 1]!);
      else {
        const text = parts.slice(ops[i + 1], ops[i + 2]).join('');
        ops[i + 1] = texts.length;
        texts.push(text);
        size += Buffer.byteLength(text);
      }
    }
    const out = Buffer.allocUnsafe(size);
    const chunk = this.#chunk;
    let at = 0;
    for (let i = 0; i < ops.length; i += 3) {
      const op = ops[i];
      if (op === COPY) {
        at += chunk.copy(out, at, ops[i + 1], ops[i + 2]);
      } else if (op === CURSOR) {
        at += lines!.write(ops[i + 1]!, out, at);
      } else {
        at += out.write(texts[ops[i + 1]!]!, at, 'utf8');
      }
    }
    return [out];
  }

  #flushTexts(): void {
    if (this.parts.length === this.#textsFrom) return;
    this.ops.push(TEXTS, this.#textsFrom, this.parts.length);
    this.#textsFrom = this.parts.length;
  }
}
