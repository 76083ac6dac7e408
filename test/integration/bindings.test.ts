/**
 * R3 with cached bindings, on two gateway processes sharing one real Redis: a session ended or
 * lost through one instance is ended on the other at once once the store's note arrives, and
 * within one health tick when a note is lost; an owner declared gone through one instance loses
 * its sessions on the other the same way. Each instance routes a known session from its cache.
 */
import { Redis } from 'ioredis';
import t, { type Test } from 'tap';
import { sessionKey } from '../../src/store/redis/keys.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { post, rawSession, SESSION_NOT_FOUND, toolCallBody } from '../helpers/http.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { spawnReplicas, type ReplicaProcess } from '../helpers/replicas.js';
import { bound, PROBE_TIMEOUT_MS, waitFor } from '../helpers/wait.js';

/** Long enough that nothing in a test is explained by a tick: only a note can. */
const NO_TICK_MS = 600_000;
/** The tick of the instance whose note is lost. */
const SHORT_TICK_MS = 1_500;

// Four tests, each starting Redis, a replica and two gateway processes: on a loaded machine that
// alone can take longer than the default file timeout.
t.setTimeout(600_000);

async function metric(gw: GatewayProcess, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}} `));
  return Number(line?.split(' ')[1] ?? 0);
}
const cache = (gw: GatewayProcess, result: string) => metric(gw, 'mcp_gateway_binding_cache_total', `result="${result}"`);

async function call(gw: GatewayProcess, sessionId: string): Promise<{ status: number; body: string }> {
  const response = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId });
  return { status: response.status, body: await response.text() };
}

/** Calls until one is answered from `gw`'s cache; every answer is the replica's. */
async function cached(t: Test, gw: GatewayProcess, sessionId: string): Promise<void> {
  const hits = await cache(gw, 'hit');
  await waitFor('a call answered from the cache', bound(0), async () => {
    t.equal((await call(gw, sessionId)).status, 200, 'answered by the replica');
    return (await cache(gw, 'hit')) > hits;
  });
}

interface Fleet {
  redis: RedisServer;
  replica: ReplicaProcess;
  a: GatewayProcess;
  b: GatewayProcess;
}

/** Redis, one replica, instance A and instance B (its health tick `bTickMs`). */
async function twoInstances(t: Test, opts: { aTickMs?: number; bTickMs: number }): Promise<Fleet> {
  const [redis, [replica]] = await Promise.all([startRedisServer(t), spawnReplicas(t, 1)]);
  const settings = (intervalMs: number) => ({
    store: { type: 'redis', url: redis.url },
    replicas: [{ id: replica!.id, url: replica!.url }],
    health: { intervalMs, timeoutMs: PROBE_TIMEOUT_MS, unhealthyThreshold: 1 },
  });
  const [a, b] = await Promise.all([startGatewayProcess(t, settings(opts.aTickMs ?? NO_TICK_MS)), startGatewayProcess(t, settings(opts.bTickMs))]);
  return { redis, replica: replica!, a, b };
}

t.test('DELETE through A: B answers 404 once the note arrived, long before its tick', async (t) => {
  const { a, b } = await twoInstances(t, { bTickMs: NO_TICK_MS });
  const sessionId = await rawSession(a.url);
  await cached(t, b, sessionId);
  const invalidated = await cache(b, 'invalidated');

  const ended = await fetch(a.url, { method: 'DELETE', headers: { 'mcp-session-id': sessionId } });
  t.equal(ended.status, 200, 'A ended the session');
  await ended.text();
  await waitFor("B received the store's note", bound(0), async () => (await cache(b, 'invalidated')) > invalidated);
  t.same(await call(b, sessionId), { status: 404, body: SESSION_NOT_FOUND }, 'B: 404, not routed from its cache');
  t.same(await call(a, sessionId), { status: 404, body: SESSION_NOT_FOUND }, 'A too');
});

t.test('a session ended without a note (lost): B answers 404 within its health tick', async (t) => {
  const { redis, a, b } = await twoInstances(t, { bTickMs: SHORT_TICK_MS });
  const sessionId = await rawSession(a.url);
  await cached(t, b, sessionId);
  // What endSession does, minus the note: as if B's notes connection had missed it.
  const raw = new Redis(redis.url);
  t.teardown(() => raw.quit());
  t.equal(await raw.hset(sessionKey('mcpgw', sessionId), 'state', 'terminated'), 0, 'the record says terminated');

  await waitFor("B stops routing within a tick of the store's change", bound(SHORT_TICK_MS), async () => (await call(b, sessionId)).status === 404);
  t.ok((await cache(b, 'invalidated')) >= 1, 'B found out by confirming its binding');
  t.same(await call(b, sessionId), { status: 404, body: SESSION_NOT_FOUND }, 'and keeps answering 404');
});

t.test('owner declared gone through A: B loses its sessions once the note arrived, never forwarding', async (t) => {
  const { replica, a, b } = await twoInstances(t, { aTickMs: SHORT_TICK_MS, bTickMs: NO_TICK_MS });
  const first = await rawSession(a.url);
  const second = await rawSession(a.url);
  await cached(t, b, first);
  await cached(t, b, second);
  const invalidated = await cache(b, 'invalidated');

  // A's probe finds nothing listening: the replica is gone, its epoch retired (R4).
  await replica.kill('SIGKILL');
  await waitFor("B received the store's note", bound(SHORT_TICK_MS), async () => (await cache(b, 'invalidated')) >= invalidated + 2);
  for (const sessionId of [first, second]) {
    t.same(await call(b, sessionId), { status: 404, body: SESSION_NOT_FOUND }, 'B: 404');
  }
  const lost = () => b.logs.filter((l) => l['msg'] === 'session lost');
  await waitFor("B's log lines", bound(0), () => lost().length >= 2);
  t.same(lost().map((l) => l['why']), ['owner gone', 'owner gone'], "B knew from the store's epoch, without trying the replica");
  t.notOk(b.logs.some((l) => l['msg'] === 'replica health changed'), 'B never saw it refuse');
});

t.test('the store restarted empty: B drops its cache at once and routes nothing by guess', async (t) => {
  const { redis, a, b } = await twoInstances(t, { bTickMs: NO_TICK_MS });
  const sessionId = await rawSession(a.url);
  await cached(t, b, sessionId);
  await redis.restart({ keepData: false });
  await waitFor('B serves again', bound(0), async () => (await fetch(`${b.adminUrl}/readyz`)).status === 200);
  t.ok((await cache(b, 'dropped')) >= 1, 'B dropped its cached binding');
  t.same(await call(b, sessionId), { status: 404, body: SESSION_NOT_FOUND }, 'B: 404, the store no longer holds it');
});
