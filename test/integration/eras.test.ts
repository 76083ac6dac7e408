/**
 * CONTRACT.md §9 M1 and M3: the 2026-07-28 era through the gateway, on real SDK v2 servers, with
 * the SDK v2 client negotiating the era (`versionNegotiation: 'auto'`) and an SDK v1 client
 * against the same fleet.
 */
import { Client as V1Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as V1Transport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import t from 'tap';
import { metricValue, startGateway, type RunningGateway } from '../helpers/gateway.js';
import { MCP_ACCEPT } from '../helpers/http.js';
import { spawnV2Replicas, type V2Replica } from '../helpers/v2-replicas.js';
import { bound, waitFor } from '../helpers/wait.js';
import type { Teardown } from '../helpers/processes.js';

const MODERN = '2026-07-28';
const META = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };
/** Store operations of sessions and streams: the modern era has neither. */
const SESSION_OPS = ['bindSession', 'touchSession', 'touchAndRead', 'openIncarnation', 'attachIncarnation', 'recordEvents'];

async function fleet(t: Teardown, count = 2): Promise<{ replicas: V2Replica[]; gw: RunningGateway }> {
  const replicas = await spawnV2Replicas(t, count);
  const gw = await startGateway(t, { replicas: replicas.map((r) => ({ id: r.id, url: r.url })) });
  return { replicas, gw };
}

/** The v2 client through `fetch`, which records the MCP headers of every request it sends. */
async function modernClient(t: Teardown, url: string) {
  const sent: Record<string, string>[] = [];
  const recording: typeof fetch = async (input, init) => {
    const headers = new Headers(init?.headers);
    const record: Record<string, string> = {};
    for (const name of ['mcp-protocol-version', 'mcp-method', 'mcp-name']) {
      const value = headers.get(name);
      if (value !== null) record[name] = value;
    }
    sent.push(record);
    return fetch(input, init);
  };
  const client = new Client({ name: 'eras-test', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch: recording }));
  t.teardown(() => client.close());
  return { client, sent };
}

function text(result: { content?: unknown }): string {
  const content = result.content as { type: string; text?: string }[];
  return content.find((c) => c.type === 'text')?.text ?? '';
}

async function storeSessionOps(gw: RunningGateway): Promise<number> {
  let sum = 0;
  for (const op of SESSION_OPS) sum += await metricValue(gw.registry, 'mcp_gateway_store_duration_seconds_count', { op });
  return sum;
}

function modernPost(url: string, message: Record<string, unknown>, headers: Record<string, string>): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: MCP_ACCEPT, ...headers },
    body: JSON.stringify({ jsonrpc: '2.0', ...message }),
  });
}

t.test('a v2 client negotiates the modern era through the gateway: no session, any replica, headers unchanged', async (t) => {
  const { replicas, gw } = await fleet(t);
  const { client, sent } = await modernClient(t, gw.url);
  t.equal(client.getNegotiatedProtocolVersion?.() ?? MODERN, MODERN, 'the modern era was negotiated');

  const answered = new Set<string>();
  for (let i = 0; i < 4; i++) answered.add(text(await client.callTool({ name: 'whoami', arguments: {} })));
  t.same([...answered].sort(), replicas.map((r) => r.id).sort(), 'the balancer spread the calls over both replicas');

  const progress: number[] = [];
  const counted = text(await client.callTool({ name: 'count', arguments: { n: 3 } }, { onprogress: (p) => progress.push(p.progress) }));
  t.match(counted, /^v\d:3$/, 'a call answered with an SSE stream');
  t.same(progress, [1, 2, 3], "the stream's notifications arrived in order, before its result");
  t.ok((await metricValue(gw.registry, 'mcp_gateway_sse_events_total')) >= 4, 'they came as SSE events through the gateway');

  const received = (await Promise.all(replicas.map((r) => r.state()))).flatMap((s) => s.seen);
  const modern = sent.filter((h) => h['mcp-method'] !== undefined);
  t.ok(modern.length >= 6, 'the client sent modern requests with the standard headers');
  for (const headers of modern) {
    t.ok(
      received.some((r) => Object.entries(headers).every(([name, value]) => r[name] === value)),
      `${headers['mcp-method']} ${headers['mcp-name'] ?? ''}: its standard headers reached a replica unchanged`,
    );
  }
  t.notOk(received.some((r) => r['mcp-session-id'] !== undefined), 'no session id anywhere');
  t.equal(await storeSessionOps(gw), 0, 'no session or stream was recorded in the store');
  t.ok((await metricValue(gw.registry, 'mcp_gateway_modern_requests_total', { mcp_method: 'tools/call', outcome: 'forwarded' })) >= 5, 'counted by method');
});

t.test('a modern SSE stream is not journaled, so not primed: no event carries an id (§8 J1, §9 M3)', async (t) => {
  // The journal is on (the default): a session's stream would begin with a priming event.
  const { gw } = await fleet(t);
  const call = { id: 11, method: 'tools/call', params: { name: 'count', arguments: { n: 2 }, _meta: { ...META, progressToken: 'p' } } };
  const response = await modernPost(gw.url, call, { 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'count' });
  t.match(response.headers.get('content-type'), /^text\/event-stream/, 'answered with an SSE stream');
  const blocks = (await response.text()).split(/\n\n/).filter((b) => b.trim() !== '');
  t.equal(blocks.length, 3, 'its two notifications and its result');
  t.notOk(blocks.some((b) => /^id:/m.test(b)), 'none with an id: no priming event, no cursor');
  t.ok(blocks.every((b) => /^data: \{/m.test(b)), 'each with a JSON-RPC message');
});

t.test('subscriptions/listen passes unbuffered, and closing it closes the replica’s stream at once', async (t) => {
  const { replicas, gw } = await fleet(t);
  const { client } = await modernClient(t, gw.url);
  let changes = 0;
  client.setNotificationHandler('notifications/tools/list_changed', () => {
    changes++;
  });
  const subscription = await client.listen({ toolsListChanged: true });
  t.ok(subscription.honoredFilter.toolsListChanged, 'the replica acknowledged the subscription through the gateway');
  await waitFor('the listen stream open on a replica', bound(0), async () => (await Promise.all(replicas.map((r) => r.state()))).some((s) => s.openStreams === 1));

  // Whichever replica holds the stream publishes; the event must arrive while the stream is open.
  for (const r of replicas) await r.toolsChanged();
  await waitFor('the change notification through the open stream', bound(0), () => changes === 1);
  t.equal(changes, 1, 'one notification, relayed as it was written');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_sse_streams_open'), 1, 'the gateway holds one stream');

  await subscription.close();
  t.equal(await subscription.closed, 'local');
  await waitFor('the replica’s listen stream closed', bound(0), async () => (await Promise.all(replicas.map((r) => r.state()))).every((s) => s.openStreams === 0));
  await waitFor('the gateway’s stream closed', bound(0), async () => (await metricValue(gw.registry, 'mcp_gateway_sse_streams_open')) === 0);
  t.pass('closing is cancellation: nothing held open');
  t.equal(await storeSessionOps(gw), 0, 'the stream was never recorded or journaled');
});

t.test('a modern request whose headers disagree with its body gets 400 with -32020 and reaches no replica', async (t) => {
  const { replicas, gw } = await fleet(t);
  const call = { id: 7, method: 'tools/call', params: { name: 'whoami', arguments: {}, _meta: META } };
  const standard = { 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'whoami' };
  const cases: [string, Record<string, string>, RegExp][] = [
    ['Mcp-Method', { ...standard, 'mcp-method': 'tools/list' }, /Mcp-Method/],
    ['Mcp-Name', { ...standard, 'mcp-name': 'other' }, /Mcp-Name/],
    ['Mcp-Name in Base64', { ...standard, 'mcp-name': `=?base64?${Buffer.from('other').toString('base64')}?=` }, /Mcp-Name/],
    ['a broken Base64 Mcp-Name', { ...standard, 'mcp-name': '=?base64?***?=' }, /Base64/],
    ['MCP-Protocol-Version', { ...standard, 'mcp-protocol-version': '2025-06-18' }, /MCP-Protocol-Version/],
  ];
  for (const [what, headers, message] of cases) {
    const response = await modernPost(gw.url, call, headers);
    t.equal(response.status, 400, `${what}: 400`);
    t.equal(response.headers.get('mcp-gateway-error'), 'GW_HEADER_MISMATCH', `${what}: the gateway's code`);
    const body = JSON.parse(await response.text()) as { id: unknown; error: { code: number; message: string } };
    t.equal(body.id, 7, `${what}: the request's id`);
    t.equal(body.error.code, -32020, `${what}: HeaderMismatch`);
    t.match(body.error.message, message, `${what}: says which header`);
  }
  const task = { id: 8, method: 'tasks/get', params: { taskId: 'task-a', _meta: META } };
  const wrongTask = await modernPost(gw.url, task, { 'mcp-protocol-version': MODERN, 'mcp-method': 'tasks/get', 'mcp-name': 'task-b' });
  t.equal(wrongTask.status, 400, 'Mcp-Name against params.taskId');
  t.equal((JSON.parse(await wrongTask.text()) as { error: { code: number } }).error.code, -32020);
  const wrongUri = await modernPost(
    gw.url,
    { id: 9, method: 'resources/read', params: { uri: 'file:///a', _meta: META } },
    { 'mcp-protocol-version': MODERN, 'mcp-method': 'resources/read', 'mcp-name': 'file:///b' },
  );
  t.equal(wrongUri.status, 400, 'Mcp-Name against params.uri');
  await wrongUri.text();

  const seen = (await Promise.all(replicas.map((r) => r.state()))).reduce((n, s) => n + s.seen.length, 0);
  t.equal(seen, 0, 'no replica saw any of them');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_modern_requests_total', { outcome: 'header_mismatch' }), 7, 'counted as mismatches');

  const encoded = await modernPost(gw.url, call, { ...standard, 'mcp-name': `=?base64?${Buffer.from('whoami').toString('base64')}?=` });
  t.equal(encoded.status, 200, 'an Mcp-Name in Base64 that agrees passes');
  t.match(await encoded.text(), /v\d/);
  const padded = await modernPost(gw.url, call, { ...standard, 'mcp-method': ' tools/call\t' });
  t.equal(padded.status, 200, 'whitespace around a header value is not a disagreement');
  await padded.text();
});

t.test('a modern request with a stray Mcp-Session-Id is still sessionless (M1)', async (t) => {
  const { gw } = await fleet(t, 1);
  const response = await modernPost(
    gw.url,
    { id: 1, method: 'tools/call', params: { name: 'whoami', arguments: {}, _meta: META } },
    { 'mcp-protocol-version': MODERN, 'mcp-method': 'tools/call', 'mcp-name': 'whoami', 'mcp-session-id': 'never-issued' },
  );
  t.equal(response.status, 200, 'forwarded, not answered 404 as an unknown session');
  t.match(await response.text(), /v1/);
});

t.test('a v1 client against the same fleet: the 2025 era, served statelessly by the v2 servers', async (t) => {
  const { replicas, gw } = await fleet(t);
  const client = new V1Client({ name: 'eras-v1', version: '1.0.0' });
  const transport = new V1Transport(new URL(gw.url));
  await client.connect(transport);
  t.teardown(() => client.close());
  t.equal(transport.sessionId, undefined, 'the v2 servers issue no session');
  const answered = new Set<string>();
  for (let i = 0; i < 4; i++) answered.add(text((await client.callTool({ name: 'whoami', arguments: {} })) as { content?: unknown }));
  t.same([...answered].sort(), replicas.map((r) => r.id).sort(), 'every call answered, by either replica');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_modern_requests_total'), 0, 'none of it counted as modern');
});
