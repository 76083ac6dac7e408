/**
 * CONTRACT.md §8 J3 when the instance that holds a stream dies: gateway processes on one real
 * redis-server, an SDK replica without an event log, the real SDK client. The journal's events
 * reach the client through the other instance, each once; what the replica sent after the holder
 * died cannot be proven, and the client is told (a gap, or -32010 for the call in flight), never
 * left waiting. Where the replica keeps a log, the owner's log takes the stream over from the
 * journal's head: proven contiguous, no gap.
 */
import { DEFAULT_REQUEST_TIMEOUT_MSEC } from '@modelcontextprotocol/sdk/shared/protocol.js';
import t, { type Test } from 'tap';
import { startBalancer, type Balancer } from '../helpers/balancer.js';
import { callText, connect } from '../helpers/client.js';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';
import { collectLogging, collectResets, Collected, gatedFetch } from '../helpers/watch.js';

/** resumption.journal.leaseMs: half the default, still well above any pause of a live instance here. */
const LEASE_MS = 3000;

async function fleet(t: Test, eventStore = false) {
  const [redis, [replica]] = await Promise.all([startRedisServer(t), spawnReplicas(t, 1, { eventStore })]);
  // A shorter lease than the default: the other instance takes the dead one's streams over sooner.
  const settings = { store: { type: 'redis', url: redis.url }, replicas: [{ id: replica!.id, url: replica!.url }], resumption: { journal: { leaseMs: LEASE_MS } } };
  const gateways = await Promise.all([startGatewayProcess(t, settings), startGatewayProcess(t, settings)]);
  const balancer = await startBalancer(t, gateways.map((g) => `${g.url}`));
  return { gateways, balancer, replica: replica! };
}

/**
 * The SDK client through instance 0, three events on its GET stream, then the connection cut; its
 * reconnection waits at the gate.
 */
async function cutGetStream(t: Test, balancer: Balancer) {
  const gate = gatedFetch();
  balancer.pin(0);
  const { client } = await connect(t, balancer.url, { fetch: gate.fetch });
  const logged = collectLogging(client);
  const resets = collectResets(client);
  await gate.streams.until(1);
  await callText(client, 'emit', { count: 3, intervalMs: 5 });
  t.same(await logged.until(3), [1, 2, 3], 'three events on the GET stream');
  balancer.cut();
  await gate.reconnections.until(1);
  return { gate, client, logged, resets };
}

async function metric(adminUrl: string, line: RegExp): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  const found = text.split('\n').find((l) => line.test(l));
  return found === undefined ? 0 : Number(found.split(' ').pop());
}

t.test('the holding instance killed: its GET stream continues from the journal elsewhere, then as a gap', async (t) => {
  const { gateways, balancer } = await fleet(t);
  const { gate, client, logged, resets } = await cutGetStream(t, balancer);
  await gateways[0]!.stop('SIGKILL');
  balancer.pin(1);
  gate.open();
  // The reconnection waits on the other instance until the dead holder's lease runs out, then the
  // client's next reconnection is answered as a new stream: nothing proves what the replica sent.
  const [reset] = await resets.until(1, 60_000);
  t.equal(reset!.reason, 'gap', 'the stream_reset notification says gap');
  await callText(client, 'emit', { count: 2, intervalMs: 5 });
  t.same(await logged.until(5, 30_000), [1, 2, 3, 1, 2], 'then live again on a fresh stream; nothing repeated');
  t.ok((await metric(gateways[1]!.adminUrl, /^mcp_gateway_continuations_total\{source="journal"\}/)) >= 1, 'the other instance continued from the journal first');
});

t.test('the holding instance killed mid-call: the journaled progress arrives once, the call fails with -32010 at once', async (t) => {
  const { gateways, balancer, replica } = await fleet(t);
  const gate = gatedFetch();
  balancer.pin(0);
  const { client } = await connect(t, balancer.url, { fetch: gate.fetch });
  await gate.streams.until(1);
  const progress = new Collected<number>();
  const started = performance.now();
  const call = client.callTool({ name: 'progress', arguments: { steps: 400, intervalMs: 25 } }, undefined, {
    onprogress: (p) => progress.push(p.progress),
  });
  const outcome = call.then(
    () => ({ code: 0 }),
    (err: { code?: number; data?: unknown }) => ({ code: err.code, data: err.data }),
  );
  await progress.until(3);
  balancer.cut();
  await gate.reconnections.until(1);
  await gateways[0]!.stop('SIGKILL');
  balancer.pin(1);
  gate.open();
  t.same(await outcome, { code: -32010, data: { resumed: false, reason: 'gap' } }, 'the pending call fails: its outcome is unknown');
  const elapsed = performance.now() - started;
  t.ok(elapsed < DEFAULT_REQUEST_TIMEOUT_MSEC, `before the SDK's request timeout (${Math.round(elapsed)} ms)`);
  const seen = progress.items;
  t.same(seen, Array.from({ length: seen.length }, (_, i) => i + 1), `the progress that reached the journal (${seen.length}), once, in order`);
  void replica;
});

t.test('the holding instance killed, the replica keeps a log: the journal\'s events, then the owner\'s log from the journal\'s head', async (t) => {
  const { gateways, balancer } = await fleet(t, true);
  const { gate, client, logged, resets } = await cutGetStream(t, balancer);
  // Sent while the client is away: journaled by the holder, with the replica's own ids.
  balancer.pin(1);
  const journaled = await metric(gateways[0]!.adminUrl, /^mcp_gateway_journal_events_total /);
  await callText(client, 'emit', { count: 2, intervalMs: 5 });
  await waitFor('the held stream journaled them', bound(1000), async () => (await metric(gateways[0]!.adminUrl, /^mcp_gateway_journal_events_total /)) >= journaled + 2);
  await gateways[0]!.stop('SIGKILL');
  gate.open();
  // The journal's events first (its pump was alive when the client came back), then, its lease
  // run out, the owner's log from the journal's head: nothing lost, nothing repeated, no gap.
  t.same(await logged.until(5, 30_000), [1, 2, 3, 1, 2], 'the events journaled while the client was away, once');
  await waitFor('the owner took the stream over', bound(6000), async () => (await metric(gateways[1]!.adminUrl, /^mcp_gateway_continuations_total\{source="owner"\}/)) >= 1);
  await callText(client, 'emit', { count: 2, intervalMs: 5 });
  t.same(await logged.until(7), [1, 2, 3, 1, 2, 1, 2], 'then live from the owner on the same stream');
  t.same(resets.items, [], 'no stream_reset: the owner\'s log proved the stream contiguous');
  t.ok((await metric(gateways[1]!.adminUrl, /^mcp_gateway_continuations_total\{source="journal"\}/)) >= 1, 'continued from the journal first');
});
