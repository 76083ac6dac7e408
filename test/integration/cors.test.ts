/**
 * CONTRACT.md §9 Browsers and R6: the gateway answers preflights itself, grants a listed origin on
 * every answer (a replica's, its own, SSE streams), refuses other origins, and grants nothing when
 * no origin is listed.
 */
import t, { type Test } from 'tap';
import { callText, connect } from '../helpers/client.js';
import { metricValue, startGateway } from '../helpers/gateway.js';
import { MCP_ACCEPT, post, rawSession, SESSION_NOT_FOUND, toolCallBody } from '../helpers/http.js';
import { spawnReplicas } from '../helpers/replicas.js';

const APP = 'https://app.example';
const EXPOSED = ['mcp-session-id', 'mcp-resumption', 'mcp-resumption-reason', 'mcp-gateway-error'];

function list(value: string | null): string[] {
  return (value ?? '').split(',').map((s) => s.trim().toLowerCase()).filter(Boolean);
}

function preflight(url: string, origin: string, method: string, requestHeaders: string): Promise<Response> {
  return fetch(url, {
    method: 'OPTIONS',
    headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': requestHeaders },
  });
}

/** Checks what a browser needs to read a cross-origin answer and the MCP headers on it. */
function checkGranted(t: Test, response: Response, what: string) {
  t.equal(response.headers.get('access-control-allow-origin'), APP, `${what}: Access-Control-Allow-Origin is the origin`);
  const exposed = list(response.headers.get('access-control-expose-headers'));
  for (const name of EXPOSED) t.ok(exposed.includes(name), `${what}: ${name} is exposed`);
  t.match(response.headers.get('vary') ?? '', /origin/i, `${what}: Vary names Origin`);
}

t.test('a preflight from a listed origin is answered by the gateway and never forwarded', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, { replicas: [{ id: replica!.id, url: replica!.url }], security: { allowedOrigins: [APP] } });
  const requested = ['content-type', 'authorization', 'mcp-session-id', 'mcp-protocol-version', 'last-event-id', 'mcp-method', 'mcp-name', 'mcp-param-region'];
  for (const method of ['POST', 'GET', 'DELETE']) {
    const response = await preflight(gw.url, APP, method, requested.join(', '));
    t.equal(response.status, 204, `${method}: 204`);
    t.equal(await response.text(), '', `${method}: no body`);
    t.equal(response.headers.get('access-control-allow-origin'), APP, `${method}: the origin is granted`);
    const methods = list(response.headers.get('access-control-allow-methods'));
    for (const m of ['get', 'post', 'delete']) t.ok(methods.includes(m), `${method}: ${m.toUpperCase()} is allowed`);
    const headers = list(response.headers.get('access-control-allow-headers'));
    for (const name of requested) t.ok(headers.includes(name), `${method}: ${name} is allowed`);
    t.ok(Number(response.headers.get('access-control-max-age')) > 0, `${method}: the answer may be cached`);
  }
  const odd = await preflight(gw.url, APP, 'POST', 'x-something, mcp-param-bad name');
  const granted = list(odd.headers.get('access-control-allow-headers'));
  t.notOk(granted.includes('x-something'), 'a header outside MCP is not granted');
  t.notOk(granted.some((h) => h.includes('bad')), 'a malformed Mcp-Param name is not granted');
  await odd.text();
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: replica!.id }), 0, 'nothing reached the replica');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { method: 'OPTIONS', status: '204', replica: 'none' }), 4, 'counted as answered by the gateway');
});

t.test('a listed origin reads every answer: the replica’s, the gateway’s own, SSE streams', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, { replicas: [{ id: replica!.id, url: replica!.url }], security: { allowedOrigins: ['https://other.example', APP] } });

  // The SDK client as a web page would run it: every request carries the page's origin.
  const seen: Response[] = [];
  const browserFetch: typeof fetch = async (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set('origin', APP);
    const response = await fetch(input, { ...init, headers });
    seen.push(response);
    return response;
  };
  const { client } = await connect(t, gw.url, { fetch: browserFetch });
  t.equal(await callText(client, 'whoami'), replica!.id, 'a tool call through the gateway');
  t.ok(seen.length >= 3, 'initialize, initialized and the call went through the browser fetch');
  for (const [i, response] of seen.entries()) checkGranted(t, response, `SDK request ${i + 1} (${response.status})`);
  t.ok(seen.some((r) => r.headers.get('content-type')?.startsWith('text/event-stream')), 'an SSE answer was among them');

  const sessionId = await rawSession(gw.url);
  const stream = await fetch(gw.url, { headers: { origin: APP, accept: 'text/event-stream', 'mcp-session-id': sessionId } });
  t.equal(stream.status, 200, 'the GET stream opens');
  checkGranted(t, stream, 'GET stream');
  await stream.body?.cancel();

  const resumed = await fetch(gw.url, { headers: { origin: APP, accept: 'text/event-stream', 'mcp-session-id': sessionId, 'last-event-id': 'not-a-cursor' } });
  t.equal(resumed.headers.get('mcp-resumption'), 'new-stream', 'the gateway answers the resumption itself');
  checkGranted(t, resumed, 'resumption answer');
  await resumed.body?.cancel();

  const unknown = await post(gw.url, toolCallBody('whoami'), { origin: APP, 'mcp-session-id': 'no-such-session' });
  t.equal(unknown.status, 404);
  t.equal(await unknown.text(), SESSION_NOT_FOUND, "the gateway's own 404");
  checkGranted(t, unknown, 'gateway 404');

  const stripped = await post(gw.url, toolCallBody('whoami'), { origin: APP, 'mcp-session-id': sessionId, 'last-event-id': 'x' });
  t.equal(stripped.headers.get('mcp-resumption'), 'stripped');
  checkGranted(t, stripped, 'POST with Last-Event-ID');
  await stripped.text();
});

t.test('an origin not listed gets 403 without any grant, preflight or not, and reaches no replica', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, { replicas: [{ id: replica!.id, url: replica!.url }], security: { allowedOrigins: [APP] } });
  const evil = 'https://evil.example';
  const answers = [
    await preflight(gw.url, evil, 'POST', 'content-type, mcp-session-id'),
    await post(gw.url, toolCallBody('whoami'), { origin: evil }),
    await fetch(gw.url, { headers: { origin: evil, accept: MCP_ACCEPT } }),
    // Origins match exactly: scheme, host and port.
    await post(gw.url, toolCallBody('whoami'), { origin: `${APP}:8443` }),
  ];
  for (const [i, response] of answers.entries()) {
    t.equal(response.status, 403, `answer ${i + 1}: 403`);
    t.equal(response.headers.get('access-control-allow-origin'), null, `answer ${i + 1}: no origin granted`);
    t.match(JSON.parse(await response.text()), { jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Origin not allowed' } });
  }
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: replica!.id }), 0, 'nothing reached the replica');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { status: '403', replica: 'none' }), 4, 'each counted');
});

t.test('with no origin listed nothing is granted, and a preflight still never reaches a replica', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, { replicas: [{ id: replica!.id, url: replica!.url }] });
  const answer = await preflight(gw.url, APP, 'POST', 'content-type');
  t.equal(answer.status, 204, 'answered by the gateway');
  t.equal(answer.headers.get('access-control-allow-origin'), null, 'no origin granted');
  t.equal(answer.headers.get('access-control-allow-methods'), null, 'no method granted');
  await answer.text();
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: replica!.id }), 0, 'the preflight reached no replica');

  const sessionId = await rawSession(gw.url);
  const call = await post(gw.url, toolCallBody('whoami'), { origin: APP, 'mcp-session-id': sessionId });
  t.equal(call.status, 200, 'a request with an Origin passes (R6 checks nothing when the list is unset)');
  t.equal(call.headers.get('access-control-allow-origin'), null, 'but grants no browser access');
  t.match(await call.text(), new RegExp(replica!.id));
});
