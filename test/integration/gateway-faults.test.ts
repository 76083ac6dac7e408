/**
 * A gateway instance going away mid-stream, gracefully (SIGTERM: drain) or not (SIGKILL: crash):
 * the client reconnects through another instance and continues exactly, because nothing that a
 * continuation needs lived only in the instance that went away (E5).
 */
import t, { type Test } from 'tap';
import { startBalancer } from '../helpers/balancer.js';
import { callText, connect } from '../helpers/client.js';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { collectLogging, gatedFetch } from '../helpers/watch.js';

async function twoInstances(t: Test) {
  const [redis, replicas] = await Promise.all([startRedisServer(t), spawnReplicas(t, 2)]);
  // A shorter pump lease than the default: the crashed instance's stream is taken over sooner.
  const settings = {
    store: { type: 'redis', url: redis.url },
    replicas: replicas.map((r) => ({ id: r.id, url: r.url })),
    log: { level: 'info' },
    resumption: { journal: { leaseMs: 3000 } },
  };
  const gateways = await Promise.all([startGatewayProcess(t, settings), startGatewayProcess(t, settings)]);
  const balancer = await startBalancer(t, gateways.map((g) => g.url));
  return { gateways, balancer };
}

for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
  t.test(`${signal} of the instance holding the stream: the client continues through the other`, async (t) => {
    const { gateways, balancer } = await twoInstances(t);
    const gate = gatedFetch();
    balancer.pin(0);
    const { client } = await connect(t, balancer.url, { fetch: gate.fetch });
    const logged = collectLogging(client);
    await gate.streams.until(1);
    await callText(client, 'emit', { count: 4, intervalMs: 5 });
    t.same(await logged.until(4), [1, 2, 3, 4]);

    balancer.pin(1);
    const code = await gateways[0]!.stop(signal);
    if (signal === 'SIGTERM') {
      t.equal(code, 0, 'the drained instance exited 0');
      t.ok(gateways[0]!.logs.some((l) => l['msg'] === 'stopping'), 'it logged its stop');
    }
    await gate.reconnections.until(1);
    // Emitted while the client is away: kept by the owner, owed to the client.
    await callText(client, 'emit', { count: 3, intervalMs: 5 });
    gate.open();
    t.same(await logged.until(7), [1, 2, 3, 4, 1, 2, 3], 'exactly the missed events, then nothing twice');
    await callText(client, 'emit', { count: 2, intervalMs: 5 });
    t.same(await logged.until(9), [1, 2, 3, 4, 1, 2, 3, 1, 2], 'and live events go on');
    const metrics = await (await fetch(`${gateways[1]!.adminUrl}/metrics`)).text();
    t.match(metrics, /mcp_gateway_resumptions_total\{outcome="continued",reason="none"\} 1\n/, 'the other instance continued the stream');
  });
}

t.test('SIGTERM sends a retry hint on open streams before ending them', async (t) => {
  const { gateways } = await twoInstances(t);
  const init = await fetch(gateways[0]!.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } }),
  });
  const sessionId = init.headers.get('mcp-session-id')!;
  await init.text();
  const stream = await fetch(gateways[0]!.url, { headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream' } });
  t.equal(stream.status, 200);
  const body = stream.text();
  t.equal(await gateways[0]!.stop('SIGTERM'), 0);
  t.match(await body, /retry: 1000\n\n$/, 'the stream ended with the retry hint');
});
