/**
 * R4: the replica list changes at run time (SIGHUP reloads the file and calls the same
 * reconfigure): new replicas take new sessions, removed ones are drained: their streams end with
 * a retry hint, their sessions are lost (404, and owner_gone for their own resumptions).
 */
import t from 'tap';
import { callText, connect } from '../helpers/client.js';
import { metricValue, startGateway, testConfig } from '../helpers/gateway.js';
import { post, rawSession, SESSION_NOT_FOUND, toolCallBody } from '../helpers/http.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { SseReader } from '../helpers/sse-upstream.js';

t.test('a replica removed by a reload: its streams end, its sessions are lost; an added one takes sessions', async (t) => {
  const [r1, r2, r3] = await spawnReplicas(t, 3);
  const gw = await startGateway(t, { replicas: [{ id: r1!.id, url: r1!.url }] });
  const sessionId = await rawSession(gw.url);
  const response = await fetch(gw.url, { headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream' } });
  const stream = new SseReader(response.body!);
  t.match(await stream.next(), /^id: .+\ndata: ?$/, "the stream's priming event first (J1)");
  const emitted = await post(gw.url, toolCallBody('emit', { count: 1, intervalMs: 1 }), { 'mcp-session-id': sessionId });
  await emitted.text();
  const first = await stream.next();
  const cursor = /^id: (.+)$/m.exec(first ?? '')?.[1];
  t.ok(cursor, 'the stream carried an event with a cursor');

  gw.gateway.reconfigure(testConfig({ replicas: [{ id: r2!.id, url: r2!.url }, { id: r3!.id, url: r3!.url }] }));
  t.equal(await stream.next(), 'retry: 1000', 'the open stream got the retry hint');
  t.equal(await stream.next(), undefined, 'and ended');

  const later = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId });
  t.equal(later.status, 404, 'its session is lost');
  t.equal(await later.text(), SESSION_NOT_FOUND);
  const resumed = await fetch(gw.url, { headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream', 'last-event-id': cursor! } });
  t.equal(resumed.headers.get('mcp-resumption'), 'new-stream', "its own resumption is answered with the signal");
  t.equal(resumed.headers.get('mcp-resumption-reason'), 'owner_gone');
  t.match(await resumed.text(), /"reason":"owner_gone"/, 'and the stream ends after the notification');

  const owners = new Set<string>();
  for (let i = 0; i < 4; i++) {
    const { client } = await connect(t, gw.url);
    owners.add(await callText(client, 'whoami'));
  }
  t.same(owners, new Set([r2!.id, r3!.id]), 'new sessions go to the replicas of the new list only');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_replica_up', { replica: r1!.id }), 0, 'the removed replica is not reported up');
});
