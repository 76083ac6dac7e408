/**
 * R3, R4: the gateway answers 404 for sessions the store does not hold as active, ends sessions on
 * DELETE and on the owner's 404, and never sends a new session to a replica that refuses.
 */
import t from 'tap';
import { callText, connect } from '../helpers/client.js';
import { metricValue, startGateway } from '../helpers/gateway.js';
import { initializeBody, post, rawSession, refusingPort, SESSION_NOT_FOUND, toolCallBody } from '../helpers/http.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { startScriptedUpstream } from '../helpers/sse-upstream.js';

t.test('an unknown session gets 404 with the exact body and is not forwarded', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, { replicas: [{ id: replica!.id, url: replica!.url }] });
  for (const method of ['POST', 'GET', 'DELETE']) {
    const response = await fetch(gw.url, {
      method,
      headers: { 'mcp-session-id': 'no-such-session', 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: method === 'POST' ? toolCallBody('whoami') : undefined,
    });
    t.equal(response.status, 404, `${method}: 404`);
    t.equal(await response.text(), SESSION_NOT_FOUND, `${method}: the exact body`);
  }
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: replica!.id }), 0, 'nothing reached the replica');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: 'none', status: '404' }), 3, 'counted as answered by the gateway');
});

t.test('DELETE ends the session: any later request gets 404', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, { replicas: [{ id: replica!.id, url: replica!.url }] });
  const sessionId = await rawSession(gw.url);
  const deleted = await fetch(gw.url, { method: 'DELETE', headers: { 'mcp-session-id': sessionId } });
  t.equal(deleted.status, 200, 'the replica accepted the DELETE');
  await deleted.text();

  const forwardedBefore = await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: replica!.id });
  const again = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId });
  t.equal(again.status, 404);
  t.equal(await again.text(), SESSION_NOT_FOUND);
  const get = await fetch(gw.url, { headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream' } });
  t.equal(get.status, 404);
  t.equal(await get.text(), SESSION_NOT_FOUND);
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: replica!.id }), forwardedBefore, 'neither was forwarded');
});

t.test('a 404 from the owner ends the session as lost', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, { replicas: [{ id: replica!.id, url: replica!.url }] });
  const sessionId = await rawSession(gw.url);
  // The replica forgets the session behind the gateway's back, as a restarted replica would.
  const direct = await fetch(replica!.url, { method: 'DELETE', headers: { 'mcp-session-id': sessionId } });
  t.equal(direct.status, 200);
  await direct.text();

  const first = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId });
  t.equal(first.status, 404, "the owner's 404 reaches the client (R7)");
  await first.text();
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: replica!.id, status: '404' }), 1, 'that 404 came from the owner');

  const second = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId });
  t.equal(second.status, 404);
  t.equal(await second.text(), SESSION_NOT_FOUND, 'the gateway itself answers from then on');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: replica!.id, status: '404' }), 1, 'not forwarded again');
});

t.test('a replica that refuses connections is skipped for new sessions and marked down', async (t) => {
  const replicas = await spawnReplicas(t, 2);
  const dead = await refusingPort();
  const gw = await startGateway(t, {
    replicas: [{ id: 'dead', url: `http://127.0.0.1:${dead}/mcp` }, ...replicas.map((r) => ({ id: r.id, url: r.url }))],
  });
  const owners: string[] = [];
  for (let i = 0; i < 4; i++) {
    const { client } = await connect(t, gw.url);
    owners.push(await callText(client, 'whoami'));
  }
  t.same(new Set(owners), new Set(replicas.map((r) => r.id)), 'every session went to a live replica, both used');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_replica_up', { replica: 'dead' }), 0, 'the refusing replica is down');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_replica_up', { replica: replicas[0]!.id }), 1, 'the others are up');
});

t.test('no replica up: a new session gets 503 with Retry-After', async (t) => {
  const gw = await startGateway(t, { replicas: [{ id: 'dead', url: `http://127.0.0.1:${await refusingPort()}/mcp` }] });
  const response = await post(gw.url, '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}');
  t.equal(response.status, 503);
  t.equal(response.headers.get('retry-after'), '1');
  t.match(JSON.parse(await response.text()), { jsonrpc: '2.0', id: null, error: { code: -32000 } });
});

t.test('owner killed: its sessions get 404, also after it comes back on the same port', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, { replicas: [{ id: replica!.id, url: replica!.url }] });
  const sessionId = await rawSession(gw.url);
  await replica!.kill('SIGKILL');
  const refused = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId });
  t.equal(refused.status, 404, 'connection refused: the owner is gone with the session (R4)');
  t.equal(await refused.text(), SESSION_NOT_FOUND);

  await replica!.restart();
  await gw.gateway.fleet.tick();
  t.equal(gw.gateway.fleet.health(replica!.id), 'up', 'the replica is back for new sessions');
  const later = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId });
  t.equal(later.status, 404, 'the old session stays lost');
  t.equal(await later.text(), SESSION_NOT_FOUND);
  const fresh = await rawSession(gw.url);
  t.ok(fresh, 'a new session works on the restarted replica');
});

t.test('Origin not in security.allowedOrigins gets 403; a listed one passes', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, {
    replicas: [{ id: replica!.id, url: replica!.url }],
    security: { allowedOrigins: ['https://app.example'] },
  });
  const denied = await post(gw.url, toolCallBody('whoami'), { origin: 'https://evil.example' });
  t.equal(denied.status, 403);
  await denied.text();
  const sessionId = await rawSession(gw.url);
  const allowed = await post(gw.url, toolCallBody('whoami'), { origin: 'https://app.example', 'mcp-session-id': sessionId });
  t.equal(allowed.status, 200);
  t.match(await allowed.text(), /r1/);
});

t.test('a replica restarted between probes is known by its new instance: its sessions are lost', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, { replicas: [{ id: replica!.id, url: replica!.url }], health: { instanceHeader: 'mcp-replica-instance' } });
  await gw.gateway.fleet.tick();
  const sessionId = await rawSession(gw.url);
  await replica!.restart();
  await gw.gateway.fleet.tick();
  t.equal(gw.gateway.fleet.health(replica!.id), 'up', 'the new process is up');

  const forwarded = await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: replica!.id });
  const old = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId });
  t.equal(old.status, 404);
  t.equal(await old.text(), SESSION_NOT_FOUND, 'the gateway knew before asking the new process');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: replica!.id }), forwarded, 'not forwarded');
  t.ok(await rawSession(gw.url), 'new sessions work on the new process');
});

t.test('a replica that issues a session id already recorded gets 502, and the gateway lives on', async (t) => {
  const upstream = await startScriptedUpstream(t, 'always-the-same-id');
  const gw = await startGateway(t, { replicas: [{ id: 'scripted', url: upstream.url }] });
  const first = await post(gw.url, initializeBody());
  t.equal(first.status, 200);
  await first.text();
  const second = await post(gw.url, initializeBody());
  t.equal(second.status, 502, 'the second binding of the same id is refused');
  t.match(JSON.parse(await second.text()), { error: { code: -32000 } });
  const health = await fetch(`${gw.adminUrl}/healthz`);
  t.equal(health.status, 200, 'the gateway still serves');
});
