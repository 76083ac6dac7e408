/**
 * Slow and silent clients: a request's header block must arrive within limits.headersTimeoutMs
 * (408 and closed otherwise), open client connections are bounded by limits.clientConnections
 * (closed at once above it), both counted in mcp_gateway_client_refused_total; an SSE stream is
 * never cut by either.
 */
import t from 'tap';
import { HEADERS_CHECK_INTERVAL_MS } from '../../src/clients/limits.js';
import { metricValue, startGateway } from '../helpers/gateway.js';
import { post, rawSession, toolCallBody } from '../helpers/http.js';
import { openSocket, rawStatus, readUntilClosed } from '../helpers/raw-socket.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { SseReader } from '../helpers/sse-upstream.js';
import { bound } from '../helpers/wait.js';

const HEADERS_TIMEOUT_MS = 1000;

async function within<T>(what: string, ms: number, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

t.test('silent and half-sent header blocks are closed after the bound; an SSE stream outlives it', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, { replicas: [{ id: replica!.id, url: replica!.url }], limits: { headersTimeoutMs: HEADERS_TIMEOUT_MS } });

  // An SSE stream opened before the slow clients, read after they were closed.
  const sessionId = await rawSession(gw.url);
  const reading = new AbortController();
  const response = await fetch(gw.url, { headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream' }, signal: reading.signal });
  t.equal(response.status, 200, 'the GET stream opened');
  const stream = new SseReader(response.body!);

  const path = new URL(gw.url).pathname;
  const silent = await Promise.all(Array.from({ length: 3 }, () => openSocket(gw.url)));
  const halfSent = await Promise.all(
    Array.from({ length: 3 }, async () => {
      const socket = await openSocket(gw.url);
      socket.write(`POST ${path} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n`);
      return socket;
    }),
  );
  const answers = await within(
    'slow clients closed',
    bound(HEADERS_TIMEOUT_MS + HEADERS_CHECK_INTERVAL_MS),
    Promise.all([...silent, ...halfSent].map((socket) => readUntilClosed(socket))),
  );
  t.same(answers.slice(3).map(rawStatus), [408, 408, 408], 'a half-sent header block gets 408 and is closed');
  t.ok(answers.slice(0, 3).every((a) => a === '' || rawStatus(a) === 408), 'a silent connection is closed');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_client_refused_total', { reason: 'headers_timeout' }), 6, 'each is counted');

  // The stream has been open longer than the bound: it still carries events.
  const emitted = await post(gw.url, toolCallBody('emit', { count: 1, intervalMs: 1 }), { 'mcp-session-id': sessionId });
  await emitted.text();
  t.match(await stream.next(), /^id: /m, 'the SSE stream still carries events');
  reading.abort();
});

t.test('connections over the limit are closed at once and counted; a freed slot is usable again', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, { replicas: [{ id: replica!.id, url: replica!.url }], limits: { clientConnections: 2, headersTimeoutMs: 60_000 } });
  const held = [await openSocket(gw.url), await openSocket(gw.url)];
  const over = await openSocket(gw.url);
  t.equal(await readUntilClosed(over), '', 'the third connection is closed without an answer');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_client_refused_total', { reason: 'connection_limit' }), 1, 'and counted');

  const closed = readUntilClosed(held[0]!);
  held[0]!.destroy();
  await closed;
  const later = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': 'unknown', connection: 'close' });
  t.equal(later.status, 404, 'a connection in the freed slot is served');
  await later.text();
  held[1]!.destroy();
});
