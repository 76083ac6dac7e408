/**
 * Blocks copied as bytes (canonical.ts) leave exactly as the parser and serializer would have
 * written them: the same bytes for the client, the same records and journaled payloads, however the
 * stream is cut into chunks and whatever it mixes in that is not canonical.
 */
import t from 'tap';
import { CursorCodec } from '../../src/cursor/codec.js';
import { scanCanonical, type CanonicalSpan } from '../../src/sse/canonical.js';
import { eventTag } from '../../src/sse/event-tag.js';
import { SseParser } from '../../src/sse/parser.js';
import { SseRewriter, type RecordSink } from '../../src/sse/rewriter.js';
import { commentText, eventText, eventTextWithCursor, journaledWithCursor } from '../../src/sse/serializer.js';

const codec = new CursorCodec('a-test-secret-of-at-least-32-bytes!!');
const INCARNATION = 'AAAAAAAAAAAAAAAA';
const MAX = 200;

function scan(text: string, start = 0): { kind: string; span: CanonicalSpan } {
  const buf = Buffer.from(text);
  const span = { start: -1, idStart: -1, idEnd: -1, end: -1 };
  return { kind: scanCanonical(buf, start, buf.length, MAX, span), span };
}

t.test('scanCanonical: what is canonical, and where its id line lies', async (t) => {
  t.same(scan('id: 1\ndata: x\n\nid: 2'), { kind: 'block', span: { start: 0, idStart: 0, idEnd: 6, end: 15 } });
  t.same(scan('event: m\nid: 1\nretry: 10\ndata: a\ndata: \n\n'), { kind: 'block', span: { start: 0, idStart: 9, idEnd: 15, end: 41 } });
  t.same(scan('event: m\ndata: a\n\n').span, { start: 0, idStart: 9, idEnd: 9, end: 18 }, 'no id: where serializer.ts would write it');
  t.same(scan('data: a\n\n').span, { start: 0, idStart: 0, idEnd: 0, end: 9 });
  t.same(scan(': ping\nid: 1\n'), { kind: 'comment', span: { start: 0, idStart: -1, idEnd: -1, end: 7 } });
  t.equal(scan('\ndata: a\n\n').kind, 'blank');
  t.equal(scan('data: a\n\n', 9).kind, 'other', 'nothing to read');
  for (const other of [
    'data:a\n\n',
    'data\n\n',
    'data: a\ndata: b\nid: 1\n\n',
    'id: 1\nevent: m\ndata: a\n\n',
    'id: 1\nid: 2\ndata: a\n\n',
    'event: a\nevent: b\n\n',
    'retry: 010\ndata: a\n\n',
    'retry: 1x\ndata: a\n\n',
    'retry: \ndata: a\n\n',
    `retry: ${'9'.repeat(16)}\ndata: a\n\n`,
    'id: a\0b\ndata: a\n\n',
    'data: a\n: inside\n\n',
    'data: a\nfoo: bar\n\n',
    'data: a\n',
    'data: a\n\r\n',
    `data: ${'x'.repeat(MAX)}\n\n`,
    `:${'x'.repeat(MAX)}\n`,
  ]) {
    t.equal(scan(other).kind, 'other', JSON.stringify(other));
  }
  t.equal(scan(`data: ${'x'.repeat(MAX - 9)}\n\n`).kind, 'block', 'a block of exactly the limit');
});

/** What the rewriter wrote before blocks were copied: every block parsed and written again. */
function reference(bytes: Buffer, journal: boolean): { out: string; ids: (string | null)[]; payloads: string[]; events: number } {
  const issuer = codec.issuer('s1', INCARNATION);
  const result = { out: '', ids: [] as (string | null)[], payloads: [] as string[], events: 0 };
  let stopped = false;
  const parser = new SseParser(
    (item) => {
      if (stopped) return;
      if (item.kind === 'comment') result.out += commentText(item.text);
      else if (item.kind === 'error') stopped = true;
      else if (item.kind === 'event') {
        result.events++;
        if (!journal && !item.id) {
          result.out += eventText(item);
          return;
        }
        // Recorded as its tag: the id and the digest of the block as the serializer writes it.
        result.ids.push(item.id ? eventTag(item.id, eventText(item)) : null);
        const cursor = issuer.encode([result.ids.length])[0]!;
        if (!journal) {
          result.out += eventTextWithCursor(item, cursor);
          return;
        }
        const payload = eventText({ ...item, id: undefined });
        result.payloads.push(payload);
        result.out += journaledWithCursor(payload, cursor);
      }
    },
    { maxEventBytes: MAX },
  );
  parser.push(bytes);
  return result;
}

async function rewritten(chunks: readonly Buffer[], journal: boolean): Promise<{ out: string; ids: (string | null)[]; payloads: string[]; events: number }> {
  const result = { out: '', ids: [] as (string | null)[], payloads: [] as string[], events: 0 };
  const sink: RecordSink = {
    record: async (_fromSeq, upstreamIds, _responded, payloads) => {
      result.ids.push(...upstreamIds);
      result.payloads.push(...(payloads?.texts() ?? []));
      return 'ok';
    },
  };
  const r = new SseRewriter({
    cursors: { codec, sessionId: 's1', incarnation: INCARNATION, sink, journal },
    head: 0,
    maxEventBytes: MAX,
    trackResponses: false,
  });
  const out: Buffer[] = [];
  for (const chunk of chunks) {
    const batch = await r.push(chunk);
    out.push(batch.out);
    result.events += batch.events;
    if (batch.end) break;
  }
  result.out = Buffer.concat(out).toString();
  return result;
}

/** A small deterministic generator (mulberry32), so that a failure can be replayed. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

const PIECES: readonly (string | Buffer)[] = [
  'id: 1\ndata: {"a":1}\n\n',
  'event: message\nid: up-2\ndata: two\ndata: lines\n\n',
  'event: message\ndata: no id\n\n',
  'id: \nretry: 5\ndata: empty id\n\n',
  'data: x\n\n',
  'id: 7\nretry: 0\n\n',
  'event: e\n\n',
  ': keepalive\n',
  ':\n',
  '\n',
  'data: é ü 中文 😀\n\n',
  'id: ñ-9\ndata: ok\n\n',
  'data:no space\n\n',
  'data\n\n',
  'id: 3\r\ndata: crlf\r\n\r\n',
  'data: cr\r\r',
  'data: a\n: inside\ndata: b\n\n',
  'foo: bar\ndata: unknown field\n\n',
  'id: 1\nid: 2\ndata: twice\n\n',
  'retry: 007\ndata: r\n\n',
  'id: a\0b\ndata: nul\n\n',
  'data: a\ndata: b\nid: late\n\n',
  Buffer.from([0x64, 0x61, 0x74, 0x61, 0x3a, 0x20, 0xff, 0xfe, 0x0a, 0x0a]),
  `data: ${'x'.repeat(120)}\n\n`,
];

function stream(next: () => number, bom: boolean, oversized: boolean): Buffer {
  const parts: Buffer[] = bom ? [Buffer.from([0xef, 0xbb, 0xbf])] : [];
  const n = 1 + Math.floor(next() * 40);
  for (let i = 0; i < n; i++) {
    const piece = PIECES[Math.floor(next() * PIECES.length)]!;
    parts.push(typeof piece === 'string' ? Buffer.from(piece) : piece);
  }
  if (oversized) parts.splice(Math.floor(next() * parts.length), 0, Buffer.from(`id: 9\ndata: ${'y'.repeat(MAX)}\n\n`));
  return Buffer.concat(parts);
}

function cut(bytes: Buffer, next: () => number): Buffer[] {
  const chunks: Buffer[] = [];
  let at = 0;
  while (at < bytes.length) {
    const size = next() < 0.3 ? 1 + Math.floor(next() * 4) : 1 + Math.floor(next() * 300);
    chunks.push(bytes.subarray(at, at + size));
    at += size;
  }
  return chunks;
}

t.test('copied and parsed blocks leave the same bytes, records and payloads, however the stream is cut', async (t) => {
  let cases = 0;
  for (let seed = 1; seed <= 400; seed++) {
    const next = random(seed);
    const bytes = stream(next, next() < 0.1, next() < 0.1);
    const chunks = next() < 0.2 ? [bytes] : cut(bytes, next);
    for (const journal of [true, false]) {
      const expected = reference(bytes, journal);
      const got = await rewritten(chunks, journal);
      if (JSON.stringify(got) !== JSON.stringify(expected)) {
        t.same(got, expected, `seed ${seed}, journal ${journal}`);
        return;
      }
      cases++;
    }
  }
  t.equal(cases, 800, 'every stream agreed');
});
