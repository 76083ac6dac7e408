/**
 * CONTRACT.md §8 J4 for a GET stream, on real processes: the owner SIGKILLed while its session's
 * GET stream is open, the client's stream ended by the gateway, and the client back at once with
 * its last cursor, through the instance that pumped the stream or the other one, on Redis and on
 * the memory store. The answer is `owner_gone` (410 in reject mode, the signal in signal mode),
 * never a continuation that carries nothing: each time, however the gateway learnt of the death,
 * and also when the probe of the instance that saw the stream end could tell nothing (a process
 * still dying) while its lease came due for renewal. The replica keeps no event log (the SDK's
 * default server), so nothing but the journal and the fleet can tell.
 */
import t, { type Test } from 'tap';
import { startBalancer } from '../helpers/balancer.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { post, rawSession, toolCallBody } from '../helpers/http.js';
import { rawStreams, type RawStream } from '../helpers/raw-sse.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplica, type ReplicaProcess } from '../helpers/replicas.js';
import { scrapeMetric } from '../helpers/scrape.js';
import { bound, PROBE_TIMEOUT_MS, waitFor } from '../helpers/wait.js';

/**
 * Kills per case. The bug this file exists for (a GET stream whose owner was killed under it,
 * continued with nothing instead of owner_gone: 6aeccd6) showed about once in four kills on a
 * loaded machine; six kills in each of the four cases, 24 in all, show it with a probability of
 * 1 - (3/4)^24, about 99.9 %.
 */
const ROUNDS = 6;
/** Probes often, so that a restarted replica takes sessions again soon; a kill is still first seen by the stream's end, mostly. */
const HEALTH_INTERVAL_MS = 200;
/** resumption.journal.leaseMs: the least, renewed every 333 ms, so that a renewal comes due while a probe waits. */
const LEASE_MS = 1000;
/** health.timeoutMs where a dying owner's port takes connections it never serves: the probe waits this long, then tells nothing. */
const FRONT_PROBE_TIMEOUT_MS = 1000;

// Four cases of six kills, each kill a replica restart: on a loaded machine more than tap's 120 s.
t.setTimeout(600_000);

const redis = await startRedisServer(t);

type Mode = 'reject' | 'signal';

async function fleet(t: Test, store: 'redis' | 'memory', mode: Mode, options: { front?: boolean } = {}) {
  const replica = await spawnReplica(t, { id: 'r1', eventStore: false });
  // A front on the replica's address: a death can be shown as a loaded machine shows it.
  const front = options.front ? await startBalancer(t, [replica.url], new URL(replica.url).pathname) : undefined;
  const settings = {
    store: store === 'redis' ? { type: 'redis', url: redis.url } : { type: 'memory' },
    replicas: [{ id: replica.id, url: front?.url ?? replica.url }],
    // With the front, only the end of the stream and the resumption probe: no tick in between.
    health: front ? { intervalMs: 600_000, timeoutMs: FRONT_PROBE_TIMEOUT_MS } : { intervalMs: HEALTH_INTERVAL_MS, timeoutMs: PROBE_TIMEOUT_MS },
    resumption: { mode, journal: { leaseMs: LEASE_MS } },
  };
  const count = store === 'redis' ? 2 : 1;
  const gateways = await Promise.all(Array.from({ length: count }, () => startGatewayProcess(t, settings)));
  return { replica, front, gateways };
}

/** A session whose GET stream, open through instance 0, carried three events: the stream and the last cursor. */
async function openGet(gateways: readonly GatewayProcess[], streams: ReturnType<typeof rawStreams>) {
  const sessionId = await rawSession(gateways[0]!.url);
  const live = await streams.open(gateways[0]!.url, sessionId);
  await emit(gateways[0]!.url, sessionId, 3);
  const events = await live.events.until(3);
  return { sessionId, live, last: events.at(-1)!.id! };
}

/** Calls the demo's emit tool with raw HTTP (its notifications go to the session's GET stream). */
async function emit(url: string, sessionId: string, count: number): Promise<void> {
  const answer = await post(url, toolCallBody('emit', { count, intervalMs: 0 }), { 'mcp-session-id': sessionId });
  await answer.text();
  if (answer.status !== 200) throw new Error(`emit answered ${answer.status}`);
}

/** Until every gateway takes new sessions for the replica again (a restarted one, probed once). */
async function untilUp(gateways: readonly GatewayProcess[], replica: ReplicaProcess): Promise<void> {
  for (const g of gateways) {
    await waitFor('the replica up again', bound(HEALTH_INTERVAL_MS), async () => (await scrapeMetric(g.adminUrl, 'mcp_gateway_replica_up', { replica: replica.id })) === 1);
  }
}

/** What the resumption was answered, as the test tells the cases apart. */
async function outcome(resumed: RawStream): Promise<string> {
  const how = `${resumed.status} ${resumed.headers['mcp-resumption'] ?? '-'} ${resumed.headers['mcp-resumption-reason'] ?? '-'}`;
  if (resumed.status !== 200) {
    const body = await resumed.text();
    return `${how} ${(JSON.parse(body) as { error: { data: { reason: string } } }).error.data.reason}`;
  }
  await resumed.ended;
  const events = resumed.events.items;
  const reasons = events.map((e) => (JSON.parse(e.data) as { params?: { reason?: string } }).params?.reason ?? 'event');
  return `${how} [${reasons.join(',')}]`;
}

const expected: Record<Mode, string> = {
  reject: '410 rejected owner_gone owner_gone',
  // The notification, then the end: the session is lost with its owner.
  signal: '200 new-stream owner_gone [owner_gone]',
};

for (const [store, mode] of [
  ['redis', 'reject'],
  ['redis', 'signal'],
  ['memory', 'reject'],
  ['memory', 'signal'],
] as const) {
  t.test(`the owner killed under an open GET stream, resumed at once (${store} store, ${mode} mode): owner_gone every time`, async (t) => {
    const { replica, gateways } = await fleet(t, store, mode);
    const streams = rawStreams(t);
    const seen = new Map<string, number>();
    for (let round = 0; round < ROUNDS; round++) {
      const via = round % gateways.length;
      const { sessionId, live, last } = await openGet(gateways, streams);

      await replica.kill('SIGKILL');
      // The gateway ends the client's stream; the client is back with its last cursor at once.
      await live.ended;
      const resumed = await streams.open(gateways[via]!.url, sessionId, last);
      const got = await outcome(resumed);
      const key = `${got} (through instance ${via})`;
      seen.set(key, (seen.get(key) ?? 0) + 1);

      await replica.restart();
      await untilUp(gateways, replica);
    }
    t.same(
      [...seen.keys()],
      gateways.map((_, via) => `${expected[mode]} (through instance ${via})`),
      `${ROUNDS} kills, never continued with nothing: ${JSON.stringify(Object.fromEntries(seen))}`,
    );
  });
}

for (const [store, via, mode] of [
  ['redis', 0, 'reject'],
  ['redis', 1, 'reject'],
  ['memory', 0, 'reject'],
  ['redis', 0, 'signal'],
  ['redis', 1, 'signal'],
  ['memory', 0, 'signal'],
] as const) {
  t.test(`the owner dying slowly, its pump's probe telling nothing, resumed through instance ${via} (${store} store, ${mode} mode): owner_gone`, async (t) => {
    const { replica, front, gateways } = await fleet(t, store, mode, { front: true });
    const streams = rawStreams(t);
    const { sessionId, live, last } = await openGet(gateways, streams);

    // Its connections cut, its port still taking connections it never serves: the probe of the
    // instance that saw the stream end waits, and tells nothing, while its lease comes due.
    front!.pause();
    await replica.kill('SIGKILL');
    await live.ended;
    // Gone for good: the port refuses.
    await front!.stop();
    const resumed = await streams.open(gateways[via]!.url, sessionId, last);
    t.equal(await outcome(resumed), expected[mode], 'owner_gone, not a continuation of nothing nor a gap');
  });
}
