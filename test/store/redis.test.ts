import { createRequire } from 'node:module';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import t, { type Test } from 'tap';
import { createRedisStore, epochsKey, sessionKey } from '../../src/store/redis.js';
import type { Store } from '../../src/store/types.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { operations, storeContract } from './contract.js';

// ioredis's own slot function (a dependency of ioredis, without types of its own).
const calculateSlot = createRequire(import.meta.url)('cluster-key-slot') as (key: string) => number;

const KEY_PREFIX = 'gwtest';
const CONNECT_TIMEOUT_MS = 500;
const COMMAND_TIMEOUT_MS = 250;
/** Bounds waits for recovery; these are limits on failure, not expected durations. */
const RECOVERY_DEADLINE_MS = 5_000;
const POLL_INTERVAL_MS = 20;

function makeStore(server: RedisServer, onError?: (err: Error) => void): Store {
  return createRedisStore({
    url: server.url,
    keyPrefix: KEY_PREFIX,
    connectTimeoutMs: CONNECT_TIMEOUT_MS,
    commandTimeoutMs: COMMAND_TIMEOUT_MS,
    onError,
  });
}

/** A plain client to look at what the store wrote, closed on teardown. */
function inspector(t: Test, server: RedisServer): Redis {
  const redis = new Redis(server.url);
  t.teardown(() => redis.quit());
  return redis;
}

/** Polls `check` until it resolves true, failing the test after RECOVERY_DEADLINE_MS. */
async function eventually(t: Test, what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + RECOVERY_DEADLINE_MS;
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return;
    await delay(POLL_INTERVAL_MS);
  }
  t.fail(`${what}: not within ${RECOVERY_DEADLINE_MS} ms`);
}

async function elapsedMs(fn: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await fn();
  return performance.now() - start;
}

const server = await startRedisServer(t);

storeContract(t, 'redis', async () => {
  await server.flushall();
  const stores = [makeStore(server)];
  return {
    store: stores[0]!,
    peer: async () => {
      const peer = makeStore(server);
      stores.push(peer);
      return peer;
    },
    shortTtlMs: 200,
    tick: () => delay(20),
    now: Date.now,
    close: async () => {
      await Promise.all(stores.map((s) => s.close()));
    },
  };
});

t.test('redis: PTTL follows idleTtlMs on bind and touch, and tombstoneTtlMs on end', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  const key = sessionKey(KEY_PREFIX, 's1');
  await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 10_000);
  t.ok(within(await redis.pttl(key), 9_000, 10_000), 'bind sets the idle TTL');
  await store.touchSession('s1', 50_000);
  t.ok(within(await redis.pttl(key), 49_000, 50_000), 'touch resets it');
  await store.endSession('s1', 'terminated', 3_000);
  t.ok(within(await redis.pttl(key), 2_000, 3_000), 'end sets the tombstone TTL');
  await store.touchSession('s1', 50_000);
  t.ok(within(await redis.pttl(key), 2_000, 3_000), 'touching a tombstone leaves its TTL');
  t.same(await redis.hgetall(key), {
    sessionId: 's1',
    owner: 'r1',
    ownerEpoch: 'e1',
    state: 'terminated',
    createdAt: (await redis.hget(key, 'createdAt')) ?? 'missing',
  });
});

t.test('redis: keys carry a hash tag made from a digest of the id, one cluster slot per session', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  const ids = ['{a}b', '{a}c', '}{', 'plain', 'ünïcødé 🚀', 'x'.repeat(1024)];
  for (const id of ids) await store.bindSession({ sessionId: id, owner: 'r1', ownerEpoch: 'e1' }, 60_000);
  await store.retireReplicaEpoch('r1', '', 'e2');

  const expected = [...ids.map((id) => sessionKey(KEY_PREFIX, id)), epochsKey(KEY_PREFIX)].sort();
  t.same((await redis.keys('*')).sort(), expected, 'the store wrote exactly these keys');
  for (const id of ids) {
    const key = sessionKey(KEY_PREFIX, id);
    const tag = /^[^{}]*\{([A-Za-z0-9_-]+)\}[^{}]*$/.exec(key)?.[1];
    t.ok(tag !== undefined, `one brace-free hash tag in the key of ${id.slice(0, 20)}`);
    t.equal(calculateSlot(key), calculateSlot(tag ?? ''), 'the slot is the tag\'s');
    t.equal(await redis.hget(key, 'sessionId'), id, 'the record keeps the raw id');
  }
  t.not(
    calculateSlot(sessionKey(KEY_PREFIX, '{a}b')),
    calculateSlot(sessionKey(KEY_PREFIX, '{a}c')),
    'braces in an id do not pick the slot',
  );
  t.equal(calculateSlot(epochsKey(KEY_PREFIX)), calculateSlot('fleet'));
});

t.test('redis: a key prefix with braces is refused', async (t) => {
  t.throws(
    () => createRedisStore({ url: server.url, keyPrefix: 'gw{x}', connectTimeoutMs: 100, commandTimeoutMs: 100 }),
    { code: 'GW_CONFIG_INVALID' },
  );
});

t.test('redis: the first command after creation waits for the connection', async (t) => {
  const store = makeStore(server);
  t.teardown(() => store.close());
  await t.resolves(store.ping());
  await t.resolves(makeStore(server).close(), 'closing a store that never connected');
});

t.test('redis: scripts flushed from Redis are loaded again (EVALSHA NOSCRIPT fallback)', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 60_000);
  await store.touchSession('s1', 60_000);
  await redis.script('FLUSH');
  t.equal(await cachedScripts(redis), 0, 'script cache empty, the store\'s connection still open');
  t.match(await store.touchSession('s1', 60_000), { owner: 'r1' });
  t.equal(await cachedScripts(redis), 1, 'the touch script was loaded again');
});

t.test('redis: faults', async (t) => {
  // Each fault gets its own server, so the contract tests above never see one.
  t.test('stopped: every operation rejects at once, and service comes back by itself', async (t) => {
    const own = await startRedisServer(t);
    const errors: Error[] = [];
    const store = makeStore(own, (err) => errors.push(err));
    t.teardown(() => store.close());
    t.equal(await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 60_000), true);

    await own.stop();
    for (const [op, call] of operations(store)) {
      const ms = await elapsedMs(() => t.rejects(call(), { name: 'StoreError', code: 'GW_STORE_UNAVAILABLE', op }, op));
      t.ok(ms < 1_000, `${op} failed in ${ms.toFixed(0)} ms`);
      t.ok(ms < COMMAND_TIMEOUT_MS, `${op} was not queued until the command timeout`);
    }
    await eventually(t, 'client errors reported to onError', async () => errors.length > 0);

    await own.restart({ keepData: false });
    await eventually(t, 'ping succeeds after restart', async () => (await store.ping(), true));
    t.equal(await store.touchSession('s1', 60_000), null, 'a restart that lost the data loses the session');
    t.equal(await store.bindSession({ sessionId: 's2', owner: 'r1', ownerEpoch: 'e1' }, 60_000), true);
  });

  t.test('restarted with its data: sessions are still there', async (t) => {
    const own = await startRedisServer(t);
    const store = makeStore(own);
    t.teardown(() => store.close());
    await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 60_000);
    await store.retireReplicaEpoch('r1', '', 'e2');
    await own.restart({ keepData: true });
    // The new process has an empty script cache.
    await eventually(t, 'touch succeeds after restart', async () => (await store.touchSession('s1', 60_000)) !== null);
    t.match(await store.touchSession('s1', 60_000), { owner: 'r1', state: 'active' });
    t.equal(await store.retireReplicaEpoch('r1', 'e2', 'e3'), 'e3');
  });

  t.test('paused: operations reject within the command timeout, then work again', async (t) => {
    const own = await startRedisServer(t);
    const store = makeStore(own);
    t.teardown(() => store.close());
    t.teardown(() => own.resume());
    await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 60_000);

    own.pause();
    for (const [op, call] of operations(store)) {
      const ms = await elapsedMs(() => t.rejects(call(), { name: 'StoreError', code: 'GW_STORE_UNAVAILABLE', op }, op));
      t.ok(ms < COMMAND_TIMEOUT_MS + 250, `${op} failed in ${ms.toFixed(0)} ms`);
    }
    own.resume();
    await eventually(t, 'ping succeeds after resume', async () => (await store.ping(), true));
    t.match(await store.touchSession('s1', 60_000), { owner: 'r1', state: 'active' });
  });
});

function within(value: number, min: number, max: number): boolean {
  return value >= min && value <= max;
}

async function cachedScripts(redis: Redis): Promise<number> {
  const info = await redis.info('memory');
  return Number(/number_of_cached_scripts:(\d+)/.exec(info)?.[1]);
}
