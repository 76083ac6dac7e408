/**
 * src/upstream.ts's reading of transport errors, on real sockets, since R1 hangs on it: only a
 * request that reached no replica may be tried on another. A refused connection (nothing listens:
 * the replica is gone, R4) and a connect timeout (nothing answered the handshake) reached no one;
 * a connection reset after the request was sent, or a replica that never answers, may have run
 * the request and is never retried.
 */
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import t, { type Test } from 'tap';
import type { ReplicaConfig } from '../../src/config/schema.js';
import { isAbort, isConnectFailure, isRefused, UpstreamAbort, Upstreams } from '../../src/upstream.js';
import { refusingPort } from '../helpers/http.js';
import { jsonLine, readyLine, spawnProcess } from '../helpers/processes.js';

const CONNECT_TIMEOUT_MS = 300;
const HEADERS_TIMEOUT_MS = 300;

function upstreams(t: Test): Upstreams {
  const u = new Upstreams({ connectTimeoutMs: CONNECT_TIMEOUT_MS, headersTimeoutMs: HEADERS_TIMEOUT_MS, connections: 4 });
  t.teardown(() => u.close());
  return u;
}

const replicaAt = (port: number) => ({ id: 'r1', url: `http://127.0.0.1:${port}/mcp` }) as ReplicaConfig;

const post = (u: Upstreams, port: number, signal?: UpstreamAbort) =>
  u.send(replicaAt(port), { method: 'POST', path: '/mcp', headers: { 'content-type': 'application/json' }, body: Buffer.from('{}'), signal });

/** The error `promise` rejects with; fails the test if it resolves. */
async function failure(t: Test, promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => t.fail('the request succeeded') as unknown,
    (err: unknown) => err,
  );
}

/** A server on loopback that does `onSocket` with each connection it accepts. */
async function server(t: Test, onSocket: (socket: Socket) => void): Promise<number> {
  const sockets = new Set<Socket>();
  const s = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    onSocket(socket);
  });
  s.listen(0, '127.0.0.1');
  await once(s, 'listening');
  t.teardown(() => {
    for (const socket of sockets) socket.destroy();
    s.close();
  });
  return (s.address() as { port: number }).port;
}

t.test('connection refused: nothing listens, and nothing reached the replica', async (t) => {
  const err = await failure(t, post(upstreams(t), await refusingPort()));
  t.ok(isRefused(err), 'refused');
  t.ok(isConnectFailure(err), 'a connect failure: another replica may be tried');
  t.notOk(isAbort(err));
});

t.test('connect timeout: something listens but never completes the handshake', async (t) => {
  // A process that listens with a backlog of one and then never accepts (its event loop is
  // blocked): once two handshakes fill its accept queue, the kernel drops further SYNs.
  const script =
    "const s = require('net').createServer(); s.listen({ port: 0, host: '127.0.0.1', backlog: 1 }, () => {" +
    ' console.log(JSON.stringify({ port: s.address().port }));' +
    ' Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0); });';
  const stuck = spawnProcess(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'], t });
  const port = await readyLine(stuck, 'the stuck listener', (line) => jsonLine(line)?.['port'] as number | undefined);
  const fillers: Socket[] = [];
  t.teardown(() => fillers.forEach((s) => s.destroy()));
  for (let i = 0; i < 2; i++) {
    const socket = connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    fillers.push(socket);
    await once(socket, 'connect');
  }
  const err = await failure(t, post(upstreams(t), port));
  t.match(err, { code: 'UND_ERR_CONNECT_TIMEOUT' });
  t.notOk(isRefused(err), 'not refused: the replica may be alive');
  t.ok(isConnectFailure(err), 'a connect failure: nothing was sent, another replica may be tried');
});

t.test('reset after the request was sent: it may have run, so it is not a connect failure', async (t) => {
  const port = await server(t, (socket) => {
    socket.once('data', () => socket.resetAndDestroy());
  });
  const err = await failure(t, post(upstreams(t), port));
  t.notOk(isRefused(err));
  t.notOk(isConnectFailure(err), `never retried (${String((err as { code?: string }).code)})`);
  t.notOk(isAbort(err));
});

t.test('closed after the request was sent, without an answer: not a connect failure either', async (t) => {
  const port = await server(t, (socket) => {
    socket.once('data', () => socket.end());
  });
  const err = await failure(t, post(upstreams(t), port));
  t.notOk(isConnectFailure(err), `never retried (${String((err as { code?: string }).code)})`);
});

t.test('no response head within the headers timeout: not a connect failure', async (t) => {
  const port = await server(t, (socket) => socket.resume());
  const err = await failure(t, post(upstreams(t), port));
  t.match(err, { code: 'UND_ERR_HEADERS_TIMEOUT' });
  t.notOk(isConnectFailure(err));
});

t.test('a request the gateway aborts is an abort, not the replica failing', async (t) => {
  const port = await server(t, (socket) => socket.resume());
  const abort = new UpstreamAbort();
  const pending = failure(t, post(upstreams(t), port, abort));
  abort.abort();
  const err = await pending;
  t.ok(isAbort(err));
  t.notOk(isConnectFailure(err));
});
