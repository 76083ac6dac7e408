/**
 * §7: with the store down or blocked, whatever needs it gets 503 with Retry-After, fast; open
 * streams keep flowing; service comes back by itself; after a restart that lost the data, no
 * session is routed by guess (R3). A cached binding needs no store until its confirmation is one
 * health tick old (R3): a stopped store drops the cache at once, a blocked one within that tick.
 */
import { Redis } from 'ioredis';
import t, { type Test } from 'tap';
import { metricValue, startGateway } from '../helpers/gateway.js';
import { post, rawSession, SESSION_NOT_FOUND, toolCallBody, initializeBody } from '../helpers/http.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { SseReader } from '../helpers/sse-upstream.js';
import { bound, SLACK_MS, waitFor } from '../helpers/wait.js';

/** Bounds waits for a condition outside the test's control (a server coming back); a limit on failure. */
const RECOVERY_DEADLINE_MS = bound(10_000);
const STORE_TIMEOUT_MS = 200;
/** The tick after which a binding the blocked store could not confirm goes back to it. */
const HEALTH_INTERVAL_MS = 300;
/** The gateway's default store command timeout, for the test that does not set one. */
const DEFAULT_STORE_TIMEOUT_MS = 500;
/**
 * A request that needs the store waits at most for a connection attempt in flight and then for the
 * command, each bounded by the store timeout; more than that (with room for a loaded machine) is a hang.
 */
const answeredWithin = (storeTimeoutMs: number) => bound(2 * storeTimeoutMs);

/** Sessions the demo replica holds (its /healthz says). */
async function replicaSessions(mcpUrl: string): Promise<number> {
  const response = await fetch(new URL('/healthz', mcpUrl));
  return ((await response.json()) as { sessions: number }).sessions;
}

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const start = performance.now();
  const result = await fn();
  return [result, performance.now() - start];
}

/** Redis, one demo replica, a gateway with a 200 ms store timeout, and a session through it. */
async function withSession(t: Test) {
  const redis = await startRedisServer(t);
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, {
    store: { type: 'redis', url: redis.url, commandTimeoutMs: STORE_TIMEOUT_MS },
    replicas: [{ id: replica!.id, url: replica!.url }],
    health: { intervalMs: HEALTH_INTERVAL_MS },
  });
  return { redis, replica: replica!, gw, sessionId: await rawSession(gw.url) };
}

/**
 * The session's requests while the store does not answer: served from the cache until its binding
 * is a health tick past its last confirmation, then 503. Resolves with the first 503 and how long
 * it took; every answer before it was the replica's own.
 */
async function firstRefusal(t: Test, url: string, sessionId: string): Promise<[Response, number]> {
  for (;;) {
    const [response, ms] = await timed(() => post(url, toolCallBody('whoami'), { 'mcp-session-id': sessionId }));
    if (response.status === 503) return [response, ms];
    t.equal(response.status, 200, 'served from the cached binding meanwhile');
    await response.text();
  }
}

/** Store operations that failed for the routing of a session (a read of it, or of a batch). */
async function sessionReadErrors(gw: Awaited<ReturnType<typeof startGateway>>): Promise<number> {
  const count = (op: string) => metricValue(gw.registry, 'mcp_gateway_store_errors_total', { op });
  return (await count('touchSession')) + (await count('refreshSessions'));
}

t.test('Redis stopped: 503 with Retry-After, fast; restarted empty: back by itself, old sessions unknown', async (t) => {
  const redis = await startRedisServer(t);
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, {
    store: { type: 'redis', url: redis.url },
    replicas: [{ id: replica!.id, url: replica!.url }],
  });
  const sessionId = await rawSession(gw.url);
  const stream = await fetch(gw.url, { headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream' } });
  t.equal(stream.status, 200, 'a GET stream is open before the outage');
  const events = new SseReader(stream.body!);
  t.match(await events.next(), /^id: 1\..+\ndata: ?$/, "the stream's priming event first (J1)");

  await redis.stop();

  const [existing, existingMs] = await timed(() => post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId }));
  t.equal(existing.status, 503, 'a request of a session: 503');
  t.equal(existing.headers.get('retry-after'), '1', 'with Retry-After');
  t.ok(existingMs < answeredWithin(DEFAULT_STORE_TIMEOUT_MS), `answered in ${existingMs.toFixed(0)} ms, not a hang`);
  t.match(JSON.parse(await existing.text()), { error: { code: -32000 } });

  const sessionsBefore = await replicaSessions(replica!.url);
  const [fresh, freshMs] = await timed(() => post(gw.url, initializeBody()));
  t.equal(fresh.status, 503, 'a new session: 503 (it cannot be bound)');
  t.equal(fresh.headers.get('retry-after'), '1');
  t.ok(freshMs < answeredWithin(DEFAULT_STORE_TIMEOUT_MS), `answered in ${freshMs.toFixed(0)} ms, not a hang`);
  await fresh.text();
  await t.resolves(waitFor('the replica was told to drop the unrecorded session', RECOVERY_DEADLINE_MS, async () => (await replicaSessions(replica!.url)) === sessionsBefore), 'the replica was told to drop the unrecorded session');

  const ready = await fetch(`${gw.adminUrl}/readyz`);
  t.equal(ready.status, 503, '/readyz says not ready');
  t.match(await ready.json(), { ready: false, reasons: ['the store does not answer'] });
  t.ok((await metricValue(gw.registry, 'mcp_gateway_store_errors_total')) >= 2, 'store errors counted');

  // §7: the open stream keeps flowing; its event leaves now, with a cursor recorded later.
  const direct = await post(replica!.url, toolCallBody('emit', { count: 1, intervalMs: 1 }), { 'mcp-session-id': sessionId });
  t.equal(direct.status, 200);
  await direct.text();
  t.match(await events.next(), /id: 1\..+\n(.|\n)*notifications\/message/, 'the event arrived with its cursor while the store was down');
  await events.cancel();

  await redis.restart({ keepData: false });
  await t.resolves(waitFor('ready again without a restart', RECOVERY_DEADLINE_MS, async () => (await fetch(`${gw.adminUrl}/readyz`)).status === 200), 'ready again without a restart');
  const again = await rawSession(gw.url);
  t.ok(again, 'new sessions work again');
  const lost = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId });
  t.equal(lost.status, 404, 'the store lost the old session: 404, never routed by guess');
  t.equal(await lost.text(), SESSION_NOT_FOUND);
});

t.test('Redis restarted with its data: sessions carry on', async (t) => {
  const redis = await startRedisServer(t);
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, { store: { type: 'redis', url: redis.url }, replicas: [{ id: replica!.id, url: replica!.url }] });
  const sessionId = await rawSession(gw.url);
  await redis.restart({ keepData: true });
  await t.resolves(
    waitFor('the session answers again through the same gateway', RECOVERY_DEADLINE_MS, async () => (await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId })).status === 200),
    'the session answers again through the same gateway',
  );
});

t.test('Redis blocked (SIGSTOP): 503 within the command timeout, then recovery', async (t) => {
  const { redis, replica, gw, sessionId } = await withSession(t);
  const stream = await fetch(gw.url, { headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream' } });
  const events = new SseReader(stream.body!);
  t.match(await events.next(), /^id: 1\..+\ndata: ?$/, "the stream's priming event first (J1)");
  redis.pause();
  t.teardown(() => redis.resume());
  // An event emitted while the store is blocked leaves at once, recorded later (§7).
  const direct = await post(replica!.url, toolCallBody('emit', { count: 1, intervalMs: 1 }), { 'mcp-session-id': sessionId });
  await direct.text();
  t.match(await events.next(), /id: 1\..+\n(.|\n)*notifications\/message/, 'the event arrived with its cursor while the store was blocked');
  const [blocked, ms] = await firstRefusal(t, gw.url, sessionId);
  t.equal(blocked.status, 503);
  t.equal(blocked.headers.get('retry-after'), '1');
  t.ok(ms < answeredWithin(STORE_TIMEOUT_MS), `answered in ${ms.toFixed(0)} ms with a ${STORE_TIMEOUT_MS} ms store timeout, not a hang`);
  await blocked.text();
  t.ok((await sessionReadErrors(gw)) >= 1, 'counted for the read of the session');
  redis.resume();
  await events.cancel();
  await t.resolves(
    waitFor('service came back once Redis answered again', RECOVERY_DEADLINE_MS, async () => (await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId })).status === 200),
    'service came back once Redis answered again',
  );
});

t.test('Redis blocked between routing a POST and its SSE answer: the answer arrives with its cursor, recorded late', async (t) => {
  const { redis, replica, gw, sessionId } = await withSession(t);
  // Routed while the store answers; the replica answers 600 ms later, on an SSE stream.
  const call = await post(gw.url, toolCallBody('progress', { steps: 1, intervalMs: 600 }, 41), { 'mcp-session-id': sessionId });
  t.equal(call.status, 200);
  t.equal(call.headers.get('content-type'), 'text/event-stream');
  redis.pause();
  t.teardown(() => redis.resume());
  const body = await call.text();
  redis.resume();
  t.match(body, /^data: \{"result":\{"content":\[\{"type":"text","text":"done after 1 steps"\}\]\},"jsonrpc":"2.0","id":41\}$/m, "the tool's answer reached the client");
  t.match(body, /^id: 1\./m, 'with its cursor');
  t.ok((await metricValue(gw.registry, 'mcp_gateway_store_errors_total', { op: 'recordEvents' })) >= 1, 'the failed record is counted');
  await t.resolves(
    waitFor('the record was written late', RECOVERY_DEADLINE_MS, async () => (await metricValue(gw.registry, 'mcp_gateway_unrecorded_events')) === 0 && (await metricValue(gw.registry, 'mcp_gateway_record_batches_late_total')) >= 1),
    'the record was written once the store answered',
  );
});

t.test('Redis busy with a slow command past the store timeout: 503 fast, then service resumes', async (t) => {
  const { redis, replica, gw, sessionId } = await withSession(t);
  const other = new Redis(redis.url, { lazyConnect: true });
  await other.connect();
  t.teardown(() => other.disconnect());
  // One script that keeps the server busy, every other client waiting meanwhile, long enough that
  // the request below is sent while it runs even if this process stalls.
  const busy = other.eval(
    "local s = redis.call('TIME') while true do local n = redis.call('TIME') if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > tonumber(ARGV[1]) * 1000 then return 1 end end",
    0,
    String(SLACK_MS),
  );
  // The script runs once another connection's PING stops being answered.
  // Its commands time out while the script runs, by design: no ready check to time out on a
  // reconnection, and its errors are reported here rather than as unhandled.
  const probe = new Redis(redis.url, { commandTimeout: 50, maxRetriesPerRequest: 0, enableReadyCheck: false });
  probe.on('error', (err: Error) => t.comment(`the probe: ${err.message}`));
  t.teardown(() => probe.disconnect());
  await t.resolves(waitFor('Redis is busy with the script', RECOVERY_DEADLINE_MS, () => probe.ping().then(() => false, () => true)), 'Redis is busy with the script');
  const [blocked, ms] = await firstRefusal(t, gw.url, sessionId);
  t.equal(blocked.status, 503, 'a request that needs the store: 503');
  t.equal(blocked.headers.get('retry-after'), '1');
  t.ok(ms < answeredWithin(STORE_TIMEOUT_MS), `answered in ${ms.toFixed(0)} ms while the slow command ran (${STORE_TIMEOUT_MS} ms store timeout)`);
  await blocked.text();
  t.equal(await busy, 1, 'the slow command finished');
  await t.resolves(
    waitFor('the session answers again', RECOVERY_DEADLINE_MS, async () => (await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId })).status === 200),
    'the session answers again',
  );
});
