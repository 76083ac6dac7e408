/**
 * The agreed cursor secret (E2) on a real redis-server: offered again at every refresh, kept with
 * its codec while the store holds it, and replaced once the store holds another (it lost its data,
 * and another instance's candidate won).
 */
import t from 'tap';
import { newIncarnationId } from '../../src/cursor/codec.js';
import { CursorKeys } from '../../src/cursor/keys.js';
import { createLogger } from '../../src/logger.js';
import { createRedisStore } from '../../src/store/redis/index.js';
import { startRedisServer } from '../helpers/redis-server.js';

const SESSION = 'session-1';

t.test('a refresh keeps the codec while the store holds the secret, and adopts another one', async (t) => {
  const server = await startRedisServer(t);
  const store = createRedisStore({ url: server.url, keyPrefix: 'gw', connectTimeoutMs: 2000, commandTimeoutMs: 2000 });
  t.teardown(() => store.close());
  const told: string[] = [];
  const keys = new CursorKeys(undefined, store, createLogger('silent'), (secret) => told.push(secret));

  const first = await keys.codec();
  await keys.refresh();
  await keys.refresh();
  t.equal(await keys.codec(), first, 'the same secret keeps its codec');
  t.equal(told.length, 1, 'the agreed secret is told once, however often it is offered again');

  // The store loses its data, and another instance offers its candidate first.
  await server.flushall();
  const other = new CursorKeys(undefined, store, createLogger('silent'));
  const theirs = await other.codec();
  await keys.refresh();
  const adopted = await keys.codec();
  t.not(adopted, first, 'another secret in the store gives another codec');
  t.equal(told.length, 2, 'the new secret is told');
  t.not(told[1], told[0]);
  const cursor = theirs.encode(SESSION, { incarnation: newIncarnationId(), seq: 7 });
  t.equal(adopted.decode(cursor, SESSION).kind, 'ok', "the other instance's cursors are this one's now");
  t.equal(first.decode(cursor, SESSION).kind, 'foreign', 'and were foreign to the codec it had');
});
