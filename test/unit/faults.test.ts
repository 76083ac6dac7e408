/**
 * src/upstream/faults.ts's table, cause by cause, on real sockets and undici's real errors: R1 hangs
 * on it (only a request that reached no replica may be tried on another), and so does a replica's
 * health (only what the replica did counts). A refused connection (nothing listens: the replica is
 * gone, R4) and a connect timeout (nothing answered the handshake) reached no one; a connection
 * reset after the request was sent, or a replica that never answers, may have run the request and
 * is never retried; a request the gateway's own client refuses to send is the gateway's.
 */
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import t, { type Test } from 'tap';
import type { ReplicaConfig } from '../../src/config/schema.js';
import { faultOf, isKnownFault } from '../../src/upstream/faults.js';
import { isRefused, UpstreamAbort, Upstreams } from '../../src/upstream/index.js';
import { refusingPort } from '../helpers/http.js';
import { jsonLine, readyLine, spawnProcess } from '../helpers/processes.js';

const CONNECT_TIMEOUT_MS = 300;
const HEADERS_TIMEOUT_MS = 300;

function upstreams(t: Test): Upstreams {
  const u = new Upstreams({ connectTimeoutMs: CONNECT_TIMEOUT_MS, headersTimeoutMs: HEADERS_TIMEOUT_MS, connections: 4, maxStreams: 4 });
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
  t.equal(faultOf(err), 'refused', 'nothing reached the replica: another one may be tried');
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
  t.equal(faultOf(err), 'unreachable', 'nothing was sent, another replica may be tried');
});

t.test('reset after the request was sent: it may have run, so it is not a connect failure', async (t) => {
  const port = await server(t, (socket) => {
    socket.once('data', () => socket.resetAndDestroy());
  });
  const err = await failure(t, post(upstreams(t), port));
  t.notOk(isRefused(err));
  t.equal(faultOf(err), 'replica', `never retried (${String((err as { code?: string }).code)})`);
});

t.test('closed after the request was sent, without an answer: not a connect failure either', async (t) => {
  const port = await server(t, (socket) => {
    socket.once('data', () => socket.end());
  });
  const err = await failure(t, post(upstreams(t), port));
  t.equal(faultOf(err), 'replica', `never retried (${String((err as { code?: string }).code)})`);
});

t.test('no response head within the headers timeout: not a connect failure', async (t) => {
  const port = await server(t, (socket) => socket.resume());
  const err = await failure(t, post(upstreams(t), port));
  t.match(err, { code: 'UND_ERR_HEADERS_TIMEOUT' });
  t.equal(faultOf(err), 'replica');
});

t.test('a request the gateway aborts is an abort, not the replica failing', async (t) => {
  const port = await server(t, (socket) => socket.resume());
  const abort = new UpstreamAbort();
  const pending = failure(t, post(upstreams(t), port, abort));
  abort.abort();
  const err = await pending;
  t.equal(faultOf(err), 'aborted');
});

/** Sends `headers` to a server that would answer, so that only the client's refusal can fail it. */
async function refusedHeaders(t: Test, headers: Record<string, string>): Promise<{ err: unknown; reached: number }> {
  let reached = 0;
  const port = await server(t, (socket) => {
    reached++;
    socket.end('HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n');
  });
  const err = await failure(t, upstreams(t).send(replicaAt(port), { method: 'POST', path: '/mcp', headers, body: Buffer.from('{}') }));
  return { err, reached };
}

for (const [name, headers, code] of [
  ['Expect', { expect: '100-continue' }, 'UND_ERR_NOT_SUPPORTED'],
  ['Transfer-Encoding', { 'transfer-encoding': 'chunked' }, 'UND_ERR_INVALID_ARG'],
  ['Upgrade', { upgrade: 'h2c' }, 'UND_ERR_INVALID_ARG'],
  ['Keep-Alive', { 'keep-alive': 'timeout=5' }, 'UND_ERR_INVALID_ARG'],
] as const) {
  t.test(`a request with ${name}, which the upstream client does not send: the gateway's fault`, async (t) => {
    const { err, reached } = await refusedHeaders(t, headers);
    t.match(err, { code });
    t.equal(faultOf(err), 'gateway');
    t.ok(isKnownFault(err));
    t.equal(reached, 0, 'no connection was even opened');
  });
}

t.test('an answer that is not HTTP: the replica misbehaved', async (t) => {
  const port = await server(t, (socket) => {
    socket.once('data', () => socket.end('SSH-2.0-OpenSSH_9.6\r\n\r\n'));
  });
  const err = await failure(t, post(upstreams(t), port));
  t.match(err, { name: 'HTTPParserError' });
  t.equal(faultOf(err), 'replica');
});

t.test('the gateway closing the pool under a request: the gateway, not the replica', async (t) => {
  const port = await server(t, (socket) => socket.resume());
  const u = upstreams(t);
  const pending = failure(t, post(u, port));
  await u.close();
  const err = await pending;
  t.match(err, { code: 'UND_ERR_DESTROYED' });
  t.equal(faultOf(err), 'gateway');
});

t.test('an error that names no known cause is not held against the replica', async (t) => {
  const unforeseen = new TypeError('something in the gateway');
  t.equal(faultOf(unforeseen), 'gateway');
  t.notOk(isKnownFault(unforeseen), 'and is marked unforeseen, for an error line');
  t.equal(faultOf(Object.assign(new Error('wrapped'), { cause: { code: 'ECONNRESET' } })), 'replica', 'a cause is looked into');
});
