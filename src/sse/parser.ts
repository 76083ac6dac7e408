/**
 * Streaming, byte-level parser for `text/event-stream` (WHATWG HTML §9.2.5 "Parsing an event
 * stream" and §9.2.6 "Interpreting an event stream"), modelled on undici's eventsource-stream.
 *
 * Unlike a browser it does not keep stream state (last event ID, reconnection time) and does not
 * drop data-less blocks: the gateway forwards what the replica wrote, so it reports every block
 * with at least one known field, exactly as written, and every comment where it stands.
 *
 * Memory: the parser holds at most the incomplete line (copied out of its chunk) and the decoded
 * fields of the current block, both bounded by `maxEventBytes`.
 *
 * Items are delivered synchronously from `push` and `end`. The callback must not throw: the rest
 * of the chunk being scanned would be lost.
 */

export interface SseEvent {
  kind: 'event';
  /** `undefined`: no valid `id` field; `''`: an empty `id:` (it resets the client's last event ID). */
  id: string | undefined;
  event: string | undefined;
  /** The `data` lines joined with "\n"; `undefined` when the block had no `data` field. */
  data: string | undefined;
  retry: number | undefined;
  /**
   * Bytes of the block: from its first field line through the CR or LF that ends its blank line.
   * An LF that completes that CRLF is not counted, because the event is dispatched on the CR
   * without waiting for the next chunk; this keeps `size` the same however the stream is split.
   */
  size: number;
}

/** A comment line; `text` is everything after the colon, leading space included (": ping" → " ping"). */
export interface SseComment {
  kind: 'comment';
  text: string;
}

export interface SseTooLarge {
  kind: 'error';
  code: 'SSE_EVENT_TOO_LARGE';
  message: string;
  limit: number;
}

/** `end()` came in the middle of a block or line: those `bytes` were never dispatched. */
export interface SseTruncated {
  kind: 'truncated';
  bytes: number;
}

export type SseItem = SseEvent | SseComment | SseTooLarge | SseTruncated;

export interface SseParserOptions {
  /** Largest block (or single line) accepted, line endings included. Default: unbounded. */
  maxEventBytes?: number;
}

const LF = 0x0a;
const CR = 0x0d;
const COLON = 0x3a;
const SPACE = 0x20;
const BOM = Buffer.from([0xef, 0xbb, 0xbf]);
const EMPTY = Buffer.alloc(0);

const DATA = Buffer.from('data');
const EVENT = Buffer.from('event');
const ID = Buffer.from('id');
const RETRY = Buffer.from('retry');

export class SseParser {
  private readonly maxEventBytes: number;
  private closed = false;

  /** §9.2.5: one leading BOM is ignored; until 3 bytes are in we may hold a prefix of it. */
  private bomPending = true;
  private bomHeld: Buffer = EMPTY;

  /** The last chunk ended in CR: an LF at the start of the next one completes that CRLF. */
  private afterCR = false;

  /** Copies of the pieces of a line that is not complete yet. */
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  /** A block starts at its first non-comment line; comments before it stand between blocks. */
  private inBlock = false;
  private blockBytes = 0;
  private id: string | undefined;
  private event: string | undefined;
  private data: string | undefined;
  private retry: number | undefined;

  constructor(
    private readonly onItem: (item: SseItem) => void,
    options: SseParserOptions = {},
  ) {
    this.maxEventBytes = options.maxEventBytes ?? Infinity;
  }

  /**
   * True between two blocks with nothing held back (no partial line, no CR waiting for its LF, the
   * BOM settled): the next byte pushed starts a line. A reader may then take whole blocks out of the
   * stream itself (rewriter.ts does, for blocks already in canonical form) and push the rest.
   */
  get atBoundary(): boolean {
    return !this.closed && !this.bomPending && !this.afterCR && this.pending.length === 0 && !this.inBlock;
  }

  push(chunk: Uint8Array): void {
    if (this.closed || chunk.length === 0) return;
    let buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    if (this.bomPending) {
      const head = this.bomHeld.length === 0 ? buf : Buffer.concat([this.bomHeld, buf]);
      if (head.length < BOM.length && BOM.subarray(0, head.length).equals(head)) {
        this.bomHeld = Buffer.from(head);
        return;
      }
      this.bomPending = false;
      this.bomHeld = EMPTY;
      buf = head.subarray(0, BOM.length).equals(BOM) ? head.subarray(BOM.length) : head;
    }
    this.scan(buf);
  }

  /**
   * The stream is over. §9.2.6: an incomplete block at the end is discarded, not dispatched; we
   * report its size so that a caller can tell a cut stream from a clean one.
   */
  end(): void {
    if (this.closed) return;
    if (this.bomHeld.length > 0) {
      this.scan(this.bomHeld);
      if (this.closed) return;
    }
    this.closed = true;
    const bytes = (this.inBlock ? this.blockBytes : 0) + this.pendingBytes;
    if (bytes > 0) this.onItem({ kind: 'truncated', bytes });
  }

  private scan(buf: Buffer): void {
    const len = buf.length;
    let pos = 0;
    if (this.afterCR) {
      this.afterCR = false;
      if (buf[0] === LF) {
        pos = 1;
        if (!this.countLF()) return;
      }
    }
    // Positions of the next LF and CR at or after `pos`: -1 once none is left, -2 not yet searched.
    // Caching them keeps a chunk of many lines linear even when one of the two never occurs.
    let lf = -2;
    let cr = -2;
    while (pos < len) {
      if (lf !== -1 && lf < pos) lf = buf.indexOf(LF, pos);
      if (cr !== -1 && cr < pos) cr = buf.indexOf(CR, pos);
      const eol = lf === -1 ? cr : cr === -1 ? lf : Math.min(lf, cr);
      if (eol === -1) {
        this.stash(buf.subarray(pos));
        return;
      }
      if (!this.completeLine(buf, pos, eol)) return;
      pos = eol + 1;
      if (buf[eol] === CR) {
        if (pos === len) {
          this.afterCR = true;
          return;
        }
        if (buf[pos] === LF) {
          pos++;
          if (!this.countLF()) return;
        }
      }
    }
  }

  /** The second byte of a CRLF belongs to the block of the line it ends, if that line had one. */
  private countLF(): boolean {
    return !this.inBlock || this.account(1, true);
  }

  private stash(tail: Buffer): void {
    this.pendingBytes += tail.length;
    if (!this.withinLimit((this.inBlock ? this.blockBytes : 0) + this.pendingBytes)) return;
    // A copy, so that a small line tail does not pin a large chunk nor depend on its reuse.
    this.pending.push(Buffer.from(tail));
  }

  /** Handles the line buf[start, end), prefixed by any pending pieces. */
  private completeLine(buf: Buffer, start: number, end: number): boolean {
    if (this.pending.length === 0) return this.line(buf, start, end);
    this.pending.push(buf.subarray(start, end));
    const line = Buffer.concat(this.pending);
    this.pending = [];
    this.pendingBytes = 0;
    return this.line(line, 0, line.length);
  }

  /** One line, without its line ending, of which we count the first byte here. */
  private line(buf: Buffer, start: number, end: number): boolean {
    if (start === end) return this.dispatch();
    if (buf[start] === COLON) {
      if (!this.account(end - start + 1, this.inBlock)) return false;
      this.onItem({ kind: 'comment', text: buf.toString('utf8', start + 1, end) });
      return true;
    }
    this.inBlock = true;
    if (!this.account(end - start + 1, true)) return false;
    this.field(buf, start, end);
    return true;
  }

  /** §9.2.6 "process the field": unknown fields, and invalid `id` and `retry` values, are ignored. */
  private field(buf: Buffer, start: number, end: number): void {
    let v: number;
    if ((v = valueStart(buf, start, end, DATA)) >= 0) {
      const value = buf.toString('utf8', v, end);
      this.data = this.data === undefined ? value : `${this.data}\n${value}`;
    } else if ((v = valueStart(buf, start, end, EVENT)) >= 0) {
      this.event = buf.toString('utf8', v, end);
    } else if ((v = valueStart(buf, start, end, ID)) >= 0) {
      if (!hasNul(buf, v, end)) this.id = buf.toString('utf8', v, end);
    } else if ((v = valueStart(buf, start, end, RETRY)) >= 0) {
      const retry = parseDigits(buf, v, end);
      if (retry !== undefined) this.retry = retry;
    }
  }

  /** A blank line ends the block (§9.2.6 "dispatch the event"). */
  private dispatch(): boolean {
    if (!this.inBlock) return true;
    if (!this.account(1, true)) return false;
    const { id, event, data, retry } = this;
    const size = this.blockBytes;
    this.inBlock = false;
    this.blockBytes = 0;
    this.id = this.event = this.data = this.retry = undefined;
    if (id !== undefined || event !== undefined || data !== undefined || retry !== undefined) {
      this.onItem({ kind: 'event', id, event, data, retry, size });
    }
    return true;
  }

  /** Adds `bytes` to the block (or, outside one, checks them alone); false once over the limit. */
  private account(bytes: number, inBlock: boolean): boolean {
    const total = (inBlock ? this.blockBytes : 0) + bytes;
    if (!this.withinLimit(total)) return false;
    if (inBlock) this.blockBytes = total;
    return true;
  }

  private withinLimit(total: number): boolean {
    if (total <= this.maxEventBytes) return true;
    // Past the limit the block boundaries are no longer trustworthy: stop for good.
    this.closed = true;
    this.pending = [];
    this.pendingBytes = 0;
    this.id = this.event = this.data = this.retry = undefined;
    this.onItem({
      kind: 'error',
      code: 'SSE_EVENT_TOO_LARGE',
      message: `SSE event exceeds ${this.maxEventBytes} bytes`,
      limit: this.maxEventBytes,
    });
    return false;
  }
}

/**
 * §9.2.5: the field name runs up to the first colon (the whole line if there is none), and one
 * leading space is removed from the value. Returns where the value starts if the line is field
 * `name`, else -1. Comparing bytes avoids decoding the names of lines we then ignore.
 */
function valueStart(buf: Buffer, start: number, end: number, name: Buffer): number {
  const after = start + name.length;
  if (after > end) return -1;
  for (let i = 0; i < name.length; i++) if (buf[start + i] !== name[i]) return -1;
  if (after === end) return end;
  if (buf[after] !== COLON) return -1;
  return after + 1 < end && buf[after + 1] === SPACE ? after + 2 : after + 1;
}

/** §9.2.6: an id with NUL is ignored. A loop, not subarray().includes(): ids are short, and this runs per event. */
function hasNul(buf: Buffer, start: number, end: number): boolean {
  for (let i = start; i < end; i++) if (buf[i] === 0) return true;
  return false;
}

/**
 * §9.2.6: `retry` counts only if its value is all ASCII digits (and not empty). Values beyond
 * Number.MAX_SAFE_INTEGER are ignored too: no client can wait that long, and they would not
 * survive a round trip through a number.
 */
function parseDigits(buf: Buffer, start: number, end: number): number | undefined {
  if (start === end) return undefined;
  let n = 0;
  for (let i = start; i < end; i++) {
    const d = buf[i]! - 0x30;
    if (d < 0 || d > 9) return undefined;
    n = n * 10 + d;
  }
  return Number.isSafeInteger(n) ? n : undefined;
}
