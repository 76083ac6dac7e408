/** The SSE rewriter: cursors for ids, records before release, batches per chunk, replay checks. */
import t from 'tap';
import { CursorCodec } from '../../src/cursor/codec.js';
import { tagId } from '../../src/sse/event-tag.js';
import { SseParser, type SseEvent } from '../../src/sse/parser.js';
import { joinBatches, SseRewriter, type RecordSink } from '../../src/sse/rewriter.js';
import { journaledWithCursor } from '../../src/sse/serializer.js';
import type { JsonRpcId, RecordResult } from '../../src/store/types.js';
import { checkProperties } from '../helpers/property.js';
import { rewriterProperties } from './rewriter.properties.js';

const codec = new CursorCodec('a-test-secret-of-at-least-32-bytes!!');
const INCARNATION = 'AAAAAAAAAAAAAAAA';

interface Batch {
  fromSeq: number;
  upstreamIds: readonly (string | null)[];
  responded: readonly JsonRpcId[];
}

function sink(result: () => Promise<RecordResult> = async () => 'ok'): RecordSink & { batches: Batch[] } {
  const batches: Batch[] = [];
  return {
    batches,
    record: (fromSeq, upstreamIds, responded) => {
      // The ids of the tags recorded (the digests have tests of their own, test/sse/event-tag.test.ts).
      batches.push({ fromSeq, upstreamIds: upstreamIds.map((tag) => tag && tagId(tag)), responded });
      return result();
    },
  };
}

function rewriter(s: RecordSink, extra: Partial<ConstructorParameters<typeof SseRewriter>[0]> = {}) {
  return new SseRewriter({
    cursors: { codec, sessionId: 's1', incarnation: INCARNATION, sink: s },
    head: 0,
    maxEventBytes: 4096,
    trackResponses: false,
    ...extra,
  });
}

function events(bytes: Buffer): SseEvent[] {
  const out: SseEvent[] = [];
  const parser = new SseParser((item) => {
    if (item.kind === 'event') out.push(item);
  });
  parser.push(bytes);
  return out;
}

function seqOf(cursor: string | undefined): number {
  const decoded = codec.decode(cursor ?? '', 's1');
  if (decoded.kind !== 'ok') throw new Error(`not a cursor: ${cursor}`);
  return decoded.fields.seq;
}

t.test('ids become cursors, recorded in one batch per chunk, the rest as it was', async (t) => {
  const s = sink();
  const r = rewriter(s);
  const result = await r.push(Buffer.from('event: message\nid: up-1\ndata: {"a":1}\n\n: keepalive\ndata: no id\n\nid: up-2\nretry: 500\ndata: x\ndata: y\n\n'));
  t.same(s.batches, [{ fromSeq: 1, upstreamIds: ['up-1', 'up-2'], responded: [] }], 'one batch for the chunk');
  const out = result.out.toString();
  t.notMatch(out, /up-1|up-2/, 'no upstream id reaches the client');
  t.match(out, /: keepalive\n/, 'comments pass');
  const parsed = events(result.out);
  t.equal(parsed.length, 3);
  t.same(parsed.map((e) => e.data), ['{"a":1}', 'no id', 'x\ny']);
  t.same(parsed.map((e) => e.event), ['message', undefined, undefined]);
  t.equal(parsed[1]!.id, undefined, 'an event without id stays without one');
  t.equal(parsed[2]!.retry, 500, 'retry passes');
  t.same([seqOf(parsed[0]!.id), seqOf(parsed[2]!.id)], [1, 2]);
  t.equal(r.head, 2);
  t.equal(result.events, 3);
});

t.test('nothing leaves before its batch is recorded', async (t) => {
  let release!: () => void;
  const s = sink(() => new Promise<RecordResult>((resolve) => (release = () => resolve('ok'))));
  const r = rewriter(s);
  let settled = false;
  const pending = r.push(Buffer.from('id: u1\ndata: a\n\n')).then((x) => {
    settled = true;
    return x;
  });
  await new Promise((resolve) => setImmediate(resolve));
  t.equal(settled, false, 'held while the store has not answered');
  release();
  t.match((await pending).out.toString(), /data: a/);
});

t.test('a refused or failed record ends the stream without sending that batch', async (t) => {
  for (const outcome of ['stale', 'missing'] as const) {
    const r = rewriter(sink(async () => outcome));
    const result = await r.push(Buffer.from('id: u1\ndata: a\n\n'));
    t.equal(result.out.length, 0, `${outcome}: nothing sent`);
    t.equal(result.end, outcome);
  }
  const failing = rewriter(sink(() => Promise.reject(new Error('store down'))));
  t.equal((await failing.push(Buffer.from('id: u1\ndata: a\n\n'))).end, 'store_failed');
});

t.test('an oversized event ends the stream after what came before it', async (t) => {
  const r = rewriter(sink(), { maxEventBytes: 1024 });
  const result = await r.push(Buffer.from(`id: u1\ndata: small\n\nid: u2\ndata: ${'x'.repeat(2000)}\n\n`));
  t.equal(result.end, 'event_too_large');
  t.same(events(result.out).map((e) => e.data), ['small']);
});

t.test('an incomplete last block is never sent', async (t) => {
  const r = rewriter(sink());
  const result = await r.push(Buffer.from('id: u1\ndata: whole\n\nid: u2\ndata: hal'));
  t.same(events(result.out).map((e) => e.data), ['whole']);
  t.same(r.end(), { out: Buffer.alloc(0), events: 0 });
});

t.test('POST streams: responses that pass are reported as answered', async (t) => {
  const s = sink();
  const r = rewriter(s, { trackResponses: true });
  await r.push(
    Buffer.from(
      'id: u1\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}\n\n' +
        'id: u2\ndata: {"jsonrpc":"2.0","id":7,"result":{}}\n\n' +
        'id: u3\ndata: {"jsonrpc":"2.0","id":"7","error":{"code":1,"message":"x"}}\n\n',
    ),
  );
  t.same(s.batches[0]!.responded, [7, '7']);
});

t.test('without cursors, ids are removed and nothing is recorded', async (t) => {
  const r = new SseRewriter({ cursors: undefined, head: 0, maxEventBytes: 4096, trackResponses: false });
  const result = await r.push(Buffer.from('id: up-1\ndata: a\n\n'));
  t.equal(result.out.toString(), 'data: a\n\n');
});

t.test('continuation: the replay must be exactly the recorded events, then live events go on', async (t) => {
  const s = sink();
  const r = rewriter(s, { head: 5, verify: { expected: ['u4', 'u5'], fromSeq: 3 } });
  t.equal(r.verified, false);
  const first = await r.push(Buffer.from('id: u4\ndata: four\n\n'));
  t.equal(r.verified, false, 'one of two replayed');
  const second = await r.push(Buffer.from('id: u5\ndata: five\n\nid: u6\ndata: six\n\n'));
  t.equal(r.verified, true);
  const sent = [...events(first.out), ...events(second.out)];
  t.same(sent.map((e) => [e.data, seqOf(e.id)]), [['four', 4], ['five', 5], ['six', 6]], 'replayed with their original cursors (E3), live from the head');
  t.same(s.batches, [{ fromSeq: 6, upstreamIds: ['u6'], responded: [] }], 'only the live event is recorded');
});

t.test('continuation: a skipped, reordered, foreign or missing replay is a gap', async (t) => {
  const cases: [string, string][] = [
    ['skipped', 'id: u5\ndata: five\n\n'],
    ['reordered', 'id: u5\ndata: five\n\nid: u4\ndata: four\n\n'],
    ['other event', 'id: zz\ndata: ?\n\n'],
    ['event without id', 'data: ?\n\n'],
  ];
  for (const [name, bytes] of cases) {
    const r = rewriter(sink(), { head: 5, verify: { expected: ['u4', 'u5'], fromSeq: 3 } });
    t.equal((await r.push(Buffer.from(bytes))).end, 'gap', name);
  }
  const short = rewriter(sink(), { head: 5, verify: { expected: ['u4', 'u5'], fromSeq: 3 } });
  await short.push(Buffer.from('id: u4\ndata: four\n\n'));
  t.equal(short.end().end, 'gap', 'the owner ended before replaying everything');
});

t.test('synthetic events are numbered and recorded without an upstream id', async (t) => {
  const s = sink();
  const r = rewriter(s);
  const result = await r.synthetic('{"jsonrpc":"2.0","method":"notifications/gateway/stream_reset"}');
  t.same(s.batches, [{ fromSeq: 1, upstreamIds: [null], responded: [] }]);
  t.equal(seqOf(events(result.out)[0]!.id), 1);
});

t.test('J1 journal: every event gets a cursor and its bytes without the id line; the replay is the same bytes', async (t) => {
  const payloads: string[][] = [];
  const ids: (readonly (string | null)[])[] = [];
  const journaling: RecordSink = {
    record: async (_fromSeq, upstreamIds, _responded, p) => {
      ids.push(upstreamIds.map((tag) => tag && tagId(tag)));
      payloads.push(p?.texts() ?? []);
      return 'ok';
    },
  };
  const r = new SseRewriter({
    cursors: { codec, sessionId: 's1', incarnation: INCARNATION, sink: journaling, journal: true },
    head: 0,
    maxEventBytes: 4096,
    trackResponses: false,
  });
  const out = await r.push(Buffer.from('data: no id\n\n: a comment\nevent: message\nid: u2\ndata: two\ndata: lines\n\nid:\nretry: 5\ndata: empty id\n\n'));
  t.same(ids, [[null, 'u2', null]], 'every event a position; the upstream id where there was one');
  t.same(payloads, [['data: no id\n\n', 'event: message\ndata: two\ndata: lines\n\n', 'retry: 5\ndata: empty id\n\n']], 'each block without its id line');
  const sent = events(out.out);
  t.same(sent.map((e) => seqOf(e.id)), [1, 2, 3], 'each with its cursor');
  t.match(out.out.toString(), /: a comment\n/, 'comments pass, unjournaled');
  const issuer = codec.issuer('s1', INCARNATION);
  const cursors = issuer.encode([1, 2, 3]);
  const replayed = payloads[0]!.map((p, i) => journaledWithCursor(p, cursors[i]!)).join('');
  t.equal(out.out.toString().replace(': a comment\n', ''), replayed, 'the journal re-encodes the same bytes (E3)');
});

t.test('read-ahead: prepared chunks are numbered on but count for nothing until committed; joined, they are one record', async (t) => {
  const s = sink();
  const r = rewriter(s, { trackResponses: true, awaiting: [7] });
  const first = r.prepare(Buffer.from('id: u1\ndata: one\n\n'));
  const second = r.prepare(Buffer.from('id: u2\ndata: {"jsonrpc":"2.0","id":7,"result":{}}\n\nid: u3\ndata: three\n\n'));
  t.same(s.batches, [], 'nothing recorded by preparing');
  t.equal(r.head, 0, 'the head is what was committed');
  t.equal(r.answered, false, 'a response prepared but not committed has not passed');
  const result = await r.commit(joinBatches([first, second]));
  t.same(s.batches, [{ fromSeq: 1, upstreamIds: ['u1', 'u2', 'u3'], responded: [7] }], 'one record for both');
  t.same(events(result.out).map((e) => seqOf(e.id)), [1, 2, 3], 'in order, numbered on');
  t.equal(r.head, 3);
  t.equal(r.answered, true);
});

t.test('read-ahead: after a refused record, nothing prepared after it is recorded or released', async (t) => {
  const s = sink(async () => 'stale');
  const r = rewriter(s);
  const first = r.prepare(Buffer.from('id: u1\ndata: one\n\n'));
  const second = r.prepare(Buffer.from('id: u2\ndata: two\n\n'));
  t.same(await r.commit(first), { out: Buffer.alloc(0), events: 0, end: 'stale' });
  t.same(await r.commit(second), { out: Buffer.alloc(0), events: 0, end: 'stale' });
  t.equal(s.batches.length, 1, 'the later batch was never sent to the store');
  t.equal(r.head, 0);
});

t.test('read-ahead: a replay checked in a prepared batch counts once that batch is committed', async (t) => {
  const r = rewriter(sink(), { head: 5, verify: { expected: ['u4', 'u5'], fromSeq: 3 } });
  const replay = r.prepare(Buffer.from('id: u4\ndata: four\n\nid: u5\ndata: five\n\n'));
  const broken = r.prepare(Buffer.from(`id: u6\ndata: ${'x'.repeat(5000)}\n\n`));
  t.equal(r.verified, false, 'not before it is committed');
  await r.commit(replay);
  t.equal(r.verified, true);
  t.equal((await r.commit(broken)).end, 'event_too_large', 'an oversized event read ahead ends the stream once its turn comes');
  t.equal(r.prepare(Buffer.from('id: u7\ndata: seven\n\n')).events, 0, 'nothing is prepared after it');
});

checkProperties(t, rewriterProperties);
