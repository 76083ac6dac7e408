/**
 * CONTRACT.md §9, the 2024-11-05 HTTP+SSE transport through the gateway (legacySse), on real
 * processes: SDK v1 servers on SSEServerTransport (test/helpers/legacy-replica-main.ts), the SDK
 * v1 SSEClientTransport, two gateway instances on one Redis.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import t from 'tap';
import { metricValue, startGateway, type RunningGateway } from '../helpers/gateway.js';
import { MCP_ACCEPT, SESSION_NOT_FOUND } from '../helpers/http.js';
import type { Teardown } from '../helpers/processes.js';
import { spawnLegacyReplicas, type LegacyReplica } from '../helpers/legacy-replicas.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { bound, waitFor } from '../helpers/wait.js';

const LEGACY = { path: '/sse', messagesPath: '/messages' };

async function fleet(t: Teardown): Promise<{ replicas: LegacyReplica[]; a: RunningGateway; b: RunningGateway }> {
  const redis = await startRedisServer(t);
  const replicas = await spawnLegacyReplicas(t, 2);
  const settings = { store: { type: 'redis', url: redis.url }, replicas: replicas.map((r) => ({ id: r.id, url: r.url })), legacySse: LEGACY };
  return { replicas, a: await startGateway(t, settings), b: await startGateway(t, settings) };
}

/**
 * The SDK v1 HTTP+SSE client on `a`'s SSE endpoint, its POSTs sent through `b` (the endpoint it
 * was given, on b's address). Records the endpoint event's URL as the client resolved it.
 */
async function legacyClient(t: Teardown, a: RunningGateway, b: RunningGateway) {
  const sseUrl = new URL(LEGACY.path, a.url);
  const posted: string[] = [];
  const throughB: typeof fetch = (input, init) => {
    if (init?.method !== 'POST') return fetch(input, init);
    const url = new URL(String(input instanceof Request ? input.url : input));
    posted.push(url.pathname + url.search);
    url.host = new URL(b.url).host;
    return fetch(url, init);
  };
  const transport = new SSEClientTransport(sseUrl, { fetch: throughB });
  const client = new Client({ name: 'legacy-sse-test', version: '1.0.0' });
  await client.connect(transport);
  t.teardown(() => client.close());
  return { client, posted };
}

function text(result: unknown): string {
  const content = (result as { content: { type: string; text?: string }[] }).content;
  return content.find((c) => c.type === 'text')?.text ?? '';
}

t.test('an HTTP+SSE stream is not primed: its first event is the endpoint event, with no id (§8 J1)', async (t) => {
  // The journal is on (the default): a Streamable HTTP session's stream would begin with a priming event.
  const { a } = await fleet(t);
  const controller = new AbortController();
  t.teardown(() => controller.abort());
  const response = await fetch(new URL(LEGACY.path, a.url), { headers: { accept: 'text/event-stream' }, signal: controller.signal });
  t.equal(response.status, 200);
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (!text.includes('\n\n')) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  const first = text.slice(0, text.indexOf('\n\n'));
  t.match(first, /^event: endpoint\ndata: \/messages\?sessionId=/m, 'the endpoint event first');
  t.notMatch(first, /^id:/m, 'with no id: nothing of the journal');
});

t.test('an HTTP+SSE client opens its stream through one instance and posts through the other, to the owner', async (t) => {
  const { replicas, a, b } = await fleet(t);
  const { client, posted } = await legacyClient(t, a, b);
  const owner = text(await client.callTool({ name: 'whoami', arguments: {} }));
  t.ok(replicas.some((r) => r.id === owner), `the session's owner answers (${owner})`);
  t.match(posted[0], /^\/messages\?sessionId=[0-9a-f-]{36}$/, "the endpoint event named the gateway's messagesPath with the replica's session id");
  for (let i = 0; i < 5; i++) t.equal(text(await client.callTool({ name: 'whoami', arguments: {} })), owner, `call ${i + 2}: the owner`);

  const states = await Promise.all(replicas.map(async (r) => ({ id: r.id, ...(await r.state()) })));
  for (const s of states) {
    if (s.id === owner) t.ok(s.posts >= 7, `${s.id} received every message (initialize, initialized, the calls)`);
    else t.same({ sessions: s.sessions, posts: s.posts }, { sessions: 0, posts: 0 }, `${s.id} saw nothing`);
  }
  t.ok((await metricValue(b.registry, 'mcp_gateway_requests_total', { method: 'POST', replica: owner })) >= 7, 'the messages went through instance B');
  t.equal(await metricValue(a.registry, 'mcp_gateway_requests_total', { method: 'POST' }), 0, 'none through A');
  t.equal(await metricValue(a.registry, 'mcp_gateway_sse_streams_open', { replica: owner }), 1, 'A relays the stream');

  // A session of this transport is not a Streamable HTTP session, and the other way round.
  const sessionId = new URLSearchParams(posted[0]!.split('?')[1]).get('sessionId')!;
  const onMcp = await fetch(b.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: MCP_ACCEPT, 'mcp-session-id': sessionId },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  });
  t.equal(onMcp.status, 404, 'its id on the MCP endpoint is unknown there');
  await onMcp.text();
  t.equal(text(await client.callTool({ name: 'whoami', arguments: {} })), owner, 'and the session lives on');

  await client.close();
  await waitFor('the session ends with its stream', bound(0), async () => {
    const response = await fetch(`${new URL(LEGACY.messagesPath, b.url).href}?sessionId=${sessionId}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'ping' }),
    });
    return response.status === 404 && (await response.text()) === SESSION_NOT_FOUND;
  });
  t.pass('a POST after the stream closed gets 404 (R3)');
});

t.test('unknown sessions get 404 and reach no replica; the owner killed, its session gets 404', async (t) => {
  const { replicas, a, b } = await fleet(t);
  const messages = new URL(LEGACY.messagesPath, b.url).href;
  const ping = (query: string) =>
    fetch(`${messages}${query}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }) });
  for (const query of ['?sessionId=never-issued', '', '?sessionId=']) {
    const response = await ping(query);
    t.equal(response.status, 404, `${query || 'no query'}: 404`);
    t.equal(await response.text(), SESSION_NOT_FOUND, 'the body of R3');
  }
  t.same((await Promise.all(replicas.map((r) => r.state()))).map((s) => s.posts), [0, 0], 'no replica saw them');

  const { client, posted } = await legacyClient(t, a, b);
  const owner = text(await client.callTool({ name: 'whoami', arguments: {} }));
  const query = `?${posted[0]!.split('?')[1]}`;
  await replicas.find((r) => r.id === owner)!.kill();
  const lost = await ping(query);
  t.equal(lost.status, 404, 'a POST for the lost session: 404');
  t.equal(await lost.text(), SESSION_NOT_FOUND);
  const other = replicas.find((r) => r.id !== owner)!;
  t.equal((await other.state()).posts, 0, `${other.id} never received it`);
});

t.test('without legacySse the paths are not served', async (t) => {
  const replicas = await spawnLegacyReplicas(t, 1);
  const gw = await startGateway(t, { replicas: replicas.map((r) => ({ id: r.id, url: r.url })) });
  const response = await fetch(new URL(LEGACY.path, gw.url), { headers: { accept: 'text/event-stream' } });
  t.equal(response.status, 404);
  await response.text();
  t.equal((await replicas[0]!.state()).sessions, 0, 'no stream was opened on the replica');
});
