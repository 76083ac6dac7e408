/**
 * CONTRACT.md §8 J3 with an instance that is alive but late: gateway processes on one real
 * redis-server, an SDK replica without an event log, the real SDK client. The instance that holds
 * a GET stream has its event loop blocked (as a burst of work does) past the stream's lease, while
 * the client resumes through the other instance: the instance's liveness, renewed on its own
 * thread, says it is alive, so the stream is continued exactly (tailed from the journal), not
 * signalled as a gap. Its contrast: the holding instance killed, its liveness lapses with it, and
 * the stream is a gap as before (as in journal-kill.test.ts).
 */
import { Redis } from 'ioredis';
import t, { type Test } from 'tap';
import { startBalancer } from '../helpers/balancer.js';
import { BLOCK_LOOP_PRELOAD } from '../helpers/block-loop.js';
import { callText, connect } from '../helpers/client.js';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';
import { collectLogging, collectResets, gatedFetch } from '../helpers/watch.js';

/** resumption.journal.leaseMs at its least: renewed every third of it, lapsed a second into the block. */
const LEASE_MS = 1000;

/** When each pump's lease ends (pumpUntil) of every incarnation in the store that has a pump. */
async function pumpLeases(redis: Redis): Promise<number[]> {
  const leases: number[] = [];
  for (const key of await redis.keys('*:inc:*')) {
    const [pump, until] = await redis.hmget(key, 'pump', 'pumpUntil');
    if (pump) leases.push(Number(until));
  }
  return leases;
}

async function metric(adminUrl: string, line: RegExp): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  const found = text.split('\n').find((l) => line.test(l));
  return found === undefined ? 0 : Number(found.split(' ').pop());
}

/** Two gateway processes on one redis-server (instance 0 can have its loop blocked), a replica without an event log, the SDK client's GET stream through instance 0, cut after three events. */
async function cutStream(t: Test) {
  const [redis, [replica]] = await Promise.all([startRedisServer(t), spawnReplicas(t, 1, { eventStore: false })]);
  const settings = { store: { type: 'redis', url: redis.url }, replicas: [{ id: replica!.id, url: replica!.url }], resumption: { journal: { leaseMs: LEASE_MS } } };
  const gateways = await Promise.all([startGatewayProcess(t, settings, { preload: BLOCK_LOOP_PRELOAD }), startGatewayProcess(t, settings)]);
  const balancer = await startBalancer(t, gateways.map((g) => `${g.url}`));
  const inspect = new Redis(redis.url);
  t.teardown(() => inspect.quit());
  const gate = gatedFetch();
  balancer.pin(0);
  const { client } = await connect(t, balancer.url, { fetch: gate.fetch });
  const logged = collectLogging(client);
  const resets = collectResets(client);
  await gate.streams.until(1);
  await callText(client, 'emit', { count: 3, intervalMs: 5 });
  t.same(await logged.until(3), [1, 2, 3], 'three events on the GET stream through instance 0');
  balancer.cut();
  await gate.reconnections.until(1);
  const leaseLapsed = () => waitFor("the stream's lease lapsed", bound(10_000), async () => (await pumpLeases(inspect)).some((until) => until > 0 && until < Date.now()));
  const alive = async () => (await inspect.keys('*:alive:*')).length;
  return { gateways, balancer, gate, client, logged, resets, leaseLapsed, alive };
}

t.test("the holding instance's loop blocked past its stream's lease: the stream is continued exactly through the other instance, not a gap", async (t) => {
  const { gateways, balancer, gate, client, logged, resets, leaseLapsed, alive } = await cutStream(t);
  // Instance 0 holds the stream (J2) and stops renewing anything on its loop.
  gateways[0]!.signal('SIGUSR2');
  await leaseLapsed();
  t.equal(await alive(), 2, "instance 0's liveness runs, its loop blocked");
  balancer.pin(1);
  gate.open();
  // Sent through instance 1 to the replica, which writes them on the GET stream that instance 0
  // holds: they reach the client once instance 0 reads and journals them again.
  await callText(client, 'emit', { count: 2, intervalMs: 5 });
  t.same(await logged.until(5, bound(30_000)), [1, 2, 3, 1, 2], 'continued: the events sent meanwhile, each once, in order');
  t.same(resets.items, [], 'no stream_reset: nothing was signalled');
  t.ok((await metric(gateways[1]!.adminUrl, /^mcp_gateway_continuations_total\{source="journal"\}/)) >= 1, 'instance 1 continued from the journal');
  t.equal(await metric(gateways[1]!.adminUrl, /^mcp_gateway_resumptions_total\{outcome="new_stream"/), 0, 'instance 1 signalled no new stream');
  t.ok((await metric(gateways[0]!.adminUrl, /^mcp_gateway_lease_renewal_lateness_seconds_count\{lease="instance"\}/)) >= 1, "instance 0's liveness renewals are measured");
});

t.test('the contrast, the holding instance killed: its liveness lapses with it, and the stream is a gap as before', async (t) => {
  const { gateways, balancer, gate, resets, leaseLapsed, alive } = await cutStream(t);
  await gateways[0]!.stop('SIGKILL');
  await leaseLapsed();
  await waitFor("instance 0's liveness lapsed", bound(10_000), async () => (await alive()) === 1);
  balancer.pin(1);
  gate.open();
  const [reset] = await resets.until(1, bound(30_000));
  t.equal(reset!.reason, 'gap', 'the stream_reset notification says gap: what the replica sent since is lost with instance 0');
});
