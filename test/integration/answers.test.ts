/**
 * The gateway's own answers on the wire: status, body, the stable code in `Mcp-Gateway-Error`
 * and, where CONTRACT.md does not fix the body, in `error.data.code` (errors.ts, answers.ts).
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import t, { type Test } from 'tap';
import { metricValue, startGateway } from '../helpers/gateway.js';
import { initializeBody, post, refusingPort, SESSION_NOT_FOUND, toolCallBody } from '../helpers/http.js';
import { openSocket, rawStatus, readUntilClosed } from '../helpers/raw-socket.js';
import { startScriptedUpstream } from '../helpers/sse-upstream.js';
import { bound, waitFor } from '../helpers/wait.js';

interface ErrorBody {
  jsonrpc: string;
  id: null;
  error: { code: number; message: string; data?: { code?: string } };
}

async function expectAnswer(t: Test, response: Response, status: number, code: string, rpc: number): Promise<ErrorBody> {
  t.equal(response.status, status, `${code}: status`);
  t.equal(response.headers.get('mcp-gateway-error'), code, `${code}: header`);
  const body = (await response.json()) as ErrorBody;
  t.equal(body.error.code, rpc, `${code}: JSON-RPC code`);
  return body;
}

t.test('404 Session not found keeps its exact body; the code is in the header', async (t) => {
  const upstream = await startScriptedUpstream(t);
  const gw = await startGateway(t, { replicas: [{ id: 'r1', url: upstream.url }] });
  const response = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': 'no-such-session' });
  t.equal(response.status, 404);
  t.equal(response.headers.get('mcp-gateway-error'), 'GW_SESSION_NOT_FOUND');
  t.equal(await response.text(), SESSION_NOT_FOUND);
});

t.test('410 of reject mode keeps its exact body; the code is in the header', async (t) => {
  const upstream = await startScriptedUpstream(t);
  const gw = await startGateway(t, { replicas: [{ id: 'r1', url: upstream.url }], resumption: { mode: 'reject' } });
  const init = await post(gw.url, initializeBody());
  await init.text();
  const sessionId = init.headers.get('mcp-session-id') ?? '';
  const response = await fetch(gw.url, { headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream', 'last-event-id': 'not-a-cursor' } });
  t.equal(response.status, 410);
  t.equal(response.headers.get('mcp-gateway-error'), 'GW_NOT_RESUMABLE');
  t.equal(
    await response.text(),
    '{"jsonrpc":"2.0","id":null,"error":{"code":-32010,"message":"Last-Event-ID cannot be resumed; reconnect without it","data":{"resumed":false,"reason":"foreign_cursor"}}}',
  );
});

t.test('403, 413 and 503 carry their code in error.data', async (t) => {
  const port = await refusingPort();
  const gw = await startGateway(t, {
    replicas: [{ id: 'r1', url: `http://127.0.0.1:${port}/mcp` }],
    security: { allowedOrigins: ['https://ok.example'] },
    limits: { bodyBytes: 1024 },
  });

  const forbidden = await post(gw.url, initializeBody(), { origin: 'https://evil.example' });
  t.strictSame(await expectAnswer(t, forbidden, 403, 'GW_ORIGIN_FORBIDDEN', -32000), {
    jsonrpc: '2.0',
    id: null,
    error: { code: -32000, message: 'Origin not allowed', data: { code: 'GW_ORIGIN_FORBIDDEN' } },
  });

  const large = await post(gw.url, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping', params: { pad: 'x'.repeat(2048) } }));
  t.match(await expectAnswer(t, large, 413, 'GW_BODY_TOO_LARGE', -32600), { error: { data: { code: 'GW_BODY_TOO_LARGE' } } });

  // The only replica refuses: no replica takes the new session.
  const none = await post(gw.url, initializeBody());
  t.equal(none.headers.get('retry-after'), String(gw.config.upstream.retryAfterSeconds), 'Retry-After');
  t.match(await expectAnswer(t, none, 503, 'GW_NO_REPLICA', -32000), { error: { message: 'Service temporarily unavailable: no replica is up', data: { code: 'GW_NO_REPLICA' } } });
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: 'none' }), 3, 'each counted as answered by the gateway');
});

t.test('a replica that fails after the request reached it: 503 GW_UPSTREAM_FAILED, never retried', async (t) => {
  let sessionRequests = 0;
  const server = createServer((req, res) => {
    req.resume();
    if (req.headers['mcp-session-id'] === undefined) {
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'failing-session' });
      res.end('{"jsonrpc":"2.0","id":1,"result":{}}');
      return;
    }
    sessionRequests++;
    // The request arrived; the replica breaks before answering.
    req.socket.destroy();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  const gw = await startGateway(t, { replicas: [{ id: 'r1', url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp` }] });
  const init = await post(gw.url, initializeBody());
  await init.text();
  const failed = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': 'failing-session' });
  t.match(await expectAnswer(t, failed, 503, 'GW_UPSTREAM_FAILED', -32000), {
    error: { message: 'Service temporarily unavailable: replica r1 did not answer', data: { code: 'GW_UPSTREAM_FAILED' } },
  });
  t.equal(sessionRequests, 1, 'sent once');
});

t.test("a method and path no route serves: 404 GW_NOT_FOUND on both listeners, fastify's own answer no more", async (t) => {
  const gw = await startGateway(t, { replicas: [{ id: 'r1', url: `http://127.0.0.1:${await refusingPort()}/mcp` }] });
  const mcp = await post(new URL('/elsewhere', gw.url).toString(), initializeBody());
  t.strictSame(await expectAnswer(t, mcp, 404, 'GW_NOT_FOUND', -32000), {
    jsonrpc: '2.0',
    id: null,
    error: { code: -32000, message: 'Not found: nothing is served at this method and path', data: { code: 'GW_NOT_FOUND' } },
  });
  const admin = await fetch(`${gw.adminUrl}/nothing-here`);
  t.match(await expectAnswer(t, admin, 404, 'GW_NOT_FOUND', -32000), { error: { data: { code: 'GW_NOT_FOUND' } } });
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { status: '404', replica: 'none' }), 1, "counted on the MCP listener, not the admin listener's");
});

/** The sockets a listener accepted, to see when it has read what a client sent. */
function accepted(server: Server): Set<Socket> {
  const sockets = new Set<Socket>();
  server.on('connection', (socket: Socket) => sockets.add(socket));
  return sockets;
}

/** A request's head sent all but its last line; `finish` sends that and reads the answer until closed. */
async function halfSent(url: string, path: string, sockets: Set<Socket>): Promise<{ finish(): Promise<string> }> {
  const socket = await openSocket(url);
  const answer = readUntilClosed(socket);
  socket.write(`GET ${path} HTTP/1.1\r\nHost: gateway\r\n`);
  // Read by the listener: a connection that began a request is not closed as idle when it closes.
  await waitFor('the listener read the request begun', bound(0), () => [...sockets].some((s) => s.bytesRead > 0));
  return {
    finish() {
      socket.write('\r\n');
      return answer;
    },
  };
}

/** Resolves once nothing accepts connections at `url`. */
async function refusing(what: string, url: string): Promise<void> {
  await waitFor(what, bound(0), () =>
    openSocket(url).then(
      (socket) => {
        socket.destroy();
        return false;
      },
      () => true,
    ),
  );
}

/** A raw answer's status, lower-cased headers and body. */
function parseRaw(raw: string): { status: number; headers: Record<string, string>; body: string } {
  const [head = '', body = ''] = raw.split('\r\n\r\n', 2);
  const headers = Object.fromEntries(
    head
      .split('\r\n')
      .slice(1)
      .map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]),
  );
  return { status: rawStatus(raw), headers, body };
}

t.test('a request on an open connection while the listeners close: 503 GW_SHUTTING_DOWN, on both', async (t) => {
  const gw = await startGateway(t, {
    replicas: [{ id: 'r1', url: `http://127.0.0.1:${await refusingPort()}/mcp` }],
    limits: { headersTimeoutMs: 60_000 },
    shutdown: { graceMs: 60_000 },
  });
  const mcp = await halfSent(gw.url, new URL(gw.url).pathname, accepted(gw.gateway.mcp.server));
  const admin = await halfSent(gw.adminUrl, '/healthz', accepted(gw.gateway.admin.server));
  const closed = gw.close();

  // Closing: no new connection, and the one open gets its request answered so.
  await refusing('the MCP listener closed', gw.url);
  for (const [listener, half] of [['MCP', mcp], ['admin', admin]] as const) {
    if (listener === 'admin') await refusing('the admin listener closed', gw.adminUrl);
    const answer = parseRaw(await half.finish());
    t.equal(answer.status, 503, `${listener}: 503`);
    t.equal(answer.headers['mcp-gateway-error'], 'GW_SHUTTING_DOWN', `${listener}: the code in the header`);
    t.equal(answer.headers['retry-after'], String(gw.config.upstream.retryAfterSeconds), `${listener}: Retry-After`);
    t.equal(answer.headers['connection'], 'close', `${listener}: the connection closed`);
    t.strictSame(JSON.parse(answer.body), {
      jsonrpc: '2.0',
      id: null,
      error: { code: -32000, message: 'Service temporarily unavailable: the gateway is shutting down', data: { code: 'GW_SHUTTING_DOWN' } },
    }, `${listener}: the body`);
  }
  await closed;
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { status: '503', replica: 'none' }), 1, 'the MCP one counted');
});
