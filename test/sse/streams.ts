/**
 * SSE streams for the tests of src/sse/: how to read one with our parser and with the MCP SDK
 * client's (eventsource-parser), how to cut one into chunks, and random streams: valid ones
 * written with every liberty the spec allows (with the items they must parse to), ones written as
 * the SDK's servers write them (the rewriter copies those as bytes), and malformed ones.
 */
import fc from 'fast-check';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { SseParser, type SseItem, type SseParserOptions } from '../../src/sse/parser.js';
import { serializeComment, serializeEvent } from '../../src/sse/serializer.js';

export const enc = (s: string): Buffer => Buffer.from(s, 'utf8');

export function parse(chunks: readonly (string | Uint8Array)[], options?: SseParserOptions): SseItem[] {
  const items: SseItem[] = [];
  const parser = new SseParser((item) => items.push(item), options);
  for (const c of chunks) parser.push(typeof c === 'string' ? enc(c) : c);
  parser.end();
  return items;
}

export function ev(fields: { id?: string | undefined; event?: string | undefined; data?: string | undefined; retry?: number | undefined }, size: number): SseItem {
  return { kind: 'event', id: fields.id, event: fields.event, data: fields.data, retry: fields.retry, size };
}

export const withoutSize = (items: SseItem[]): SseItem[] => items.map((i) => (i.kind === 'event' ? { ...i, size: 0 } : i));

/** `buf` cut at the given points (taken modulo its length + 1). */
export function splitAt(buf: Uint8Array, cuts: readonly number[]): Uint8Array[] {
  const points = [...new Set(cuts.map((c) => c % (buf.length + 1)))].sort((a, b) => a - b);
  const pieces: Uint8Array[] = [];
  let from = 0;
  for (const p of points) {
    pieces.push(buf.subarray(from, p));
    from = p;
  }
  pieces.push(buf.subarray(from));
  return pieces;
}

/** What serializer.ts writes for the events and comments among `items`. */
export function serializeItems(items: readonly SseItem[]): Buffer {
  return Buffer.concat(
    items.map((i) => (i.kind === 'event' ? serializeEvent(i) : i.kind === 'comment' ? serializeComment(i.text) : Buffer.alloc(0))),
  );
}

/**
 * What the MCP SDK client's parser (eventsource-parser, fed by a TextDecoderStream) dispatches,
 * the whole stream fed at once or in `chunks` of text.
 */
export function oracle(bytes: Uint8Array): EventSourceMessage[] {
  const events: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (e) => events.push({ id: e.id, event: e.event, data: e.data }) });
  const text = new TextDecoder().decode(bytes);
  // eventsource-parser holds a CR that ends its input until it sees the next byte, and so never
  // dispatches a block whose blank line is the stream's final CR; an LF there changes nothing else.
  parser.feed(text.endsWith('\r') ? `${text}\n` : text);
  return events;
}

/**
 * Our parser's events as eventsource-parser reports them: only blocks with data are dispatched
 * there (§9.2.6 "if the data buffer is an empty string ... return"), and an empty event name is
 * no name.
 */
export function asDispatched(items: readonly SseItem[]): EventSourceMessage[] {
  return items.flatMap((i) => (i.kind === 'event' && i.data !== undefined ? [{ id: i.id, event: i.event || undefined, data: i.data }] : []));
}

export type Eol = '\n' | '\r' | '\r\n';
interface Line {
  text: string;
  eol: Eol;
  comment?: string;
}
export interface Stream {
  bytes: Buffer;
  /** What the parser must report, sizes left at 0. */
  expected: SseItem[];
}

const eolArb = fc.constantFrom<Eol>('\n', '\r', '\r\n');
const charArb = fc.oneof(
  fc.constantFrom(' ', ':', '\0', '\t', '\uFEFF', 'é', '€', '😀', '\u2028', 'a'),
  fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
);
const lineCharArb = charArb.filter((c) => c !== '\r' && c !== '\n');
const textArb = fc.string({ unit: lineCharArb, maxLength: 10 });
const idArb = fc.string({ unit: lineCharArb.filter((c) => c !== '\0'), maxLength: 10 });
const retryArb = fc.oneof(fc.nat(10_000), fc.maxSafeNat());
const fmtArb = fc.record({ spaced: fc.boolean(), bare: fc.boolean(), eol: eolArb });
/** Lines that must change nothing: unknown fields, and invalid `id` and `retry` values. */
const noiseArb = fc.constantFrom(
  'foo: bar',
  'foo',
  'Data: x',
  ' data: y',
  'data : z',
  'ids: 1',
  'eventx: q',
  'retry: 1x',
  'retry:',
  'retry: -5',
  'retry: 1.5',
  'id: a\0b',
  'id:\0',
);

function fieldLine(name: string, value: string, fmt: { spaced: boolean; bare: boolean; eol: Eol }): Line {
  if (value === '' && fmt.bare) return { text: name, eol: fmt.eol };
  const sep = fmt.spaced || value.startsWith(' ') ? ': ' : ':';
  return { text: `${name}${sep}${value}`, eol: fmt.eol };
}

const eventBlockArb = fc
  .record({
    id: fc.option(idArb, { nil: undefined }),
    event: fc.option(textArb, { nil: undefined }),
    retry: fc.option(retryArb, { nil: undefined }),
    data: fc.option(fc.array(textArb, { minLength: 1, maxLength: 3 }), { nil: undefined }),
    fmts: fc.array(fmtArb, { minLength: 6, maxLength: 6 }),
    extras: fc.array(
      fc.record({
        line: fc.oneof(
          fc.record({ comment: textArb, eol: eolArb }).map(({ comment, eol }) => ({ text: `:${comment}`, eol, comment })),
          fc.record({ text: noiseArb, eol: eolArb }),
        ),
        at: fc.nat(),
      }),
      { maxLength: 3 },
    ),
    end: eolArb,
  })
  .filter((b) => b.id !== undefined || b.event !== undefined || b.retry !== undefined || b.data !== undefined)
  .map((b): { lines: Line[]; expected: SseItem[] } => {
    const fmts = b.fmts;
    const lines: Line[] = [];
    if (b.event !== undefined) lines.push(fieldLine('event', b.event, fmts[0]!));
    if (b.id !== undefined) lines.push(fieldLine('id', b.id, fmts[1]!));
    if (b.retry !== undefined) lines.push(fieldLine('retry', String(b.retry), fmts[2]!));
    b.data?.forEach((d, i) => lines.push(fieldLine('data', d, fmts[3 + i]!)));
    for (const { line, at } of b.extras) lines.splice(at % (lines.length + 1), 0, line);
    lines.push({ text: '', eol: b.end });
    const comments = lines.flatMap((l): SseItem[] => (l.comment === undefined ? [] : [{ kind: 'comment', text: l.comment }]));
    const data = b.data?.join('\n');
    return { lines, expected: [...comments, ev({ id: b.id, event: b.event, retry: b.retry, data }, 0)] };
  });

const segmentArb = fc.oneof(
  { weight: 4, arbitrary: eventBlockArb },
  fc.record({ text: textArb, eol: eolArb }).map(({ text, eol }) => ({
    lines: [{ text: `:${text}`, eol }],
    expected: [{ kind: 'comment', text }] as SseItem[],
  })),
  eolArb.map((eol) => ({ lines: [{ text: '', eol }], expected: [] as SseItem[] })),
);

/** A valid stream with every liberty of the spec: CR, LF and CRLF, a BOM, comments, noise lines, bare field names. */
export const streamArb: fc.Arbitrary<Stream> = fc
  .record({ bom: fc.boolean(), segments: fc.array(segmentArb, { maxLength: 6 }) })
  .map(({ bom, segments }) => {
    let text = bom ? '\uFEFF' : '';
    let previous: Eol | undefined;
    for (const line of segments.flatMap((s) => s.lines)) {
      // After a CR, an LF would complete a CRLF: a blank line there must not end in LF alone.
      const eol = previous === '\r' && line.text === '' && line.eol === '\n' ? '\r\n' : line.eol;
      text += line.text + eol;
      previous = eol;
    }
    return { bytes: enc(text), expected: segments.flatMap((s) => s.expected) };
  });

/** JSON-RPC messages, as the data of an event: responses (which a POST stream looks for) and others. */
const jsonRpcArb = fc.oneof(
  fc.oneof(fc.integer({ min: -2, max: 9 }), fc.string({ maxLength: 3 })).map((id) => JSON.stringify({ jsonrpc: '2.0', id, result: {} })),
  fc.nat(9).map((id) => JSON.stringify({ jsonrpc: '2.0', id, error: { code: -32000, message: 'x' } })),
  fc.constant(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progress: 1 } })),
  fc.nat(9).map((id) => JSON.stringify([{ jsonrpc: '2.0', id, result: {} }])),
);

/**
 * A valid stream as the MCP SDK's servers write it (serializer.ts's form: the rewriter copies its
 * blocks as bytes), with now and then a block in another form between them.
 */
export const canonicalStreamArb: fc.Arbitrary<Stream> = fc
  .array(
    fc.oneof(
      {
        weight: 5,
        arbitrary: fc
          .record({
            id: fc.option(idArb, { nil: undefined }),
            event: fc.option(textArb, { nil: undefined }),
            retry: fc.option(retryArb, { nil: undefined }),
            data: fc.option(fc.oneof(fc.array(textArb, { minLength: 1, maxLength: 3 }).map((d) => d.join('\n')), jsonRpcArb), { nil: undefined }),
          })
          .filter((e) => e.id !== undefined || e.event !== undefined || e.retry !== undefined || e.data !== undefined)
          .map((e) => ({ bytes: serializeEvent(e), expected: [ev(e, 0)] })),
      },
      textArb.map((text) => ({ bytes: serializeComment(text), expected: [{ kind: 'comment', text }] as SseItem[] })),
      // Not ending in CR: an LF after it would join it into one line ending.
      { weight: 1, arbitrary: streamArb.filter((s) => !s.bytes.subarray(0, 3).equals(BOM) && s.bytes[s.bytes.length - 1] !== 0x0d) },
    ),
    { maxLength: 8 },
  )
  .map((parts) => ({ bytes: Buffer.concat(parts.map((p) => p.bytes)), expected: parts.flatMap((p) => p.expected) }));

const BOM = Buffer.from([0xef, 0xbb, 0xbf]);

/**
 * Bytes that need not be a valid stream: fragments of SSE (field names, colons, line endings of
 * every kind, a BOM anywhere) among arbitrary bytes, invalid UTF-8 and long lines.
 */
export const malformedArb: fc.Arbitrary<Buffer> = fc
  .array(
    fc.oneof(
      fc.constantFrom('data:', 'data: ', 'id:', 'id: ', 'event:', 'retry:', 'retry: 12', ':', ' ', '\0', 'x', '{"jsonrpc":"2.0","id":1,"result":{}}').map(enc),
      fc.constantFrom('\n', '\r', '\r\n', '\n\n', '\r\r', '\r\n\r\n').map(enc),
      fc.constantFrom(BOM, Buffer.from([0xef, 0xbb]), Buffer.from([0xff]), Buffer.from([0xc3]), Buffer.from([0xe2, 0x82]), Buffer.from([0xf0, 0x9f, 0x98]), Buffer.from([0xed, 0xa0, 0x80])),
      fc.uint8Array({ maxLength: 16 }).map((b) => Buffer.from(b)),
      fc.nat(300).map((n) => Buffer.alloc(n, 0x61)),
    ),
    { maxLength: 24 },
  )
  .map((parts) => Buffer.concat(parts));
