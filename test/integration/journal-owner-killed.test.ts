/**
 * CONTRACT.md §8 J4 for a GET stream, on real processes: the owner SIGKILLed while its session's
 * GET stream is open, the client's stream ended by the gateway, and the client back at once with
 * its last cursor, through the instance that pumped the stream or the other one, on Redis and on
 * the memory store. The answer is `owner_gone` (410 in reject mode, the signal in signal mode),
 * never a continuation that carries nothing: each time, however the gateway learnt of the death.
 * The replica keeps no event log (the SDK's default server), so nothing but the journal and the
 * fleet can tell.
 */
import t, { type Test } from 'tap';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { post, rawSession, toolCallBody } from '../helpers/http.js';
import { rawStreams, type RawStream } from '../helpers/raw-sse.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplica, type ReplicaProcess } from '../helpers/replicas.js';
import { scrapeMetric } from '../helpers/scrape.js';
import { bound, PROBE_TIMEOUT_MS, waitFor } from '../helpers/wait.js';

/** Kills per case: the race it guards against was seen about once in four kills on a loaded machine. */
const ROUNDS = 20;
/** Probes often, so that a restarted replica takes sessions again soon; a kill is still first seen by the stream's end, mostly. */
const HEALTH_INTERVAL_MS = 200;

// Four cases of twenty kills, each kill a replica restart: on a loaded machine more than tap's 120 s.
t.setTimeout(600_000);

const redis = await startRedisServer(t);

type Mode = 'reject' | 'signal';

async function fleet(t: Test, store: 'redis' | 'memory', mode: Mode) {
  const replica = await spawnReplica(t, { id: 'r1', eventStore: false });
  const settings = {
    store: store === 'redis' ? { type: 'redis', url: redis.url } : { type: 'memory' },
    replicas: [{ id: replica.id, url: replica.url }],
    health: { intervalMs: HEALTH_INTERVAL_MS, timeoutMs: PROBE_TIMEOUT_MS },
    resumption: { mode },
  };
  const count = store === 'redis' ? 2 : 1;
  const gateways = await Promise.all(Array.from({ length: count }, () => startGatewayProcess(t, settings)));
  return { replica, gateways };
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
      const sessionId = await rawSession(gateways[0]!.url);
      const live = await streams.open(gateways[0]!.url, sessionId);
      await emit(gateways[0]!.url, sessionId, 3);
      const events = await live.events.until(3);

      await replica.kill('SIGKILL');
      // The gateway ends the client's stream; the client is back with its last cursor at once.
      await live.ended;
      const resumed = await streams.open(gateways[via]!.url, sessionId, events.at(-1)!.id);
      const got = await outcome(resumed);
      seen.set(`${got} (through instance ${via})`, (seen.get(`${got} (through instance ${via})`) ?? 0) + 1);

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
