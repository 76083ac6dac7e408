/**
 * A socket's second error is not an uncaught exception (src/store/redis/socket-errors.ts): a TLS
 * socket torn down by a refused handshake can emit two, and ioredis listens for the first only.
 * The client passes the later one to its own 'error' event, and serves again once reconnected.
 */

import { once } from 'node:events';
import { PassThrough, type Duplex } from 'node:stream';
import type { Cluster, Redis } from 'ioredis';
import t from 'tap';
import { connect } from '../../src/store/redis/connection.js';
import { GuardedSentinelConnector, GuardedStandaloneConnector, keepListening } from '../../src/store/redis/socket-errors.js';
import { startRedisServer } from '../helpers/redis-server.js';

const TIMEOUTS = { connectTimeoutMs: 1_000, commandTimeoutMs: 1_000 };

t.test('keepListening: the first error is left to its owner, each later one is passed on', async (t) => {
  const passed: string[] = [];
  const stream = keepListening(new PassThrough(), (type, err) => passed.push(`${type}: ${err.message}`));
  stream.once('error', () => undefined);
  stream.emit('error', new Error('handshake refused'));
  t.doesNotThrow(() => stream.emit('error', new Error('tlsv1 alert decode error')), 'no uncaught second error');
  stream.emit('error', new Error('third'));
  t.strictSame(passed, ['error: tlsv1 alert decode error', 'error: third']);
});

t.test("a client's socket that errs twice: the second reaches the client's 'error', and it serves again", async (t) => {
  const server = await startRedisServer(t);
  const client = connect({ url: server.url, ...TIMEOUTS }) as Redis;
  t.teardown(() => client.disconnect());
  const errors: string[] = [];
  client.on('error', (err: Error) => errors.push(err.message));
  await once(client, 'ready');
  const socket = (client as unknown as { stream: Duplex }).stream;
  socket.emit('error', new Error('first'));
  t.doesNotThrow(() => socket.emit('error', new Error('second')), 'no uncaught exception');
  t.ok(errors.includes('second'), `the second error is the client's (${errors.join(', ')})`);
  // As a socket that failed is: closed, and the client reconnects.
  const ready = once(client, 'ready');
  socket.destroy();
  await ready;
  t.equal(await client.ping(), 'PONG', 'reconnected and serving');
});

t.test('every topology opens its sockets through a guarded connector', async (t) => {
  const cluster = connect({ url: 'redis://127.0.0.1:1', cluster: { nodes: ['redis://127.0.0.1:1'] }, ...TIMEOUTS }) as Cluster;
  cluster.on('error', () => undefined);
  t.teardown(() => cluster.disconnect());
  t.equal(cluster.options.redisOptions?.Connector, GuardedStandaloneConnector, "a Cluster's nodes");

  const sentinel = connect({ url: 'redis://127.0.0.1:1', sentinel: { nodes: ['redis://127.0.0.1:1'], name: 'gw' }, ...TIMEOUTS }) as Redis;
  sentinel.on('error', () => undefined);
  t.teardown(() => sentinel.disconnect());
  t.ok(Object.prototype.isPrototypeOf.call(GuardedSentinelConnector.prototype, sentinel.options.Connector?.prototype), 'a master through Sentinel');
  t.equal((sentinel as unknown as { connector: { emitter: unknown } }).connector.emitter, sentinel, "the Sentinel connector still reports to its client");
});
