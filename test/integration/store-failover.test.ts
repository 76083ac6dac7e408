/**
 * §7, a store failover on real servers: two gateway instances on a Redis Cluster (three masters,
 * each with a replica) or on Sentinel (a master, a replica, three sentinels), GET streams of SDK
 * replicas flowing through the first instance, the master that holds the sessions SIGKILLed while
 * events flow. A resumption decision during the failover gets 503 with Retry-After; after the store
 * is whole again and the clients' reconnection delay, every stream resumed through the second
 * instance with its client's last cursor is continued, each event exactly once and in order;
 * every session is still routed to its owner, and /readyz is back on both instances.
 */
import t, { type Test } from 'tap';
import { setTimeout as delay } from 'node:timers/promises';
import { sessionKey } from '../../src/store/redis/keys.js';
import { metricValue, startGateway, type RunningGateway } from '../helpers/gateway.js';
import { post, rawSession, toolCallBody } from '../helpers/http.js';
import { rawStreams, type RawEvent, type RawStream } from '../helpers/raw-sse.js';
import { startRedisCluster } from '../helpers/redis-cluster.js';
import { startRedisSentinel } from '../helpers/redis-sentinel.js';
import { spawnReplicas, type ReplicaProcess } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';

/** Sessions whose GET streams flow through the failover; one more is the probe of the 503s. */
const STREAMS = 9;
/** Each stream's events, this far apart: long enough to flow before, through and after a failover of a few seconds. */
const EVENTS = 160;
const INTERVAL_MS = 50;
/** The SDK clients' usual reconnection delay: the resumption after the store is whole again comes this late. */
const RECONNECT_DELAY_MS = 1000;
/** How often the probe asks for a decision during the failover. */
const PROBE_EVERY_MS = 50;
/** Bounds waits for events and for service; a limit on failure, not an expected duration. */
const DEADLINE_MS = bound(20_000);
const KEY_PREFIX = 'mcpgw';

/** One store topology whose master can be killed and whose failover can be awaited. */
interface Topology {
  readonly name: string;
  /** The gateway's store section. */
  readonly store: Record<string, unknown>;
  /** The master to kill: the one that holds most of these keys. */
  target(keys: readonly string[]): Promise<number>;
  /** Which master holds `key` now. */
  holds(key: string, master: number): Promise<boolean>;
  kill(master: number): Promise<void>;
  /** Resolves once the store is whole again, with the new master's port. */
  promoted(old: number): Promise<number>;
}

async function cluster(t: Test): Promise<Topology> {
  const redis = await startRedisCluster(t, { replicas: true });
  return {
    name: 'Redis Cluster (3 masters, 3 replicas)',
    store: { type: 'redis', url: 'redis://unused.invalid:6379', cluster: { nodes: redis.urls } },
    async target(keys) {
      const counts = new Map<number, number>();
      for (const key of keys) {
        const master = await redis.masterOf(key);
        counts.set(master, (counts.get(master) ?? 0) + 1);
      }
      return [...counts].sort((x, y) => y[1] - x[1])[0]![0];
    },
    holds: async (key, master) => (await redis.masterOf(key)) === master,
    kill: (master) => redis.killMaster(master),
    promoted: (old) => redis.promoted(old),
  };
}

async function sentinel(t: Test): Promise<Topology> {
  const redis = await startRedisSentinel(t);
  return {
    name: 'Sentinel (a master, a replica, 3 sentinels)',
    store: { type: 'redis', url: 'redis://unused.invalid:6379', sentinel: { nodes: redis.sentinelUrls, name: redis.name } },
    target: () => redis.masterPort(),
    holds: async (_key, master) => (await redis.masterPort()) === master,
    async kill(master) {
      if ((await redis.killMaster()) !== master) throw new Error('the master moved before the kill');
    },
    promoted: (old) => redis.failedOver(old),
  };
}

interface Session {
  readonly id: string;
  readonly owner: ReplicaProcess;
}

/** What a resumption was answered: status, Mcp-Resumption and its reason. */
const outcome = (r: RawStream) => `${r.status} ${r.headers['mcp-resumption']} ${r.headers['mcp-resumption-reason'] ?? ''}`.trim();

const seqOf = (event: RawEvent) => (JSON.parse(event.data) as { params: { data: { seq: number } } }).params.data.seq;

/** The replica that answers a tools/call of the session through `gw`; undefined unless 200. */
async function whoami(gw: RunningGateway, sessionId: string): Promise<string | undefined> {
  const response = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId });
  const body = await response.text();
  return response.status === 200 ? /"replica":"([^"]+)"/.exec(body)?.[1] : undefined;
}

/** Events on the session's GET stream, sent by its owner (no store on that path); resolves when all were sent. */
async function emit(session: Session, count: number, intervalMs: number): Promise<void> {
  const response = await post(session.owner.url, toolCallBody('emit', { count, intervalMs }), { 'mcp-session-id': session.id });
  await response.text();
  if (response.status !== 200) throw new Error(`the replica answered emit ${response.status}`);
}

interface Probe {
  /** ms after the kill, the status, Retry-After and the gateway's error code. */
  readonly at: number;
  readonly status: number;
  readonly retryAfter: string | undefined;
  readonly code: string | undefined;
  readonly resumption: string | undefined;
}

for (const start of [cluster, sentinel]) {
  t.test(`${start.name}: the master SIGKILLed while events flow; every stream continued exactly after it`, async (t: Test) => {
    const topology = await start(t);
    t.comment(topology.name);
    const replicas = await spawnReplicas(t, 2, { eventStore: false });
    const settings = { store: topology.store, replicas: replicas.map((r) => ({ id: r.id, url: r.url })) };
    const a = await startGateway(t, settings);
    const b = await startGateway(t, settings);
    const byId = new Map(replicas.map((r) => [r.id, r]));

    const sessions: Session[] = [];
    for (let i = 0; i <= STREAMS; i++) {
      const id = await rawSession(a.url);
      const owner = byId.get((await whoami(a, id)) ?? '');
      if (owner === undefined) throw new Error('a new session was not routed');
      sessions.push({ id, owner });
    }
    const master = await topology.target(sessions.map((s) => sessionKey(KEY_PREFIX, s.id)));
    // The probe: a session on the master to be killed, whose stream is not one of those checked.
    const probeAt = await findIndex(sessions, (s) => topology.holds(sessionKey(KEY_PREFIX, s.id), master));
    const [probe] = sessions.splice(probeAt, 1) as [Session];
    const onKilled = (await Promise.all(sessions.map((s) => topology.holds(sessionKey(KEY_PREFIX, s.id), master)))).filter(Boolean).length;
    t.ok(onKilled >= 1, `streams of sessions on the master to be killed: ${onKilled} of ${sessions.length}`);

    const streams = rawStreams(t);
    // The probe's cursor, recorded before the kill; its client gone, the stream held by a.
    const probeStream = await streams.open(a.url, probe.id);
    await emit(probe, 1, 0);
    const probeCursor = (await probeStream.events.until(1))[0]!.id!;
    probeStream.close();

    const first = await Promise.all(sessions.map((s) => streams.open(a.url, s.id)));
    t.ok(first.every((s) => s.status === 200), 'every GET stream open through a');
    const emitting = Promise.all(sessions.map((s) => emit(s, EVENTS, INTERVAL_MS)));
    emitting.catch(() => {});
    await Promise.all(first.map((s) => s.events.until(3, DEADLINE_MS)));

    await topology.kill(master);
    const killedAt = performance.now();
    const since = () => performance.now() - killedAt;
    let wholeAt: number | undefined;
    const promoted = topology.promoted(master).then((port) => {
      wholeAt = since();
      return port;
    });
    promoted.catch(() => {});

    // Decisions through b, one at a time, until the store is whole again and a decision passes:
    // the first 503 is met within milliseconds of the kill (the master's connection is gone).
    const probes: Probe[] = [];
    let continued: RawStream | undefined;
    await waitFor('a decision passes after the failover', DEADLINE_MS, async () => {
      const at = since();
      const answer = await streams.open(b.url, probe.id, probeCursor, DEADLINE_MS);
      const resumption = answer.headers['mcp-resumption'] as string | undefined;
      probes.push({ at, status: answer.status, retryAfter: answer.headers['retry-after'] as string | undefined, code: answer.headers['mcp-gateway-error'] as string | undefined, resumption });
      if (answer.status !== 503) {
        continued = answer;
        return true;
      }
      await answer.text();
      await delay(PROBE_EVERY_MS);
      return false;
    }).catch((err: Error) => t.fail(`${err.message}; promoted: ${wholeAt === undefined ? 'no' : `${wholeAt.toFixed(0)} ms`}; last answers: ${JSON.stringify(probes.slice(-3))}`));
    const newMaster = await promoted;
    t.not(newMaster, master, 'a replica was promoted');
    const refused = probes.filter((p) => p.status === 503);
    t.ok(refused.length >= 1, `a decision during the failover got 503 (${refused.length} of ${probes.length})`);
    t.ok(
      refused.every((p) => p.retryAfter !== undefined && p.code === 'GW_STORE_UNAVAILABLE'),
      `each with Retry-After and GW_STORE_UNAVAILABLE: ${JSON.stringify([...new Set(refused.map((p) => `${p.retryAfter}/${p.code}`))])}`,
    );
    t.equal(continued === undefined ? 'none' : outcome(continued), '200 continued', 'the probe continued once the store answered');
    continued?.close();

    // The clients' streams cut once the store is whole; they come back after their reconnection
    // delay, through the other instance. The delay is the scenario, not a synchronisation.
    await promoted;
    first.forEach((s) => s.close());
    const before = first.map((s) => [...s.events.items]);
    await delay(RECONNECT_DELAY_MS);
    const resumed = await Promise.all(sessions.map((s, i) => streams.open(b.url, s.id, before[i]!.at(-1)!.id, DEADLINE_MS)));
    const outcomes = resumed.map(outcome);
    t.same(outcomes, sessions.map(() => '200 continued'), 'every stream continued through b');

    await t.resolves(emitting, 'every event was emitted');
    // One event more on each stream, after the last: what arrives before it is all that will.
    await Promise.all(sessions.map((s) => emit(s, 1, 0)));
    for (const [i, session] of sessions.entries()) {
      const after = await resumed[i]!.events.until(EVENTS - before[i]!.length + 1, DEADLINE_MS).catch(() => resumed[i]!.events.items);
      const seen = [...before[i]!, ...after];
      const seqs = seen.map(seqOf);
      t.same(seqs, [...Array.from({ length: EVENTS }, (_, k) => k + 1), 1], `stream ${i + 1}: every event exactly once, in order (${before[i]!.length} before the cut)`);
      t.equal(new Set(seen.map((e) => e.id)).size, seen.length, `stream ${i + 1}: every cursor once`);
      t.equal(await whoami(b, session.id), session.owner.id, `session ${i + 1} still routed to its owner through b`);
    }
    t.equal(await whoami(b, probe.id), probe.owner.id, 'so is the probe\'s');
    for (const [name, gw] of [['a', a], ['b', b]] as const) {
      await t.resolves(
        waitFor(`/readyz of ${name}`, DEADLINE_MS, async () => (await fetch(`${gw.adminUrl}/readyz`)).status === 200),
        `/readyz back to 200 on ${name}`,
      );
    }
    const late = await metricValue(a.registry, 'mcp_gateway_record_batches_late_total');
    t.ok(late >= 1, `events flowed unrecorded through the failover and were recorded late (${late} late batches)`);

    const waits = await metricValue(b.registry, 'mcp_gateway_resumption_record_waits_total');
    const windowMs = refused.length === 0 ? 'none' : `${refused[0]!.at.toFixed(0)}-${refused.at(-1)!.at.toFixed(0)} ms`;
    t.comment(
      `${topology.name}: promoted ${((wholeAt ?? 0) / 1000).toFixed(2)} s after the kill; 503 window ${windowMs} after it ` +
        `(${refused.length} of ${probes.length} decisions), first decision passed at ${probes.at(-1)!.at.toFixed(0)} ms; ` +
        `${onKilled} of ${sessions.length} streams on the killed master; ${late} late batches on a, ${waits} record waits on b; ` +
        `clients: ${outcomes.filter((o) => o === '200 continued').length} of ${sessions.length} continued`,
    );
  });
}

async function findIndex<T>(items: readonly T[], test: (item: T) => Promise<boolean>): Promise<number> {
  for (const [i, item] of items.entries()) if (await test(item)) return i;
  throw new Error('none matched');
}
