/**
 * streams/unrecorded.ts against a real redis-server, blocked with SIGSTOP: batches wait for at most
 * one store attempt, are held within their bounds while the store does not answer, and are written
 * in order, in a few writes, once it answers again; a stream past a bound goes on unrecorded.
 */
import { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import t, { type Test } from 'tap';
import { createLogger } from '../../src/logger.js';
import { createMetrics, type Metrics } from '../../src/metrics.js';
import { createRedisStore } from '../../src/store/redis/index.js';
import { incarnationKey } from '../../src/store/redis/keys.js';
import type { Store } from '../../src/store/types.js';
import { BATCH_COST_BYTES, EVENT_COST_BYTES } from '../../src/streams/record-backlog.js';
import type { RecordTarget } from '../../src/streams/record-target.js';
import { UnrecordedRecords } from '../../src/streams/unrecorded.js';
import { testConfig } from '../helpers/gateway.js';
import { metricValue } from '../helpers/gateway.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { bound, storeAnswers, waitFor } from '../helpers/wait.js';
import { JournalFrames } from '../../src/store/journal-frames.js';

const COMMAND_TIMEOUT_MS = 200;
const TTL_MS = 60_000;
/** Bounds waits for the flusher once Redis answers again: its pauses are 200 ms at most. */
const FLUSH_DEADLINE_MS = bound(1_000 + COMMAND_TIMEOUT_MS);

const server = await startRedisServer(t);

interface Harness {
  store: Store;
  records: UnrecordedRecords;
  metrics: Metrics;
  registry: Registry;
}

async function harness(t: Test, unrecorded: { streamBytes?: number; totalBytes?: number } = {}): Promise<Harness> {
  const store = createRedisStore({ url: server.url, keyPrefix: 'unrec', connectTimeoutMs: 500, commandTimeoutMs: COMMAND_TIMEOUT_MS });
  const registry = new Registry();
  const metrics = createMetrics(registry);
  const config = testConfig({ replicas: [{ id: 'r1', url: 'http://127.0.0.1:1/mcp' }], resumption: { unrecorded } });
  const records = new UnrecordedRecords({ config: () => config, store, metrics, logger: createLogger('silent') });
  t.teardown(async () => {
    server.resume();
    await records.settle(0);
    await store.close();
  });
  // Its first connection first: the tests below send their first command right away.
  await storeAnswers(store);
  return { store, records, metrics, registry };
}

let sessions = 0;
/** A session with a recorded GET incarnation. */
async function getStream(store: Store): Promise<{ sessionId: string; incarnation: string }> {
  const sessionId = `s${++sessions}`;
  const incarnation = `inc-${sessions}`;
  await store.bindSession({ sessionId, owner: 'r1', ownerEpoch: '' }, TTL_MS);
  await store.openIncarnation({ id: incarnation, sessionId, owner: 'r1', kind: 'get', supersede: true }, TTL_MS);
  return { sessionId, incarnation };
}

const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => `u${from + i}`);

async function recorded(store: Store, s: { sessionId: string; incarnation: string }) {
  const view = await store.readIncarnation(s.sessionId, s.incarnation, 0);
  return { head: view?.record.head, after: view?.after };
}

t.test('while the store answers, a batch is recorded before record() resolves', async (t) => {
  const h = await harness(t);
  const s = await getStream(h.store);
  const stream = h.records.stream({ ...s, attach: 1 });
  t.equal(await stream.record(1, ids(1, 3), [], 0), 'ok');
  t.same(await recorded(h.store, s), { head: 3, after: ids(1, 3) }, 'recorded at once (E5)');
  t.equal(await metricValue(h.registry, 'mcp_gateway_record_batches_late_total'), 0, 'nothing late');
});

t.test("a stream's first batch extends its keys to idleTtlMs and a quarter; the next ones within a quarter leave them", async (t) => {
  const h = await harness(t);
  const s = await getStream(h.store);
  const redis = new Redis(server.url);
  t.teardown(() => redis.quit());
  const key = incarnationKey('unrec', s.sessionId, s.incarnation);
  const idleTtlMs = testConfig({ replicas: [{ id: 'r1', url: 'http://127.0.0.1:1/mcp' }] }).sessions.idleTtlMs;
  const stream = h.records.stream({ ...s, attach: 1 });
  t.equal(await stream.record(1, ids(1, 1), [], 0), 'ok');
  const first = await redis.pttl(key);
  t.ok(first > idleTtlMs && first <= idleTtlMs * 1.25, `extended to ${first} ms`);
  await redis.pexpire(key, idleTtlMs * 2);
  // Without the change each batch sets it back to 1.25 × idleTtlMs.
  t.equal(await stream.record(2, ids(2, 1), [], 0), 'ok');
  t.ok((await redis.pttl(key)) > idleTtlMs * 1.25, 'the next batch left the TTL as it was');
  t.same(await recorded(h.store, s), { head: 2, after: ids(1, 2) });
});

t.test('store blocked: events leave after one attempt, the rest at once, and are recorded in order once it answers', async (t) => {
  const h = await harness(t);
  const a = await getStream(h.store);
  const b = await getStream(h.store);
  const streamA = h.records.stream({ ...a, attach: 1 });
  const streamB = h.records.stream({ ...b, attach: 1 });
  t.equal(await streamA.record(1, ids(1, 2), [], 0), 'ok');

  server.pause();
  // The first attempt times out (the command may still land once Redis runs again)...
  t.equal(await streamA.record(3, ids(3, 2), [], 0), 'ok', 'the batch may leave, unrecorded');
  // ...and from then on nothing waits for the store, on any stream.
  for (let seq = 5; seq < 105; seq += 5) t.equal(await streamA.record(seq, ids(seq, 5), [], 0), 'ok');
  t.equal(await streamB.record(1, ids(1, 4), [], 0), 'ok', 'another stream does not wait either');
  t.equal(await metricValue(h.registry, 'mcp_gateway_unrecorded_events'), 2 + 100 + 4, 'held events counted');
  const bytes = await metricValue(h.registry, 'mcp_gateway_unrecorded_bytes');
  t.equal(bytes, h.records.bytes, 'held bytes counted');
  t.ok(bytes >= 106 * EVENT_COST_BYTES + 22 * BATCH_COST_BYTES, 'at least the fixed cost of each event and batch');

  server.resume();
  await waitFor('the backlog is written', FLUSH_DEADLINE_MS, async () => (await metricValue(h.registry, 'mcp_gateway_unrecorded_events')) === 0);
  t.same(await recorded(h.store, a), { head: 104, after: ids(1, 104) }, 'every position, in order, exactly once');
  t.same(await recorded(h.store, b), { head: 4, after: ids(1, 4) });
  t.equal(await metricValue(h.registry, 'mcp_gateway_unrecorded_bytes'), 0, 'memory released');
  t.equal(h.records.bytes, 0);
  const writes = await metricValue(h.registry, 'mcp_gateway_record_batches_late_total');
  t.ok(writes >= 2 && writes <= 3, `the backlog went in a few writes (${writes}), not one per batch`);

  t.equal(await streamA.record(105, ids(105, 1), [], 0), 'ok');
  t.same((await recorded(h.store, a)).head, 105, 'recorded at once again');
});

t.test('pipelined: a batch recorded while the one before it is in flight is answered after it, and lands after it', async (t) => {
  const h = await harness(t);
  const s = await getStream(h.store);
  const stream = h.records.stream({ ...s, attach: 1 });
  const order: number[] = [];
  const first = stream.record(1, ids(1, 3), [], 0).then((r) => (order.push(1), r));
  const second = stream.record(4, ids(4, 2), [], 0).then((r) => (order.push(4), r));
  t.same(await Promise.all([first, second]), ['ok', 'ok']);
  t.same(order, [1, 4], 'answered in order');
  t.same(await recorded(h.store, s), { head: 5, after: ids(1, 5) }, 'both recorded, in order');
  t.equal(await metricValue(h.registry, 'mcp_gateway_record_batches_late_total'), 0, 'nothing late');
});

t.test('pipelined into a store that stops answering: both batches are held, in order, and written once it answers', async (t) => {
  const h = await harness(t);
  const s = await getStream(h.store);
  const stream = h.records.stream({ ...s, attach: 1 });
  t.equal(await stream.record(1, ids(1, 2), [], 0), 'ok');
  server.pause();
  // Written at once; none is answered (each may still land once Redis runs again)...
  const pending = [stream.record(3, ids(3, 2), [], 0), stream.record(5, ids(5, 3), [], 0), stream.record(8, ids(8, 1), [], 0)];
  t.same(await Promise.all(pending), ['ok', 'ok', 'ok'], 'the events may leave, unrecorded');
  // ...and the next ones are held without being sent: the sent ones must not be merged with them,
  // or the store would see a batch that only partly landed.
  t.equal(await stream.record(9, ids(9, 2), [], 0), 'ok');
  t.equal(await stream.record(11, ids(11, 1), [], 0), 'ok');
  t.equal(await metricValue(h.registry, 'mcp_gateway_unrecorded_events'), 9, 'every held event counted once');
  server.resume();
  await waitFor('the backlog is written', FLUSH_DEADLINE_MS, async () => (await metricValue(h.registry, 'mcp_gateway_unrecorded_events')) === 0);
  t.same(await recorded(h.store, s), { head: 11, after: ids(1, 11) }, 'every position, in order, exactly once');
  t.equal(await metricValue(h.registry, 'mcp_gateway_streams_stopped_recording_total'), 0, 'no batch refused');
  t.equal(h.records.bytes, 0, 'memory released');
});

t.test('pipelined behind a refused batch: refused too, nothing recorded after the refusal', async (t) => {
  const h = await harness(t);
  const s = await getStream(h.store);
  const stream = h.records.stream({ ...s, attach: 1 });
  t.equal(await stream.record(1, ids(1, 2), [], 0), 'ok');
  // Another attachment takes the stream over.
  await h.store.attachIncarnation(s.sessionId, s.incarnation, TTL_MS, 1);
  t.same(await Promise.all([stream.record(3, ids(3, 2), [], 0), stream.record(5, ids(5, 1), [], 0)]), ['stale', 'stale']);
  t.same((await recorded(h.store, s)).head, 2, 'nothing after the refusal');
});

t.test('a POST stream whose first batch fails keeps its cursors: its incarnation is created late', async (t) => {
  const h = await harness(t);
  const sessionId = `s${++sessions}`;
  await h.store.bindSession({ sessionId, owner: 'r1', ownerEpoch: '' }, TTL_MS);
  const target: RecordTarget = { sessionId, incarnation: 'post-1', attach: 1, create: { owner: 'r1', kind: 'post', pending: [7] } };
  const stream = h.records.stream(target);
  server.pause();
  t.equal(await stream.record(1, ids(1, 1), [], 0), 'ok');
  t.equal(await stream.record(2, ids(2, 1), [7], 0), 'ok');
  server.resume();
  await waitFor('the backlog is written', FLUSH_DEADLINE_MS, async () => (await metricValue(h.registry, 'mcp_gateway_unrecorded_events')) === 0);
  const view = await h.store.readIncarnation(sessionId, 'post-1', 0);
  t.match(view?.record, { kind: 'post', head: 2, pending: [] }, 'created, both positions, the response settled');
});

/** SSE blocks as the rewriter journals them, for positions from..from+n-1. */
const texts = (from: number, n: number) => Array.from({ length: n }, (_, i) => `event: message\ndata: {"seq":${from + i}}\n\n`);
const blocks = (from: number, n: number) => JournalFrames.of(texts(from, n));

t.test('journal: events held during an outage are journaled late, in order, each once, and their bytes count in the bounds', async (t) => {
  const h = await harness(t);
  const s = await getStream(h.store);
  const stream = h.records.stream({ ...s, attach: 1 });
  t.equal(await stream.record(1, ids(1, 2), [], 0, blocks(1, 2)), 'ok');
  server.pause();
  for (let seq = 3; seq < 53; seq += 5) t.equal(await stream.record(seq, ids(seq, 5), [], 0, blocks(seq, 5)), 'ok', 'the events leave');
  const payloadBytes = blocks(3, 50).payloadBytes;
  t.ok(h.records.bytes >= 50 * EVENT_COST_BYTES + 10 * BATCH_COST_BYTES + payloadBytes, `held bytes count the payloads (${h.records.bytes})`);
  server.resume();
  await waitFor('the backlog is written', FLUSH_DEADLINE_MS, async () => (await metricValue(h.registry, 'mcp_gateway_unrecorded_events')) === 0);
  const read = await h.store.readJournal(s.sessionId, s.incarnation, 0, 1000);
  t.match(read?.record, { head: 52, journaled: true });
  t.same(read?.events, texts(1, 52).map((payload, i) => ({ seq: i + 1, payload })), 'every event journaled at its position, once');
});

t.test('journal: held batches with and without payloads are written apart, so the store takes each', async (t) => {
  const h = await harness(t);
  const s = await getStream(h.store);
  const stream = h.records.stream({ ...s, attach: 1 });
  t.equal(await stream.record(1, ids(1, 1), [], 0, blocks(1, 1)), 'ok');
  server.pause();
  // The journal switched off and on again by reloads while the store did not answer.
  t.equal(await stream.record(2, ids(2, 2), [], 0, blocks(2, 2)), 'ok');
  t.equal(await stream.record(4, ids(4, 2), [], 0, blocks(4, 2)), 'ok');
  t.equal(await stream.record(6, ids(6, 3), [], 0), 'ok');
  t.equal(await stream.record(9, ids(9, 2), [], 0, blocks(9, 2)), 'ok');
  server.resume();
  await waitFor('the backlog is written', FLUSH_DEADLINE_MS, async () => (await metricValue(h.registry, 'mcp_gateway_unrecorded_events')) === 0);
  t.same(await recorded(h.store, s), { head: 10, after: ids(1, 10) }, 'every position, in order');
  t.equal(stream.stopped, false, 'no batch was refused');
  const read = await h.store.readJournal(s.sessionId, s.incarnation, 8, 10);
  t.match(read?.record, { head: 10, journaled: false });
  t.same(read?.events.map((e) => e.payload), texts(9, 2), 'journaled after the positions recorded without bytes');
});

t.test('past the stream bound, the stream goes on unrecorded: later batches are never written', async (t) => {
  const perBatch = BATCH_COST_BYTES + 10 * (EVENT_COST_BYTES + 3);
  const h = await harness(t, { streamBytes: 3 * perBatch + 10 });
  const s = await getStream(h.store);
  const other = await getStream(h.store);
  const stream = h.records.stream({ ...s, attach: 1 });
  const small = h.records.stream({ ...other, attach: 1 });
  t.equal(await stream.record(1, ids(1, 5), [], 0), 'ok');
  server.pause();
  for (let seq = 6; seq < 56; seq += 10) t.equal(await stream.record(seq, ids(seq, 10), [], 0), 'ok', 'the events leave all the same');
  t.equal(await small.record(1, ids(1, 1), [], 0), 'ok');
  t.equal(await metricValue(h.registry, 'mcp_gateway_streams_stopped_recording_total', { reason: 'stream_limit' }), 1, 'counted');
  t.equal(await metricValue(h.registry, 'mcp_gateway_unrecorded_events'), 1, "what it held was given up; the other stream's is kept");
  server.resume();
  await waitFor('the backlog is written', FLUSH_DEADLINE_MS, async () => (await metricValue(h.registry, 'mcp_gateway_unrecorded_events')) === 0);
  t.equal(await stream.record(56, ids(56, 1), [], 0), 'ok');
  const { head } = await recorded(h.store, s);
  // Its first late batch may have landed during the pause (the attempt was sent): never more.
  t.ok(head === 5 || head === 15, `the head stays where the records stopped (${head}): later cursors are unknown_stream`);
  t.same((await recorded(h.store, other)).head, 1, 'the other stream is recorded');
});

t.test('past the total bound, the stream that would cross it goes on unrecorded', async (t) => {
  const perBatch = BATCH_COST_BYTES + 10 * (EVENT_COST_BYTES + 3);
  const h = await harness(t, { totalBytes: 2 * perBatch + 10 });
  const a = h.records.stream({ ...(await getStream(h.store)), attach: 1 });
  const b = h.records.stream({ ...(await getStream(h.store)), attach: 1 });
  server.pause();
  t.equal(await a.record(1, ids(1, 10), [], 0), 'ok');
  t.equal(await a.record(11, ids(11, 10), [], 0), 'ok');
  t.equal(await b.record(1, ids(1, 10), [], 0), 'ok');
  t.equal(await metricValue(h.registry, 'mcp_gateway_streams_stopped_recording_total', { reason: 'total_limit' }), 1);
  t.equal(b.stopped, true, 'the stream that would have crossed it');
  t.equal(a.stopped, false, 'the others keep theirs');
  t.ok(h.records.bytes <= 2 * perBatch + 10, 'never more than the bound');
  server.resume();
});

t.test('settle: writes the backlog when the store answers, gives it up when it does not', async (t) => {
  const h = await harness(t);
  const s = await getStream(h.store);
  const stream = h.records.stream({ ...s, attach: 1 });
  server.pause();
  await stream.record(1, ids(1, 3), [], 0);
  server.resume();
  await h.records.settle(FLUSH_DEADLINE_MS);
  t.same((await recorded(h.store, s)).head, 3, 'written before settle resolved');

  const h2 = await harness(t);
  const s2 = await getStream(h2.store);
  const stream2 = h2.records.stream({ ...s2, attach: 1 });
  server.pause();
  await stream2.record(1, ids(1, 3), [], 0);
  await h2.records.settle(COMMAND_TIMEOUT_MS);
  t.equal(await metricValue(h2.registry, 'mcp_gateway_streams_stopped_recording_total', { reason: 'shutdown' }), 1, 'given up, counted');
  t.equal(await metricValue(h2.registry, 'mcp_gateway_unrecorded_events'), 0);
  t.equal(await stream2.record(4, ids(4, 1), [], 0), 'ok', 'later events still leave');
  t.equal(h2.records.bytes, 0, 'and are not held');
});
