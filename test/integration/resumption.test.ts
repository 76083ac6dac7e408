/**
 * §5 end to end: real Redis, three SDK replicas, two gateway instances behind a round-robin TCP
 * balancer that cuts connections, and the real SDK client.
 */
import { DEFAULT_REQUEST_TIMEOUT_MSEC } from '@modelcontextprotocol/sdk/shared/protocol.js';
import t from 'tap';
import { startBalancer } from '../helpers/balancer.js';
import { callText, connect } from '../helpers/client.js';
import { metricValue, startGateway, type RunningGateway } from '../helpers/gateway.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas, type ReplicaProcess } from '../helpers/replicas.js';
import { collectLogging, Collected, gatedFetch } from '../helpers/watch.js';
import type { Test } from 'tap';

const CURSOR = /^1\.[A-Za-z0-9_-]{16}\.[0-9a-z]+\.[A-Za-z0-9_-]{11}\.[A-Za-z0-9_-]{22}$/;

async function fleet(t: Test, settings: Record<string, unknown> = {}) {
  const redis = await startRedisServer(t);
  const replicas = await spawnReplicas(t, 3);
  const config = {
    store: { type: 'redis', url: redis.url },
    replicas: replicas.map((r) => ({ id: r.id, url: r.url })),
    // The owner's own log replays (§5 alone); with the journal: journal*.test.ts.
    resumption: { journal: { enabled: false } },
    ...settings,
  };
  const gateways = [await startGateway(t, config), await startGateway(t, config)];
  const balancer = await startBalancer(t, gateways.map((g) => g.url));
  return { redis, replicas, gateways, balancer };
}

async function resumptions(gateways: RunningGateway[], labels: Record<string, string>): Promise<number[]> {
  return Promise.all(gateways.map((g) => metricValue(g.registry, 'mcp_gateway_resumptions_total', labels)));
}

function owner(replicas: ReplicaProcess[], id: string): ReplicaProcess {
  const found = replicas.find((r) => r.id === id);
  if (!found) throw new Error(`no replica ${id}`);
  return found;
}

t.test('the first observed failure: a cut GET stream resumes on the other instance, exactly', async (t) => {
  const { gateways, balancer } = await fleet(t);
  const gate = gatedFetch();
  balancer.pin(0);
  const { client } = await connect(t, balancer.url, { fetch: gate.fetch });
  const logged = collectLogging(client);
  await gate.streams.until(1);

  await callText(client, 'emit', { count: 5, intervalMs: 5 });
  t.same(await logged.until(5), [1, 2, 3, 4, 5], 'five events on the GET stream');

  balancer.cut();
  const cursor = (await gate.reconnections.until(1))[0]!;
  t.match(cursor, CURSOR, 'the client resumes with a gateway cursor');
  // Emitted while the client's reconnection is held: the owner keeps them, the client has not seen them.
  await callText(client, 'emit', { count: 5, intervalMs: 5 });

  balancer.pin(1);
  gate.open();
  t.same(await logged.until(10), [1, 2, 3, 4, 5, 1, 2, 3, 4, 5], 'exactly the missed events, in order, no duplicate');
  await callText(client, 'emit', { count: 3, intervalMs: 5 });
  t.same(await logged.until(13), [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3], 'then live events');
  t.same(await resumptions(gateways, { outcome: 'continued', reason: 'none' }), [0, 1], 'continued by the other instance');
  t.same(logged.items.length, 13, 'nothing else arrived');
});

/** Sum of a metric over both instances. */
async function total(gateways: RunningGateway[], name: string, labels: Record<string, string>): Promise<number> {
  const values = await Promise.all(gateways.map((g) => metricValue(g.registry, name, labels)));
  return values.reduce((a, b) => a + b, 0);
}

t.test("the SDK client's own reconnection in the middle of a tool call with progress", async (t) => {
  const { gateways, balancer } = await fleet(t);
  const gate = gatedFetch();
  balancer.pin(0);
  const { client } = await connect(t, balancer.url, { fetch: gate.fetch });
  await gate.streams.until(1);
  const owner = await callText(client, 'whoami');
  const postsBefore = await total(gateways, 'mcp_gateway_requests_total', { method: 'POST', replica: owner });

  const progress = new Collected<number>();
  const call = client.callTool({ name: 'progress', arguments: { steps: 8, intervalMs: 60 } }, undefined, {
    onprogress: (p) => progress.push(p.progress),
  });
  await progress.until(2);
  balancer.cut();
  await gate.reconnections.until(1);
  balancer.pin(1);
  gate.open();

  const result = await call;
  t.same(result.content, [{ type: 'text', text: 'done after 8 steps' }], 'the call completed');
  t.same(progress.items, [1, 2, 3, 4, 5, 6, 7, 8], 'every progress notification arrived once, in order');
  const postsAfter = await total(gateways, 'mcp_gateway_requests_total', { method: 'POST', replica: owner });
  t.equal(postsAfter - postsBefore, 1, 'the tool call reached the owner once: it ran once');
  t.ok((await resumptions(gateways, { outcome: 'continued', reason: 'none' }))[1]! >= 1, 'continued by the other instance');
});

t.test('owner killed mid-call: the call fails at once with -32010, nowhere rerun, and the client settles', async (t) => {
  const { gateways, balancer, replicas } = await fleet(t);
  const gate = gatedFetch();
  balancer.pin(0);
  const { client, transport } = await connect(t, balancer.url, { fetch: gate.fetch });
  const settled = new Collected<string>();
  transport.onerror = (err) => {
    if (/Maximum reconnection attempts/.test(err.message)) settled.push(err.message);
  };
  await gate.streams.until(1);
  const ownerId = await callText(client, 'whoami');

  const progress = new Collected<number>();
  const started = performance.now();
  const call = client.callTool({ name: 'progress', arguments: { steps: 200, intervalMs: 50 } }, undefined, {
    onprogress: (p) => progress.push(p.progress),
  });
  const outcome = call.then(
    () => ({ code: 0 }),
    (err: { code?: number; data?: unknown }) => ({ code: err.code, data: err.data }),
  );
  await progress.until(1);
  await owner(replicas, ownerId).kill('SIGKILL');
  balancer.cut();
  balancer.pin(1);
  gate.open();

  t.same(await outcome, { code: -32010, data: { resumed: false, reason: 'owner_gone' } }, 'the pending call failed with -32010');
  const elapsed = performance.now() - started;
  // Any time short of the SDK's request timeout shows that the -32010 ended the call, not the timeout.
  t.ok(elapsed < DEFAULT_REQUEST_TIMEOUT_MSEC, `at once (${Math.round(elapsed)} ms), not after the SDK's ${DEFAULT_REQUEST_TIMEOUT_MSEC} ms request timeout`);
  for (const other of replicas.filter((r) => r.id !== ownerId)) {
    t.equal(await total(gateways, 'mcp_gateway_requests_total', { replica: other.id }), 0, `nothing reached ${other.id}`);
  }
  t.ok((await resumptions(gateways, { outcome: 'new_stream', reason: 'owner_gone' })).some((n) => n >= 1), 'signalled owner_gone');

  await settled.until(1, 20_000);
  t.pass('the client settled: it stopped reconnecting');
  const reconnections = gate.reconnections.items.length;
  t.ok(reconnections <= 4, `a bounded number of reconnections (${reconnections}), no loop`);
  t.ok((await resumptions(gateways, { outcome: 'rejected', reason: 'owner_gone' })).some((n) => n >= 1), 'its last cursor was answered 404');
});

t.test("the owner's event log trimmed: gap, nothing replayed before the signal, then live", async (t) => {
  const { gateways, balancer, replicas } = await fleet(t);
  const gate = gatedFetch();
  balancer.pin(0);
  const { client } = await connect(t, balancer.url, { fetch: gate.fetch });
  const logged = collectLogging(client);
  const resets = new Collected<{ reason: string; seenBefore: number }>();
  client.fallbackNotificationHandler = async (n) => {
    if (n.method === 'notifications/gateway/stream_reset') {
      resets.push({ reason: (n.params as { reason: string }).reason, seenBefore: logged.items.length });
    }
  };
  await gate.streams.until(1);
  const ownerId = await callText(client, 'whoami');

  await callText(client, 'emit', { count: 5, intervalMs: 5 });
  await logged.until(5);
  balancer.cut();
  await gate.reconnections.until(1);
  await callText(client, 'emit', { count: 5, intervalMs: 5 });
  const trimmed = await fetch(new URL('/_demo/trim?keep=0', owner(replicas, ownerId).url), { method: 'POST' });
  t.equal(trimmed.status, 200, "the owner's log is trimmed");
  balancer.pin(1);
  gate.open();

  t.same(await resets.until(1), [{ reason: 'gap', seenBefore: 5 }], 'the signal says gap, and nothing was replayed before it');
  await callText(client, 'emit', { count: 3, intervalMs: 5 });
  t.same(await logged.until(8), [1, 2, 3, 4, 5, 1, 2, 3], 'the missed events are not replayed partially; the new stream goes on live');
  t.same(await resumptions(gateways, { outcome: 'new_stream', reason: 'gap' }), [0, 1]);
});
