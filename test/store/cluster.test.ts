import t from 'tap';
import { createRedisStore } from '../../src/store/redis/index.js';
import type { Store } from '../../src/store/types.js';
import { command } from '../helpers/redis-process.js';
import { startRedisCluster, type RedisCluster } from '../helpers/redis-cluster.js';
import { bound } from '../helpers/wait.js';
import { CONTRACT_JOBS, operations, redisHarness, storeContract } from './contract.js';

const KEY_PREFIX = 'gwtest';
const CONNECT_TIMEOUT_MS = 500;
const COMMAND_TIMEOUT_MS = 250;
/**
 * The contract is about what the store does, not how fast: its stores get timeouts far above an
 * event-loop stall of a loaded machine (a new connection's first command waits for it to be ready
 * for up to one command timeout). The fault tests below keep the short ones they measure against.
 */
const CONTRACT_TIMEOUT_MS = 5_000;

function makeStore(cluster: RedisCluster, timeoutMs?: number, keyPrefix = KEY_PREFIX, autoPipelining = false): Store {
  return createRedisStore({
    url: 'redis://unused.invalid:6379',
    cluster: { nodes: cluster.urls },
    keyPrefix,
    connectTimeoutMs: timeoutMs ?? CONNECT_TIMEOUT_MS,
    commandTimeoutMs: timeoutMs ?? COMMAND_TIMEOUT_MS,
    autoPipelining,
  });
}

const cluster = await startRedisCluster(t);

storeContract(t, 'redis cluster', redisHarness((keyPrefix) => makeStore(cluster, CONTRACT_TIMEOUT_MS, keyPrefix)), { jobs: CONTRACT_JOBS });
// store.autoPipelining: batched per node by the cluster; the contract holds the same.
storeContract(t, 'redis cluster, auto-pipelined', redisHarness((keyPrefix) => makeStore(cluster, CONTRACT_TIMEOUT_MS, `${keyPrefix}p`, true)), { jobs: CONTRACT_JOBS });

t.test('redis cluster: sessions spread over every master, and every script runs on one of them', async (t) => {
  // A script whose keys were in two slots would fail with CROSSSLOT on the node it was sent to;
  // with sessions on every master, each script has run on each node.
  await cluster.flushall();
  const store = makeStore(cluster);
  t.teardown(() => store.close());
  for (let i = 0; i < 30; i++) {
    const sessionId = `s${i}`;
    t.equal(await store.bindSession({ sessionId, owner: 'r1', ownerEpoch: 'e1' }, 60_000), true);
    await store.openIncarnation({ id: 'g1', sessionId, owner: 'r1', kind: 'get', supersede: true }, 60_000);
    t.match(await store.attachIncarnation(sessionId, 'g1', 60_000, 0), { attach: 2, view: { record: { head: 0 }, currentGet: 'g1', at: null } });
    t.equal(await store.recordEvents(sessionId, 'g1', { attach: 2, fromSeq: 1, upstreamIds: ['u1'], responded: [] }, 100, 60_000), 'ok');
    await store.touchIncarnation(sessionId, 'g1', 60_000);
    t.match(await store.readIncarnation(sessionId, 'g1', 0), { record: { head: 1 }, currentGet: 'g1', after: ['u1'] });
    t.match(await store.touchAndRead(sessionId, 60_000, { incarnationId: 'g1', afterSeq: 0 }), {
      session: { sessionId, state: 'active' },
      view: { record: { head: 1 }, currentGet: 'g1', after: ['u1'] },
    });
    await store.closeIncarnation(sessionId, 'g1');
    t.match(await store.inspectSession(sessionId, 10), { session: { sessionId }, currentGet: 'g1', incarnations: [{ id: 'g1', state: 'closed' }] });
    await store.endSession(sessionId, 'terminated', 60_000);
  }
  t.equal(await store.retireReplicaEpoch('r1', '', 'e2'), 'e2');
  t.equal(await store.agreeSecret('s'), 's');
  const sizes = await Promise.all(cluster.ports.map((port) => command(port, ['DBSIZE'])));
  t.ok(sizes.every((n) => typeof n === 'number' && n > 0), `keys on every master: ${sizes.join(', ')}`);
  t.equal(sizes.reduce((a, b) => Number(a) + Number(b), 0), 30 * 4 + 2, 'four keys per session (record, index of incarnations, an incarnation and its positions), two fleet keys');
});

t.test('redis cluster: a master lost fails operations fast with StoreError, never a hang', async (t) => {
  // Last: the cluster does not come back (no replica takes over), so no test may run after this one.
  const store = makeStore(cluster);
  t.teardown(() => store.close());
  await store.ping();
  await cluster.kill(0);
  for (const [op, call] of operations(store)) {
    const start = performance.now();
    const outcome = await call().then(
      () => 'ok',
      (err: { name?: string; code?: string }) => `${err.name}/${err.code}`,
    );
    const ms = performance.now() - start;
    t.ok(['ok', 'StoreError/GW_STORE_UNAVAILABLE'].includes(outcome), `${op}: ${outcome}`);
    // Up to one command timeout waiting for a connection attempt in flight, then one for the command.
    t.ok(ms < bound(2 * COMMAND_TIMEOUT_MS), `${op} settled in ${ms.toFixed(0)} ms, not a hang`);
  }
});
