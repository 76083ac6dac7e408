/**
 * §5 end to end: real Redis, three SDK replicas, two gateway instances behind a round-robin TCP
 * balancer that cuts connections, and the real SDK client.
 */
import t from 'tap';
import { startBalancer } from '../helpers/balancer.js';
import { callText, connect } from '../helpers/client.js';
import { metricValue, startGateway, type RunningGateway } from '../helpers/gateway.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas, type ReplicaProcess } from '../helpers/replicas.js';
import { collectLogging, gatedFetch } from '../helpers/watch.js';
import type { Test } from 'tap';

const CURSOR = /^1\.[A-Za-z0-9_-]{16}\.[0-9a-z]+\.[A-Za-z0-9_-]{11}\.[A-Za-z0-9_-]{22}$/;

async function fleet(t: Test, settings: Record<string, unknown> = {}) {
  const redis = await startRedisServer(t);
  const replicas = await spawnReplicas(t, 3);
  const config = {
    store: { type: 'redis', url: redis.url },
    replicas: replicas.map((r) => ({ id: r.id, url: r.url })),
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
  // Emitted while the client is away: the owner keeps them, the client has not seen them.
  await callText(client, 'emit', { count: 5, intervalMs: 5 });
  const cursor = (await gate.reconnections.until(1))[0]!;
  t.match(cursor, CURSOR, 'the client resumes with a gateway cursor');

  balancer.pin(1);
  gate.open();
  t.same(await logged.until(10), [1, 2, 3, 4, 5, 1, 2, 3, 4, 5], 'exactly the missed events, in order, no duplicate');
  await callText(client, 'emit', { count: 3, intervalMs: 5 });
  t.same(await logged.until(13), [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3], 'then live events');
  t.same(await resumptions(gateways, { outcome: 'continued', reason: 'none' }), [0, 1], 'continued by the other instance');
  t.same(logged.items.length, 13, 'nothing else arrived');
});
