import t from 'tap';
import { createRedisStore } from '../../src/store/redis/index.js';
import { sessionKey } from '../../src/store/redis/keys.js';
import type { Store } from '../../src/store/types.js';
import { startBalancer } from '../helpers/balancer.js';
import { command } from '../helpers/redis-process.js';
import { startRedisSentinel, type RedisSentinel } from '../helpers/redis-sentinel.js';
import { bound, storeAnswers, waitFor } from '../helpers/wait.js';
import { CONTRACT_JOBS, redisHarness, storeContract } from './contract.js';

const KEY_PREFIX = 'gwtest';
const CONNECT_TIMEOUT_MS = 500;
const COMMAND_TIMEOUT_MS = 250;
/**
 * The contract is about what the store does, not how fast: its stores get timeouts far above an
 * event-loop stall of a loaded machine (a new connection's first command waits for it to be ready
 * for up to one command timeout). The fault tests below keep the short ones they measure against.
 */
const CONTRACT_TIMEOUT_MS = 5_000;
/**
 * An operation waits for a connection attempt in flight (one command timeout), then runs (another);
 * what is more is a hang, with room for a loaded machine.
 */
const FAIL_FAST_MS = bound(2 * COMMAND_TIMEOUT_MS);
/**
 * How long the client waits on a sentinel that does not answer (its command timeout): longer than a
 * failover takes, so that the new master is announced while it waits.
 */
const SILENT_SENTINEL_WAIT_MS = 6_000;
/** Bounds the wait for service after a failover; a limit on failure, not an expected duration. */
const RECOVERY_DEADLINE_MS = bound(20_000);

function makeStore(setup: RedisSentinel, timeoutMs?: number, keyPrefix = KEY_PREFIX): Store {
  return createRedisStore({
    // Only the master's credentials would come from here; the sentinels give its address.
    url: 'redis://unused.invalid:6379',
    sentinel: { nodes: setup.sentinelUrls, name: setup.name },
    keyPrefix,
    connectTimeoutMs: timeoutMs ?? CONNECT_TIMEOUT_MS,
    commandTimeoutMs: timeoutMs ?? COMMAND_TIMEOUT_MS,
  });
}

const setup = await startRedisSentinel(t);

storeContract(t, 'redis sentinel', redisHarness((keyPrefix) => makeStore(setup, CONTRACT_TIMEOUT_MS, keyPrefix)), { jobs: CONTRACT_JOBS });

t.test('redis sentinel: a forced failover fails operations fast, then service resumes on the new master with the data', async (t) => {
  await setup.flushall();
  const store = makeStore(setup);
  t.teardown(() => store.close());
  t.equal(await store.bindSession({ sessionId: 'before', owner: 'r1', ownerEpoch: 'e1' }, 600_000), true);
  t.equal(await store.retireReplicaEpoch('r1', '', 'e2'), 'e2');
  t.equal(await store.agreeSecret('kept'), 'kept');
  await store.openIncarnation({ id: 'g1', sessionId: 'before', owner: 'r1', kind: 'get', supersede: true }, 600_000);
  t.equal(await store.recordEvents('before', 'g1', { attach: 1, fromSeq: 1, upstreamIds: ['u1'], responded: [] }, 100, 600_000), 'ok');

  const oldMaster = await setup.failover();
  const started = performance.now();
  let settled = false;
  const newMaster = setup.failedOver(oldMaster).finally(() => {
    settled = true;
  });
  newMaster.catch(() => {});

  // Probe with one operation at a time, as a gateway under light load would, until the sentinels
  // agree on the new master and an operation has succeeded after that.
  const failures: number[] = [];
  let slowest = 0;
  let probes = 0;
  let firstFailure: number | undefined;
  let lastFailure: number | undefined;
  let succeededAfter = false;
  await waitFor('service after the failover', RECOVERY_DEADLINE_MS, async () => {
    const agreed = settled;
    const begin = performance.now();
    const outcome = await store.touchSession('before', 600_000).then(
      (record) => (record?.owner === 'r1' ? 'ok' : `unexpected ${JSON.stringify(record)}`),
      (err: { name?: string; code?: string }) => `${err.name}/${err.code}`,
    );
    const ms = performance.now() - begin;
    probes++;
    slowest = Math.max(slowest, ms);
    if (ms >= FAIL_FAST_MS) t.fail(`an operation took ${ms.toFixed(0)} ms`);
    if (outcome === 'ok') {
      succeededAfter = agreed;
    } else {
      if (outcome !== 'StoreError/GW_STORE_UNAVAILABLE') t.fail(`an operation during the failover: ${outcome}`);
      firstFailure ??= begin - started;
      lastFailure = begin + ms - started;
      failures.push(ms);
    }
    return succeededAfter;
  }).catch(() => undefined);
  t.ok(succeededAfter, 'service resumed by itself');
  const master = await newMaster;
  t.not(master, oldMaster, 'the master moved');
  t.comment(
    `failover: sentinels agreed after ${((performance.now() - started) / 1000).toFixed(1)} s at most; ` +
      `${failures.length} of ${probes} operations failed` +
      (firstFailure === undefined ? '' : `, from ${firstFailure.toFixed(0)} ms to ${lastFailure?.toFixed(0)} ms`) +
      `; slowest operation ${slowest.toFixed(0)} ms`,
  );

  t.match(await store.touchSession('before', 600_000), { owner: 'r1', ownerEpoch: 'e1', state: 'active' }, 'the session written before is there');
  t.same(await store.replicaEpochs(), { r1: 'e2' });
  t.equal(await store.agreeSecret('other'), 'kept', 'so is the secret');
  t.match(await store.readIncarnation('before', 'g1', 0), { record: { head: 1 }, currentGet: 'g1', after: ['u1'] }, 'and the incarnation');
  t.match(
    await store.touchAndRead('before', 600_000, { incarnationId: 'g1', afterSeq: 1 }),
    { session: { owner: 'r1', state: 'active' }, view: { record: { head: 1 }, at: 'u1', after: [] } },
    'read together on the new master',
  );
  t.match(await store.attachIncarnation('before', 'g1', 600_000, 0), { attach: 2, view: { record: { attach: 2 }, after: ['u1'] } });
  t.equal(await store.bindSession({ sessionId: 'after', owner: 'r2', ownerEpoch: 'e1' }, 600_000), true);
  t.equal(await command(master, ['EXISTS', sessionKey(KEY_PREFIX, 'after')]), 1, 'writes go to the new master');
  const fresh = makeStore(setup);
  t.teardown(() => fresh.close());
  t.match(await fresh.touchSession('after', 600_000), { owner: 'r2' }, 'a new client finds the new master too');
});

t.test('redis sentinel: a master lost while the client waits on a sentinel that does not answer; the failover announced meanwhile does not end the client', async (t) => {
  // Last: the master is SIGKILLed, and nothing replaces the replica that takes over.
  // A sentinel whose host is gone accepts nothing or answers nothing: the client waits for it up
  // to the command timeout, long enough here that the new master is announced (+switch-master)
  // while it waits.
  const silent = await startBalancer(t, [setup.sentinelUrls[0]!]);
  silent.pause();
  const silentUrl = `redis://127.0.0.1:${new URL(silent.url).port}`;
  const store = createRedisStore({
    url: 'redis://unused.invalid:6379',
    // Asked last: the client reaches the master through the others first.
    sentinel: { nodes: [...setup.sentinelUrls, silentUrl], name: setup.name },
    keyPrefix: KEY_PREFIX,
    connectTimeoutMs: CONNECT_TIMEOUT_MS,
    commandTimeoutMs: SILENT_SENTINEL_WAIT_MS,
  });
  t.teardown(() => store.close());
  await storeAnswers(store);
  t.equal(await store.bindSession({ sessionId: 'kept', owner: 'r1', ownerEpoch: 'e1' }, 600_000), true);
  // An earlier failover made the old master a replica, which may still be syncing.
  const master0 = await setup.masterPort();
  const replica = setup.dataPorts.find((port) => port !== master0)!;
  await t.resolves(
    waitFor('the replica has the session', RECOVERY_DEADLINE_MS, async () => (await command(replica, ['EXISTS', sessionKey(KEY_PREFIX, 'kept')])) === 1),
    'the replica has the session',
  );

  // The client asks each sentinel in turn for the master, reaches only the dead one, and then
  // waits on the silent sentinel while the others fail over.
  const old = await setup.killMaster();
  t.equal(old, master0);
  const master = await setup.failedOver(old);
  t.not(master, old, 'the replica was promoted');
  await t.resolves(
    waitFor('service on the new master', bound(2 * SILENT_SENTINEL_WAIT_MS), async () => (await store.touchSession('kept', 600_000))?.owner === 'r1'),
    'the client reconnected to the new master by itself, and the session is there',
  );
});
