/**
 * CONTRACT.md §7: open streams never starve a replica's other traffic. A gateway in front of one
 * SDK replica (its default: no event log, one GET stream per session), on either store:
 * - streams up to upstream.maxStreams open; the next is 503 GW_STREAM_BUDGET with Retry-After at
 *   once, counted, shown in /readyz, while a tools/call and an initialize are answered;
 * - clients that leave leave held streams; new GETs take their places (hold expiries of reason
 *   budget), and the returning clients are answered at once, served or refused;
 * - once the clients are gone and the holds are over, the replica holds no stream connection;
 * - at the default budget, more streams than upstream.connections open and the rest is answered;
 * - a GET whose client leaves before the replica answered is cancelled and not held.
 */
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage } from 'node:http';
import t, { type Test } from 'tap';
import { metricValue, startGateway, type RunningGateway } from '../helpers/gateway.js';
import { initializeBody, listenOnLoopback, post, rawSession, toolCallBody } from '../helpers/http.js';
import { mapLimit } from '../helpers/load.js';
import { rawStreams, type RawStream } from '../helpers/raw-sse.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplica, type ReplicaProcess } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';

const BUDGET = 8;
const HOLD_MS = 60_000;

t.setTimeout(300_000);

/** Established TCP connections whose local end is `port` (the replica's side), from /proc/net/tcp. */
async function establishedTo(port: number): Promise<number> {
  const hex = port.toString(16).toUpperCase().padStart(4, '0');
  let count = 0;
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    const text = await readFile(file, 'utf8').catch(() => '');
    for (const line of text.split('\n').slice(1)) {
      const [, local, , state] = line.trim().split(/\s+/);
      if (local?.endsWith(`:${hex}`) && state === '01') count++;
    }
  }
  return count;
}

async function emit(url: string, sessionId: string, id: number): Promise<void> {
  const response = await post(url, toolCallBody('emit', { count: 1, intervalMs: 1 }, id), { 'mcp-session-id': sessionId });
  const body = await response.text();
  if (response.status !== 200) throw new Error(`emit answered ${response.status}: ${body.slice(0, 200)}`);
}

async function gateway(t: Test, store: 'memory' | 'redis', replica: ReplicaProcess, extra: Record<string, unknown> = {}): Promise<RunningGateway> {
  const storeConfig = store === 'memory' ? { type: 'memory' } : { type: 'redis', url: (await startRedisServer(t)).url };
  return startGateway(t, {
    store: storeConfig,
    replicas: [{ id: replica.id, url: replica.url }],
    resumption: { journal: { holdMs: HOLD_MS } },
    ...extra,
  });
}

for (const store of ['memory', 'redis'] as const) {
  t.test(`${store} store: a replica at its stream budget still answers everything else; held streams give way; nothing waits`, async (t) => {
    const replica = await spawnReplica(t, { id: 'r1', eventStore: false });
    const gw = await gateway(t, store, replica, { upstream: { maxStreams: BUDGET } });
    const { open } = rawStreams(t);
    const sessions = await mapLimit(
      Array.from({ length: BUDGET + 6 }, (_, i) => i),
      4,
      () => rawSession(gw.url),
    );
    const streams: RawStream[] = [];
    for (const [i, sessionId] of sessions.slice(0, BUDGET).entries()) {
      const stream = await open(gw.url, sessionId);
      t.equal(stream.status, 200, `stream ${i + 1} opens`);
      streams.push(stream);
    }
    t.equal(await metricValue(gw.registry, 'mcp_gateway_upstream_streams', { replica: 'r1' }), BUDGET, 'the replica is at its budget');
    t.equal(await metricValue(gw.registry, 'mcp_gateway_upstream_stream_budget'), BUDGET);
    // One event on each stream, so that each client has a cursor to come back with.
    await mapLimit(sessions.slice(0, BUDGET), 4, (sessionId, i) => emit(gw.url, sessionId, 100 + i));
    await Promise.all(streams.map((s) => s.events.until(1)));

    const over = await open(gw.url, sessions[BUDGET]!);
    t.equal(over.status, 503, 'a stream over the budget is refused');
    t.ok(over.headers['retry-after'], 'with Retry-After');
    t.match(await over.text(), /GW_STREAM_BUDGET|as many SSE streams open as it may/, 'saying why');
    t.equal(await metricValue(gw.registry, 'mcp_gateway_stream_budget_exceeded_total', { replica: 'r1' }), 1, 'counted');
    const ready = await fetch(`${gw.adminUrl}/readyz`);
    const readyBody = (await ready.json()) as { warnings?: string[] };
    t.equal(ready.status, 200, 'the gateway stays ready');
    t.match(readyBody.warnings?.join('\n'), /replica r1 at its stream budget: 8 GET streams open/, '/readyz warns');

    // Everything else of the replica is answered meanwhile: a call of another session, a new session.
    const call = await post(gw.url, toolCallBody('whoami', {}, 7), { 'mcp-session-id': sessions[BUDGET]! });
    t.equal(call.status, 200, 'a tools/call of another session is answered');
    t.match(await call.text(), /r1/);
    const init = await post(gw.url, initializeBody());
    await init.text();
    t.equal(init.status, 200, 'an initialize is answered');
    t.equal(await metricValue(gw.registry, 'mcp_gateway_replica_up', { replica: 'r1' }), 1, 'the replica stays up');

    // Half the clients leave: their streams are held (J2), and give way to new GETs.
    const leaving = streams.slice(0, BUDGET / 2);
    const cursors = leaving.map((s) => s.events.items.at(-1)!.id!);
    for (const s of leaving) s.close();
    await waitFor('the left streams are held', bound(5_000), async () => (await metricValue(gw.registry, 'mcp_gateway_held_streams')) === BUDGET / 2);
    for (const sessionId of sessions.slice(BUDGET, BUDGET + BUDGET / 2)) {
      const taken = await open(gw.url, sessionId);
      t.equal(taken.status, 200, 'a new GET takes the place of a held stream');
    }
    t.equal(await metricValue(gw.registry, 'mcp_gateway_hold_expiries_total', { reason: 'budget' }), BUDGET / 2, 'each held stream let go for the budget');
    t.equal(await metricValue(gw.registry, 'mcp_gateway_upstream_streams', { replica: 'r1' }), BUDGET, 'within the budget');
    const stillOver = await open(gw.url, sessions[BUDGET + BUDGET / 2]!);
    t.equal(stillOver.status, 503, 'with every stream attached, the next is refused again');
    await stillOver.text();

    // The returning clients are answered at once: each resumption is decided and signalled, or refused.
    for (const [i, cursor] of cursors.entries()) {
      const back = await open(gw.url, sessions[i]!, cursor);
      t.ok(back.status === 200 || back.status === 503, `returning client ${i + 1} is answered (${back.status})`);
      if (back.status === 200) t.ok(back.headers['mcp-resumption'], 'with what became of its stream');
      back.close();
    }
    t.equal(replica.exit, undefined, 'the replica runs');
  });
}

t.test('once the clients left and the holds ended, the replica holds no stream connection', async (t) => {
  const replica = await spawnReplica(t, { id: 'r1', eventStore: false });
  const gw = await startGateway(t, {
    store: { type: 'memory' },
    replicas: [{ id: replica.id, url: replica.url }],
    resumption: { journal: { holdMs: 1000 } },
    upstream: { maxStreams: 40 },
  });
  const { open } = rawStreams(t);
  const sessions: string[] = [];
  // One request at a time: the request pool keeps a connection or two.
  for (let i = 0; i < 40; i++) sessions.push(await rawSession(gw.url));
  const streams = [];
  for (const sessionId of sessions) streams.push(await open(gw.url, sessionId));
  t.ok(streams.every((s) => s.status === 200), 'every stream opened');
  const during = await establishedTo(replica.port);
  t.ok(during >= 40, `the replica holds a connection per stream (${during})`);
  for (const s of streams) s.close();
  await waitFor('every hold ended', bound(5_000), async () => (await metricValue(gw.registry, 'mcp_gateway_hold_expiries_total', { reason: 'timeout' })) === 40);
  await waitFor('every stream gave its place back', bound(5_000), async () => (await metricValue(gw.registry, 'mcp_gateway_upstream_streams', { replica: 'r1' })) === 0);
  await waitFor('the stream connections closed', bound(5_000), async () => (await establishedTo(replica.port)) <= 4);
  t.comment(`replica connections: ${during} with 40 streams open, ${await establishedTo(replica.port)} after they ended`);
});

t.test('at the default budget, more streams than upstream.connections open, and the rest is answered', async (t) => {
  const replica = await spawnReplica(t, { id: 'r1', eventStore: false });
  const gw = await startGateway(t, { store: { type: 'memory' }, replicas: [{ id: replica.id, url: replica.url }] });
  t.equal(gw.config.upstream.maxStreams, 4096, 'the default budget');
  const count = gw.config.upstream.connections + 76;
  const { open } = rawStreams(t);
  const sessions = await mapLimit(
    Array.from({ length: count + 1 }, (_, i) => i),
    25,
    () => rawSession(gw.url),
  );
  const streams = await mapLimit(sessions.slice(0, count), 25, (sessionId) => open(gw.url, sessionId));
  t.equal(streams.filter((s) => s.status === 200).length, count, `all ${count} streams opened`);
  const call = await post(gw.url, toolCallBody('whoami', {}, 9), { 'mcp-session-id': sessions[count]! });
  t.equal(call.status, 200, 'a tools/call is answered beside them');
  await call.text();
  const init = await post(gw.url, initializeBody());
  await init.text();
  t.equal(init.status, 200, 'an initialize too');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_stream_budget_exceeded_total'), 0, 'none refused');
});

t.test('a GET whose client leaves before the replica answered is cancelled, and not held', async (t) => {
  // A replica that answers a GET only when told: the client leaves first.
  const gets: IncomingMessage[] = [];
  let getSeen: (() => void) | undefined;
  const server = createServer((req, res) => {
    if (req.method === 'POST') {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'slow-session' });
      res.end('{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"slow","version":"1"}}}');
      return;
    }
    gets.push(req);
    getSeen?.();
  });
  const port = await listenOnLoopback(t, server);
  const gw = await startGateway(t, { store: { type: 'memory' }, replicas: [{ id: 'slow', url: `http://127.0.0.1:${port}/mcp` }] });
  const init = await post(gw.url, initializeBody());
  await init.text();
  t.equal(init.status, 200);
  const raw = rawStreams(t);
  const seen = new Promise<void>((resolve) => (getSeen = resolve));
  const client = raw.open(gw.url, 'slow-session').catch((err: unknown) => err);
  await seen;
  const upstreamClosed = new Promise((resolve) => {
    gets[0]!.on('error', () => undefined);
    gets[0]!.once('close', resolve);
  });
  // The client leaves before any answer came.
  raw.closeAll();
  t.type(await client, Error, 'the client left with no answer');
  await upstreamClosed;
  t.pass("the gateway cancelled the replica's GET");
  t.equal(await metricValue(gw.registry, 'mcp_gateway_held_streams'), 0, 'nothing is held');
  await waitFor('its place is given back', bound(5_000), async () => (await metricValue(gw.registry, 'mcp_gateway_upstream_streams', { replica: 'slow' })) === 0);
});
