/**
 * §7, open streams through a store outage, on real processes: a GET stream keeps delivering while
 * Redis is stopped or paused (CLIENT PAUSE) past resumption.recordRetryMs; once Redis answers, a
 * cursor issued during the outage continues exactly on another instance; a gateway killed during
 * the outage turns only its unrecorded cursors into unknown_stream; with the journal, a plain GET
 * that the owner opened but the store cannot record gets 503 and the owner's stream is closed; a
 * resumption that comes, through another instance, before the holder's late records are written
 * waits for them and continues.
 */
import t, { type Test } from 'tap';
import { metricValue, startGateway, type RunningGateway } from '../helpers/gateway.js';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { post, rawSession, toolCallBody } from '../helpers/http.js';
import { rawStreams, type RawEvent, type RawStream } from '../helpers/raw-sse.js';
import { noteChannelPrefix } from '../../src/store/redis/keys.js';
import { startBalancer } from '../helpers/balancer.js';
import { command } from '../helpers/redis-process.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { spawnReplicas, type ReplicaProcess } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';

const STORE_TIMEOUT_MS = 200;
/** Shorter than the pauses below: under the old rule the stream would have ended after it. */
const RECORD_RETRY_MS = 300;
/** Bounds waits for the store's return and the flusher (its pauses are 200 ms at most). */
const DEADLINE_MS = bound(10_000);
const CURSOR = /^1\.[A-Za-z0-9_-]{16}\.[0-9a-z]+\.[A-Za-z0-9_-]{11}\.[A-Za-z0-9_-]{22}$/;

interface Outage {
  readonly name: string;
  begin(redis: RedisServer): Promise<void>;
  end(redis: RedisServer): Promise<void>;
}

const stopped: Outage = {
  name: 'Redis stopped',
  begin: (redis) => redis.down(),
  end: (redis) => redis.up(),
};

/** Every script (each store operation is one) waits until UNPAUSE; the pause outlasts any step. */
const paused: Outage = {
  name: 'Redis paused (CLIENT PAUSE)',
  begin: (redis) => ok(command(redis.port, ['CLIENT', 'PAUSE', '600000', 'WRITE'])),
  end: (redis) => ok(command(redis.port, ['CLIENT', 'UNPAUSE'])),
};

async function ok(reply: Promise<unknown>): Promise<void> {
  const value = await reply;
  if (value !== 'OK') throw new Error(`Redis answered ${String(value)}`);
}

/** Begins an outage that teardown ends if the test did not. */
async function begin(t: Test, outage: Outage, redis: RedisServer): Promise<() => Promise<void>> {
  await outage.begin(redis);
  let ended = false;
  const end = async () => {
    if (ended) return;
    ended = true;
    await outage.end(redis);
  };
  t.teardown(end);
  return end;
}

function settings(redis: RedisServer, replica: ReplicaProcess, resumption: Record<string, unknown> = {}) {
  return {
    // A cached binding routes a known session through a blocked store for a health tick (R3):
    // off here, so that 'a request that needs the store' does.
    store: { type: 'redis', url: redis.url, commandTimeoutMs: STORE_TIMEOUT_MS, bindingCache: { maxEntries: 0 } },
    replicas: [{ id: replica.id, url: replica.url }],
    // The owner's log replays (§5, §7): closing a stream here closes the replica's at once. The
    // journal's bytes in the backlog: test/streams/unrecorded.test.ts.
    resumption: { recordRetryMs: RECORD_RETRY_MS, journal: { enabled: false }, ...resumption },
  };
}

/** Events on the session's GET stream, sent by the replica itself (no store on that path). */
async function emit(replica: ReplicaProcess, sessionId: string, count: number, intervalMs = 50): Promise<void> {
  const response = await post(replica.url, toolCallBody('emit', { count, intervalMs }), { 'mcp-session-id': sessionId });
  t.equal(response.status, 200, 'the replica took the emit call');
  await response.text();
}

const seqOf = (event: RawEvent) => (JSON.parse(event.data) as { params: { data: { seq: number } } }).params.data.seq;

/** Closes a client's stream and waits until the replica has let go of it (it answers 409 until then). */
async function closeStream(stream: RawStream, replica: ReplicaProcess): Promise<void> {
  stream.close();
  await waitFor('the replica closed the GET stream', DEADLINE_MS, async () => {
    const health = (await (await fetch(new URL('/healthz', replica.url))).json()) as { getStreams: number };
    return health.getStreams === 0;
  });
}

async function storeRequestStatus(gw: { url: string }, sessionId: string): Promise<number> {
  const response = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId });
  await response.text();
  return response.status;
}

for (const outage of [stopped, paused]) {
  t.test(`${outage.name}: the GET stream keeps delivering; a cursor from the outage continues exactly on another instance`, async (t: Test) => {
    const redis = await startRedisServer(t);
    const [replica] = await spawnReplicas(t, 1);
    const a: RunningGateway = await startGateway(t, settings(redis, replica!));
    const b: RunningGateway = await startGateway(t, settings(redis, replica!));
    const sessionId = await rawSession(a.url);
    const streams = rawStreams(t);
    const stream = await streams.open(a.url, sessionId);
    t.equal(stream.status, 200);

    await emit(replica!, sessionId, 2);
    await stream.events.until(2);

    const end = await begin(t, outage, redis);
    t.equal(await storeRequestStatus(a, sessionId), 503, 'a request that needs the store: 503');
    // Spread over more than store timeout + recordRetryMs: the old rule ended the stream there.
    await emit(replica!, sessionId, 5, 100);
    const events = await stream.events.until(7);
    t.same(events.slice(2).map(seqOf), [1, 2, 3, 4, 5], 'every event of the outage arrived, in order, while the store did not answer');
    t.ok(events.every((e) => CURSOR.test(e.id ?? '')), 'each with a cursor');
    t.equal(new Set(events.map((e) => e.id)).size, 7, 'all cursors distinct');
    t.equal(await storeRequestStatus(a, sessionId), 503, 'the store still did not answer when they had arrived');
    t.equal(await metricValue(a.registry, 'mcp_gateway_unrecorded_events'), 5, 'their records are held');

    await end();
    await t.resolves(
      waitFor('the held records were written', DEADLINE_MS, async () => (await metricValue(a.registry, 'mcp_gateway_unrecorded_events')) === 0),
      'the held records were written once the store answered',
    );
    t.ok((await metricValue(a.registry, 'mcp_gateway_record_batches_late_total')) >= 1, 'late writes counted');
    t.equal(await metricValue(a.registry, 'mcp_gateway_streams_stopped_recording_total'), 0, 'no stream stopped being recorded');

    // The other instance reconnects on its own schedule (a backoff of up to 200 ms between
    // attempts), not when this one did: until then it answers 503, as §7 asks.
    await t.resolves(
      waitFor('the other instance reached the store again', DEADLINE_MS, async () => (await storeRequestStatus(b, sessionId)) === 200),
      'the other instance is back by itself',
    );
    await closeStream(stream, replica!);
    const resumed = await streams.open(b.url, sessionId, events[4]!.id);
    t.equal(resumed.status, 200);
    t.equal(resumed.headers['mcp-resumption'], 'continued', 'continued by the other instance');
    const replayed = await resumed.events.until(2);
    t.same(replayed.map((e) => e.id), [events[5]!.id, events[6]!.id], 'exactly the events after the cursor, with their original cursors');
    t.same(replayed.map(seqOf), [4, 5]);
    await emit(replica!, sessionId, 1);
    const after = await resumed.events.until(3);
    t.same(seqOf(after[2]!), 1, 'then live events');
    t.notOk(events.some((e) => e.id === after[2]!.id), 'under a new cursor');
    t.equal(after.length, 3, 'nothing repeated');
  });
}

t.test('a gateway killed during the outage: only its unrecorded cursors become unknown_stream', async (t: Test) => {
  const redis = await startRedisServer(t);
  const [replica] = await spawnReplicas(t, 1);
  const a = await startGatewayProcess(t, settings(redis, replica!));
  // reject mode: answering unknown_stream opens no new stream, so the older cursor stays resumable.
  // Without the journal no lease tells that a is dead: b waits replayTimeoutMs for the record first.
  const b = await startGateway(t, settings(redis, replica!, { mode: 'reject', replayTimeoutMs: 1000 }));
  const sessionId = await rawSession(a.url);
  const streams = rawStreams(t);
  const stream = await streams.open(a.url, sessionId);
  await emit(replica!, sessionId, 2);
  await stream.events.until(2);

  const end = await begin(t, paused, redis);
  // The first event's record was attempted (it may land); once it arrived, the next one's was not.
  await emit(replica!, sessionId, 1);
  await stream.events.until(3);
  await emit(replica!, sessionId, 1);
  const events = await stream.events.until(4);
  t.ok(events.every((e) => CURSOR.test(e.id ?? '')), 'the events of the outage arrived with cursors');

  t.equal(await a.stop('SIGKILL'), null, 'killed before it could write them');
  await end();
  await closeStream(stream, replica!);

  const unrecorded = await streams.open(b.url, sessionId, events[3]!.id);
  t.equal(unrecorded.status, 410);
  t.equal(unrecorded.headers['mcp-resumption-reason'], 'unknown_stream', 'its unrecorded cursor: unknown_stream, never a gap');
  await unrecorded.text();
  t.equal(await metricValue(b.registry, 'mcp_gateway_resumption_record_waits_total', { outcome: 'not_recorded' }), 1, 'once its record was waited for in vain');

  const recorded = await streams.open(b.url, sessionId, events[1]!.id);
  t.equal(recorded.status, 200);
  t.equal(recorded.headers['mcp-resumption'], 'continued', 'a cursor recorded before the outage continues on another instance');
  const replayed = await recorded.events.until(2);
  t.same(
    replayed.map((e) => e.id),
    [events[2]!.id, events[3]!.id],
    'the events after it, each under the cursor it first carried (E3), exactly once',
  );
});

t.test('journal on, Redis paused: a plain GET the owner opened gets 503, and the owner\'s stream is closed', async (t: Test) => {
  const redis = await startRedisServer(t);
  const [replica] = await spawnReplicas(t, 1, { eventStore: false });
  const base = settings(redis, replica!, { journal: { enabled: true } });
  // The binding cached and confirmed for longer than the test: the GET reaches the owner without
  // the store, and what needs it is the new stream's incarnation (E4, E5).
  const gw = await startGateway(t, { ...base, store: { ...base.store, bindingCache: { maxEntries: 100 } }, health: { intervalMs: 600_000 } });
  const sessionId = await rawSession(gw.url);
  const streams = rawStreams(t);

  const end = await begin(t, paused, redis);
  const refused = await streams.open(gw.url, sessionId);
  t.equal(refused.status, 503, 'the incarnation cannot be recorded: 503');
  t.equal(refused.headers['mcp-gateway-error'], 'GW_STORE_UNAVAILABLE');
  t.ok(refused.headers['retry-after'], 'with Retry-After');
  await refused.text();
  t.equal(await metricValue(gw.registry, 'mcp_gateway_store_errors_total', { op: 'openIncarnation' }), 1, 'after the owner answered: recording its stream failed');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_store_errors_total'), 1, 'and nothing before it needed the store');
  await t.resolves(
    waitFor('the replica closed the GET stream', DEADLINE_MS, async () => {
      const health = (await (await fetch(new URL('/healthz', replica!.url))).json()) as { getStreams: number };
      return health.getStreams === 0;
    }),
    'the owner\'s stream was closed',
  );

  await end();
  const opened = await streams.open(gw.url, sessionId);
  t.equal(opened.status, 200, 'once the store answers, a plain GET opens: the owner holds no stream that would refuse it 409');
  await emit(replica!, sessionId, 1);
  t.equal((await opened.events.until(1)).length, 1, 'and gets the live events');
});

t.test('a resumption through another instance before the holder wrote its late records waits for them, then continues exactly', async (t: Test) => {
  const redis = await startRedisServer(t);
  const [replica] = await spawnReplicas(t, 1);
  // Instance a reaches Redis through a TCP relay the test can stall; b reaches it directly, so that
  // b reads the store while a cannot yet write it, as after a failover one instance is back first.
  const relay = await startBalancer(t, [redis.url]);
  const relayed = `redis://127.0.0.1:${new URL(relay.url).port}`;
  // The journal on, its lease and the wait long enough that a loaded machine does not end either.
  const resumption = { journal: { enabled: true, leaseMs: 60_000 }, replayTimeoutMs: 60_000 };
  const base = settings(redis, replica!, resumption);
  const a = await startGateway(t, { ...base, store: { ...base.store, url: relayed } });
  const b = await startGateway(t, base);
  const sessionId = await rawSession(a.url);
  const streams = rawStreams(t);
  const stream = await streams.open(a.url, sessionId);
  await emit(replica!, sessionId, 2);
  await stream.events.until(2);

  // a's connections cut, and its reconnections held unanswered.
  relay.pause();
  relay.cut();
  await emit(replica!, sessionId, 3);
  const events = await stream.events.until(5);
  t.equal(await metricValue(a.registry, 'mcp_gateway_unrecorded_events'), 3, 'the events of the outage left unrecorded, held by a');
  stream.close();

  const resumed = streams.open(b.url, sessionId, events[3]!.id);
  // b waits on the stream's note channel: it is subscribed to it while it waits.
  const channels = `${noteChannelPrefix('mcpgw', sessionId)}*`;
  await t.resolves(
    waitFor('b waits for the record', DEADLINE_MS, async () => ((await command(redis.port, ['PUBSUB', 'SHARDCHANNELS', channels])) as unknown[]).length > 0),
    'b waits for the record instead of answering',
  );
  t.equal(await metricValue(b.registry, 'mcp_gateway_resumptions_total'), 0, 'nothing answered yet');
  relay.resume();

  const continued = await resumed;
  t.equal(continued.status, 200);
  t.equal(continued.headers['mcp-resumption'], 'continued', 'continued, not unknown_stream');
  t.same((await continued.events.until(1)).map((e) => e.id), [events[4]!.id], 'the event after the cursor, under its first cursor');
  t.equal(await metricValue(b.registry, 'mcp_gateway_resumption_record_waits_total', { outcome: 'recorded' }), 1, 'the wait counted');
  await emit(replica!, sessionId, 1);
  const after = await continued.events.until(2);
  t.equal(seqOf(after[1]!), 1, 'then the live stream');
  t.equal(after.length, 2, 'nothing repeated');
});
