/**
 * R1, R2: a session is bound to the replica that answered `initialize`, and every later request
 * reaches that replica, from any gateway instance that shares the store.
 */
import t from 'tap';
import { alternatingFetch, callText, connect } from '../helpers/client.js';
import { metricValue, startGateway } from '../helpers/gateway.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas } from '../helpers/replicas.js';

t.test('Redis store, two gateway instances: 20 calls alternating between them reach one replica', async (t) => {
  const redis = await startRedisServer(t);
  const replicas = await spawnReplicas(t, 3);
  const settings = {
    store: { type: 'redis', url: redis.url },
    replicas: replicas.map((r) => ({ id: r.id, url: r.url })),
  };
  const a = await startGateway(t, settings);
  const b = await startGateway(t, settings);

  const rotation = alternatingFetch([a.url, b.url]);
  const { client } = await connect(t, a.url, { fetch: rotation.fetch });
  t.equal(rotation.hosts[0], new URL(a.url).host, 'initialize went through instance A');

  const owner = await callText(client, 'whoami');
  t.ok(replicas.some((r) => r.id === owner), `the owner is one of the replicas (${owner})`);
  const postsBefore = {
    a: await metricValue(a.registry, 'mcp_gateway_requests_total', { method: 'POST', replica: owner }),
    b: await metricValue(b.registry, 'mcp_gateway_requests_total', { method: 'POST', replica: owner }),
  };
  const answers: string[] = [];
  for (let i = 0; i < 20; i++) answers.push(await callText(client, 'whoami'));
  t.same(new Set(answers), new Set([owner]), 'all 20 calls reached the owner');

  const viaA = (await metricValue(a.registry, 'mcp_gateway_requests_total', { method: 'POST', replica: owner })) - postsBefore.a;
  const viaB = (await metricValue(b.registry, 'mcp_gateway_requests_total', { method: 'POST', replica: owner })) - postsBefore.b;
  t.equal(viaA + viaB, 20, 'the 20 calls were forwarded to the owner');
  t.equal(viaA, 10, 'half of them through instance A');
  t.equal(viaB, 10, 'half of them through instance B');
  for (const other of replicas.filter((r) => r.id !== owner)) {
    for (const [name, gw] of [['A', a], ['B', b]] as const) {
      const forwarded = await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: other.id });
      t.equal(forwarded, 0, `${name} never forwarded anything to ${other.id}`);
    }
  }
});

t.test('memory store, one instance: 20 calls reach one replica; new sessions spread', async (t) => {
  const replicas = await spawnReplicas(t, 3);
  const gw = await startGateway(t, { store: { type: 'memory' }, replicas: replicas.map((r) => ({ id: r.id, url: r.url })) });

  const owners = new Set<string>();
  for (let s = 0; s < 3; s++) {
    const { client } = await connect(t, gw.url);
    const owner = await callText(client, 'whoami');
    owners.add(owner);
    const answers = new Set<string>();
    for (let i = 0; i < 20; i++) answers.add(await callText(client, 'whoami'));
    t.same(answers, new Set([owner]), `session ${s}: all 20 calls reached ${owner}`);
  }
  t.equal(owners.size, 3, 'round robin gave each of three sessions its own replica');
});

t.test('least-sessions balancer sends a new session to the replica with the fewest', async (t) => {
  const replicas = await spawnReplicas(t, 2);
  const gw = await startGateway(t, { balancer: 'least-sessions', replicas: replicas.map((r) => ({ id: r.id, url: r.url })) });
  const first = await connect(t, gw.url);
  const second = await connect(t, gw.url);
  const owners = [await callText(first.client, 'whoami'), await callText(second.client, 'whoami')];
  t.not(owners[0], owners[1], 'the second session went to the other replica');
  await first.transport.terminateSession();
  const third = await connect(t, gw.url);
  t.equal(await callText(third.client, 'whoami'), owners[0], 'after one ended, its replica had the fewest');
});
