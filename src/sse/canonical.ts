/**
 * Blocks of a `text/event-stream` that are already written as serializer.ts writes them: LF line
 * endings, `name: value` fields in the order event, id, retry, data (each once but data), no
 * comment or unknown field inside, an id without NUL and a retry in canonical digits. Such a block
 * parses (parser.ts) to an event that serializes back to the very same bytes, so the rewriter can
 * copy its bytes instead of decoding the event and writing it again (the id line is all it
 * changes), and take its journaled payload (J1) from them too. What is not canonical is the
 * parser's to read.
 *
 * The caller makes sure that the scan starts between two blocks of the stream, and that the bytes
 * it may read hold no CR and are valid UTF-8 (so that decoding and encoding them again gives the
 * same bytes).
 */

const LF = 0x0a;
const COLON = 0x3a;
const ZERO = 0x30;
const NINE = 0x39;
const NUL = 0;

// Plain Uint8Arrays: read byte by byte, they are quicker than Buffers.
const EVENT = new Uint8Array(Buffer.from('event: '));
const ID = new Uint8Array(Buffer.from('id: '));
const RETRY = new Uint8Array(Buffer.from('retry: '));
const DATA = new Uint8Array(Buffer.from('data: '));

/** Digits of a retry that is surely a safe integer (parser.ts ignores any other). */
const RETRY_DIGITS = 15;

/**
 * Where the parts of what scanCanonical found lie: [start, end), and for a block its id line
 * [idStart, idEnd), or where its id line would go when it has none (idStart === idEnd, after the
 * event line), as serializer.ts places it.
 */
export interface CanonicalSpan {
  start: number;
  idStart: number;
  idEnd: number;
  end: number;
}

/**
 * What starts at `start` in buf[start, limit), its span written into `span`:
 * - 'block': a whole canonical block, blank line included, of at most maxBytes;
 * - 'comment': a comment line outside a block (written back as it is), of at most maxBytes;
 * - 'blank': an empty line outside a block, which stands for nothing (the parser drops it);
 * - 'other': anything else, an incomplete block or line included.
 */
export function scanCanonical(buf: Buffer, start: number, limit: number, maxBytes: number, span: CanonicalSpan): 'block' | 'comment' | 'blank' | 'other' {
  if (start >= limit) return 'other';
  span.start = start;
  const first = buf[start];
  if (first === LF) {
    span.end = start + 1;
    return 'blank';
  }
  if (first === COLON) {
    const eol = lineEnd(buf, start, limit);
    if (eol === -1 || eol + 1 - start > maxBytes) return 'other';
    span.end = eol + 1;
    return 'comment';
  }
  // 0: nothing yet; 1: after event; 2: after id; 3: after retry; 4: in data.
  let state = 0;
  let at = start;
  span.idStart = span.idEnd = start;
  for (;;) {
    if (at >= limit) return 'other';
    if (buf[at] === LF) break;
    let value: number;
    if (state === 0 && (value = after(buf, at, limit, EVENT)) >= 0) {
      state = 1;
    } else if (state <= 1 && (value = after(buf, at, limit, ID)) >= 0) {
      state = 2;
    } else if (state <= 2 && (value = after(buf, at, limit, RETRY)) >= 0) {
      state = 3;
    } else if ((value = after(buf, at, limit, DATA)) >= 0) {
      state = 4;
    } else {
      return 'other';
    }
    const eol = lineEnd(buf, value, limit);
    if (eol === -1) return 'other';
    if (state === 1) {
      span.idStart = span.idEnd = eol + 1;
    } else if (state === 2) {
      if (!noNul(buf, value, eol)) return 'other';
      span.idStart = at;
      span.idEnd = eol + 1;
    } else if (state === 3 && !canonicalDigits(buf, value, eol)) {
      return 'other';
    }
    at = eol + 1;
  }
  span.end = at + 1;
  return span.end - start > maxBytes ? 'other' : 'block';
}

/** Where the value starts if buf[at...] begins with `name` (colon and space included), else -1. */
function after(buf: Buffer, at: number, limit: number, name: Uint8Array): number {
  const n = name.length;
  if (at + n > limit) return -1;
  for (let i = 0; i < n; i++) if (buf[at + i] !== name[i]) return -1;
  return at + n;
}

/** The LF that ends the line at `from`, below `limit`; -1 when there is none. Short lines are common: a loop first. */
function lineEnd(buf: Buffer, from: number, limit: number): number {
  const near = Math.min(limit, from + 32);
  for (let i = from; i < near; i++) if (buf[i] === LF) return i;
  if (near === limit) return -1;
  const eol = buf.indexOf(LF, near);
  return eol === -1 || eol >= limit ? -1 : eol;
}

function noNul(buf: Buffer, start: number, end: number): boolean {
  for (let i = start; i < end; i++) if (buf[i] === NUL) return false;
  return true;
}

/** What serializer.ts writes for a retry that parser.ts reads: digits, no leading zero (but "0"). */
function canonicalDigits(buf: Buffer, start: number, end: number): boolean {
  const n = end - start;
  if (n === 0 || n > RETRY_DIGITS || (n > 1 && buf[start] === ZERO)) return false;
  for (let i = start; i < end; i++) {
    const b = buf[i]!;
    if (b < ZERO || b > NINE) return false;
  }
  return true;
}
