/**
 * The agreed cursor secret (E2) on a real redis-server: offered again at every refresh, kept with
 * its codec while the store holds it, and replaced once the store holds another (it lost its data,
 * and another instance's candidate won). Configured keys as a reload changes them.
 */
import t from 'tap';
import { CursorCodec, newIncarnationId } from '../../src/cursor/codec.js';
import { CursorKeys } from '../../src/cursor/keys.js';
import { createLogger } from '../../src/logger.js';
import { createRedisStore } from '../../src/store/redis/index.js';
import { startRedisServer } from '../helpers/redis-server.js';

const SESSION = 'session-1';
const OLD = 'old-secret-0123456789abcdefghijklmnopqrstuvwxyz';
const NEW = 'new-secret-0123456789abcdefghijklmnopqrstuvwxyz';

t.test('a refresh keeps the codec while the store holds the secret, and adopts another one', async (t) => {
  const server = await startRedisServer(t);
  const store = createRedisStore({ url: server.url, keyPrefix: 'gw', connectTimeoutMs: 2000, commandTimeoutMs: 2000 });
  t.teardown(() => store.close());
  const told: string[] = [];
  const keys = new CursorKeys(undefined, store, createLogger('silent'), (secret) => told.push(secret));

  const first = await keys.codec();
  const mine = first.encode(SESSION, { incarnation: newIncarnationId(), seq: 3 });
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
  t.equal(adopted, first, 'the same codec, its keys changed in place (the streams open follow)');
  t.equal(told.length, 2, 'the new secret is told');
  t.not(told[1], told[0]);
  const cursor = theirs.encode(SESSION, { incarnation: newIncarnationId(), seq: 7 });
  t.equal(adopted.decode(cursor, SESSION).kind, 'ok', "the other instance's cursors are this one's now");
  t.equal(adopted.decode(mine, SESSION).kind, 'foreign', 'and those of the secret it had are foreign');
});

t.test('a reload changes the configured keys in place, and one without cursor.secret agrees through the store', async (t) => {
  const server = await startRedisServer(t);
  const store = createRedisStore({ url: server.url, keyPrefix: 'gw', connectTimeoutMs: 2000, commandTimeoutMs: 2000 });
  t.teardown(() => store.close());
  const told: string[] = [];
  const keys = new CursorKeys({ secret: OLD }, store, createLogger('silent'), (secret) => told.push(secret));
  const codec = await keys.codec();
  const incarnation = newIncarnationId();
  const issuer = codec.issuer(SESSION, incarnation);
  const signedOld = issuer.encode([1])[0]!;

  keys.reconfigure({ secret: OLD, previousSecrets: [NEW] });
  t.equal(await keys.codec(), codec, 'one codec throughout');
  t.equal(issuer.encode([2])[0], new CursorCodec(OLD).encode(SESSION, { incarnation, seq: 2 }), 'step 1: the old key still signs');
  t.equal(codec.decode(new CursorCodec(NEW).encode(SESSION, { incarnation, seq: 2 }), SESSION).kind, 'ok', 'and the new one verifies');

  keys.reconfigure({ secret: NEW, previousSecrets: [OLD] });
  t.equal(issuer.encode([3])[0], new CursorCodec(NEW).encode(SESSION, { incarnation, seq: 3 }), 'step 2: the new key signs, in the issuer open since before');
  t.strictSame(codec.decode(signedOld, SESSION), { kind: 'ok', fields: { incarnation, seq: 1 }, previous: 0 });

  keys.reconfigure({ secret: NEW });
  t.equal(codec.decode(signedOld, SESSION).kind, 'foreign', 'step 3: the old key no longer verifies');
  await keys.refresh();
  t.same(told, [], 'configured keys are never offered to the store');

  keys.reconfigure({});
  t.equal(codec.decode(issuer.encode([4])[0]!, SESSION).kind, 'ok', 'without cursor.secret the running key stays until the next refresh');
  await keys.refresh();
  t.equal(told.length, 1, 'which agrees on a secret through the store');
  t.equal(codec.decode(new CursorCodec(told[0]!).encode(SESSION, { incarnation, seq: 5 }), SESSION).kind, 'ok', 'and takes it');
  t.equal(codec.decode(signedOld, SESSION).kind, 'foreign');
});
