import { createRequire } from 'node:module';
import { Redis } from 'ioredis';
import t, { type Test } from 'tap';
import { createRedisStore } from '../../src/store/redis/index.js';
import { epochsKey, incarnationKey, incarnationsKey, journalKey, positionsKey, secretKey, sessionKey } from '../../src/store/redis/keys.js';
import { INCARNATIONS_LISTED, type JournalNote, type Store } from '../../src/store/types.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { JOURNAL_SLICE_BYTES } from '../../src/store/redis/scripts/journal.js';
import { JournalFrames } from '../../src/store/journal-frames.js';
import { cutFrames } from '../../src/store/redis/journal-cut.js';
import { defineScripts } from '../../src/store/redis/scripts/index.js';
import { bound, SLACK_MS, storeAnswers, waitFor } from '../helpers/wait.js';
import { CONTRACT_JOBS, operations, redisHarness, storeContract } from './contract.js';

// ioredis's own slot function (a dependency of ioredis, without types of its own).
const calculateSlot = createRequire(import.meta.url)('cluster-key-slot') as (key: string) => number;

const KEY_PREFIX = 'gwtest';
const CONNECT_TIMEOUT_MS = 500;
const COMMAND_TIMEOUT_MS = 250;
/**
 * For the test that an operation on a stopped Redis fails at once rather than waiting out the
 * command timeout: long enough that the two cannot be mistaken for each other on a loaded machine.
 */
const LONG_COMMAND_TIMEOUT_MS = 2 * SLACK_MS;
/** Bounds waits for recovery; these are limits on failure, not expected durations. */
const RECOVERY_DEADLINE_MS = bound(5_000);

function makeStore(server: RedisServer, onError?: (err: Error) => void, commandTimeoutMs = COMMAND_TIMEOUT_MS, keyPrefix = KEY_PREFIX, autoPipelining = false): Store {
  return createRedisStore({
    url: server.url,
    keyPrefix,
    connectTimeoutMs: CONNECT_TIMEOUT_MS,
    commandTimeoutMs,
    onError,
    autoPipelining,
  });
}

/** A plain client to look at what the store wrote, closed on teardown. */
function inspector(t: Test, server: RedisServer): Redis {
  const redis = new Redis(server.url);
  t.teardown(() => redis.quit());
  return redis;
}

/**
 * A store on `own` that answered once, for the cases that restart or cut its server: they measure
 * no timeout, so their commands get one far above an event-loop stall, and each waits for the
 * (re)connection before its first command.
 */
async function connectedStore(t: Test, own: RedisServer): Promise<Store> {
  const store = makeStore(own, undefined, LONG_COMMAND_TIMEOUT_MS);
  t.teardown(() => store.close());
  await storeAnswers(store);
  return store;
}

async function elapsedMs(fn: () => Promise<unknown>): Promise<number> {
  const start = performance.now();
  await fn();
  return performance.now() - start;
}

const server = await startRedisServer(t);

// The contract is about what the store does, not how fast: a timeout far above an event-loop stall.
storeContract(t, 'redis', redisHarness((keyPrefix) => makeStore(server, undefined, LONG_COMMAND_TIMEOUT_MS, keyPrefix)), { jobs: CONTRACT_JOBS });
// store.autoPipelining: the operations of one event-loop turn leave in one write; the contract holds the same.
storeContract(t, 'redis, auto-pipelined', redisHarness((keyPrefix) => makeStore(server, undefined, LONG_COMMAND_TIMEOUT_MS, `${keyPrefix}p`, true)), { jobs: CONTRACT_JOBS });

t.test('redis: PTTL follows idleTtlMs on bind and touch, and tombstoneTtlMs on end', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  const key = sessionKey(KEY_PREFIX, 's1');
  await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 100_000);
  t.ok(setTo(await redis.pttl(key), 100_000), 'bind sets the idle TTL');
  await store.touchSession('s1', 500_000);
  t.ok(setTo(await redis.pttl(key), 500_000), 'touch resets it');
  await store.touchAndRead('s1', 200_000, { incarnationId: 'g1', afterSeq: 0 });
  t.ok(setTo(await redis.pttl(key), 200_000), 'touchAndRead resets it');
  await store.touchAndRead('s1', 300_000);
  t.ok(setTo(await redis.pttl(key), 300_000), 'touchAndRead without read too');
  await store.endSession('s1', 'terminated', 30_000);
  t.ok(setTo(await redis.pttl(key), 30_000), 'end sets the tombstone TTL');
  await store.touchSession('s1', 500_000);
  await store.touchAndRead('s1', 500_000, { incarnationId: 'g1', afterSeq: 0 });
  await store.touchAndRead('s1', 500_000);
  t.ok(setTo(await redis.pttl(key), 30_000), 'touching a tombstone leaves its TTL');
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

t.test('redis: the batches of one loop turn share one script call, each with its own answer', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  for (const sessionId of ['s1', 's2', 's3', 's4']) {
    await store.bindSession({ sessionId, owner: 'r1', ownerEpoch: 'e1' }, 60_000);
    await store.openIncarnation({ id: 'g1', sessionId, owner: 'r1', kind: 'get', supersede: true }, 60_000);
  }
  const frames = (...texts: string[]) => JournalFrames.of(texts);
  const one = (sessionId: string, fromSeq: number, ids: string[], payloads?: JournalFrames) =>
    store.recordEvents(sessionId, 'g1', { attach: 1, fromSeq, upstreamIds: ids, responded: [], ...(payloads ? { payloads } : {}) }, 100, 60_000, 1 << 20);
  // The script is loaded on its first call: counted from the next.
  await Promise.all([one('s4', 1, ['w1']), one('s4', 2, ['w2'])]);
  await redis.config('RESETSTAT');

  const answers = await Promise.allSettled([
    one('s1', 1, ['a1'], frames('A1')),
    // Pipelined behind the batch before it, in the same call.
    one('s1', 2, ['a2'], frames('A2')),
    one('s2', 5, ['b5']),
    store.recordEvents('s3', 'nowhere', { attach: 1, fromSeq: 1, upstreamIds: ['c1'], responded: [] }, 100, 60_000),
    // An id with LF cannot be an SSE id: the script refuses this batch alone.
    one('s3', 1, ['c\n1']),
    one('s4', 3, ['w3']),
  ]);
  t.same(
    answers.map((answer) => (answer.status === 'fulfilled' ? answer.value : answer.reason.name)),
    ['ok', 'ok', 'stale', 'missing', 'StoreError', 'ok'],
  );
  t.match((answers[4] as PromiseRejectedResult).reason, { cause: { message: /upstream ids: expected 1, found 2/ } });
  t.same(await scriptCalls(redis), { evalsha: 1, eval: 0 }, 'six batches, one script call');
  t.match(await store.readIncarnation('s1', 'g1', 0), { record: { head: 2 }, after: ['a1', 'a2'] });
  t.match(await store.readJournal('s1', 'g1', 0, 10), { events: [{ seq: 1, payload: 'A1' }, { seq: 2, payload: 'A2' }] });
  t.match(await store.readIncarnation('s3', 'g1', 0), { record: { head: 0 } }, 'the refused batch wrote nothing');
  t.match(await store.readIncarnation('s4', 'g1', 0), { record: { head: 3 }, after: ['w1', 'w2', 'w3'] });
});

t.test('redis: the journal reads of one loop turn share one script call, each with its own answer', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  for (const sessionId of ['s1', 's2']) {
    await store.bindSession({ sessionId, owner: 'r1', ownerEpoch: 'e1' }, 60_000);
    await store.openIncarnation({ id: 'g1', sessionId, owner: 'r1', kind: 'get', supersede: true }, 60_000);
    const texts = [1, 2, 3].map((i) => `${sessionId}-${i}`);
    await store.recordEvents(sessionId, 'g1', { attach: 1, fromSeq: 1, upstreamIds: texts, responded: [], payloads: JournalFrames.of(texts) }, 100, 60_000, 1 << 20);
  }
  const reads = () => Promise.all([store.readJournal('s1', 'g1', 0, 10), store.readJournal('s2', 'g1', 1, 1), store.readJournal('s2', 'nowhere', 0, 10), store.readJournal('s1', 'g1', 3, 10)]);
  const alone: Awaited<ReturnType<Store['readJournal']>>[] = [];
  for (const [sessionId, inc, after, limit] of [['s1', 'g1', 0, 10], ['s2', 'g1', 1, 1], ['s2', 'nowhere', 0, 10], ['s1', 'g1', 3, 10]] as const) {
    alone.push(await store.readJournal(sessionId, inc, after, limit));
  }
  // The script is loaded on its first call: counted from the next.
  await reads();
  await redis.config('RESETSTAT');
  const together = await reads();
  t.same(await scriptCalls(redis), { evalsha: 1, eval: 0 }, 'four reads, one script call');
  t.same(together, alone, 'each answered as when read alone');
  t.match(together[0], { record: { head: 3 }, events: [{ seq: 1, payload: 's1-1' }, { seq: 2 }, { seq: 3, payload: 's1-3' }] });
  t.match(together[1], { events: [{ seq: 2, payload: 's2-2' }] });
  t.equal(together[2], null, 'not recorded');
  t.same(together[3]?.events, [], 'nothing after the head');
});

t.test('redis: a batch that stops the shared script fails alone; the others are written', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  for (const sessionId of ['s1', 's2', 's3']) {
    await store.bindSession({ sessionId, owner: 'r1', ownerEpoch: 'e1' }, 60_000);
    await store.openIncarnation({ id: 'g1', sessionId, owner: 'r1', kind: 'get', supersede: true }, 60_000);
  }
  // Positions of another type: the script's first read of them is an error that stops it.
  await redis.set(positionsKey(KEY_PREFIX, 's2', 'g1'), 'not a list');
  const one = (sessionId: string) => store.recordEvents(sessionId, 'g1', { attach: 1, fromSeq: 1, upstreamIds: [`${sessionId}-1`], responded: [] }, 100, 60_000);
  const answers = await Promise.allSettled([one('s1'), one('s2'), one('s3')]);
  t.same(
    answers.map((answer) => (answer.status === 'fulfilled' ? answer.value : answer.reason.name)),
    ['ok', 'StoreError', 'ok'],
  );
  t.match((answers[1] as PromiseRejectedResult).reason, { op: 'recordEvents', cause: { message: /WRONGTYPE/ } });
  t.match(await store.readIncarnation('s1', 'g1', 0), { record: { head: 1 }, after: ['s1-1'] }, 'written once, though sent twice');
  t.match(await store.readIncarnation('s3', 'g1', 0), { record: { head: 1 }, after: ['s3-1'] });
});

t.test('redis: a session and its incarnations share one slot, in the documented layout', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  const sessions = ['{a}b', '{a}c', 'plain'];
  const incs = ['g1', 'p1', '{x}y', 'g1:ids'];
  for (const sessionId of sessions) {
    await store.bindSession({ sessionId, owner: 'r1', ownerEpoch: 'e1' }, 60_000);
    for (const id of incs) {
      const kind = id.startsWith('p') ? 'post' : 'get';
      await store.openIncarnation({ id, sessionId, owner: 'r2', kind, supersede: kind === 'get', pending: kind === 'post' ? [1, '1'] : [] }, 60_000);
    }
    t.equal(await store.recordEvents(sessionId, 'p1', { attach: 1, fromSeq: 1, upstreamIds: ['u1', null], responded: ['1'] }, 100, 60_000), 'ok');
  }
  await store.agreeSecret('secret-1');

  const expected = [secretKey(KEY_PREFIX)];
  for (const sessionId of sessions) {
    const slot = calculateSlot(sessionKey(KEY_PREFIX, sessionId));
    expected.push(sessionKey(KEY_PREFIX, sessionId));
    for (const id of incs) {
      for (const key of [incarnationKey(KEY_PREFIX, sessionId, id), positionsKey(KEY_PREFIX, sessionId, id)]) {
        expected.push(key);
        t.equal(calculateSlot(key), slot, `${key} is in its session's slot`);
      }
    }
    t.equal(await redis.hget(sessionKey(KEY_PREFIX, sessionId), 'getInc'), 'g1:ids', 'the current GET is a field of the session');
    const index = incarnationsKey(KEY_PREFIX, sessionId);
    expected.push(index);
    t.equal(calculateSlot(index), slot, 'the index of its incarnations is in its slot');
    t.same(
      (await redis.zrange(index, 0, -1)).sort(),
      incs.map((id) => incarnationKey(KEY_PREFIX, sessionId, id)).sort(),
      'the index lists the record key of each incarnation',
    );
    t.ok((await redis.pttl(index)) > 0, 'the index expires');
  }
  t.same((await redis.keys('*')).sort(), expected.sort(), 'the store wrote exactly these keys');
  t.equal(calculateSlot(secretKey(KEY_PREFIX)), calculateSlot('fleet'));
  t.equal(await redis.pttl(secretKey(KEY_PREFIX)), -1, 'the secret has no TTL');

  t.same(await redis.hgetall(incarnationKey(KEY_PREFIX, 'plain', 'p1')), {
    sessionId: 'plain',
    owner: 'r2',
    kind: 'post',
    state: 'open',
    head: '2',
    base: '0',
    attach: '1',
    pending: '[1]',
  });
  t.same(await redis.lrange(positionsKey(KEY_PREFIX, 'plain', 'p1'), 0, -1), ['', 'u1', ''], "positions 0..head, '' for null");
  t.same(await redis.lrange(positionsKey(KEY_PREFIX, 'plain', 'g1'), 0, -1), [''], 'an incarnation id ending in :ids has its own keys');
});

t.test('redis: the index of a session keeps its newest incarnations only', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  const ids = Array.from({ length: INCARNATIONS_LISTED + 4 }, (_, i) => `p${String(i).padStart(4, '0')}`);
  for (const id of ids) {
    t.equal(await store.recordEvents('s1', id, { attach: 1, fromSeq: 1, upstreamIds: ['u1'], responded: [], create: { owner: 'r1', kind: 'post', pending: [] } }, 100, 60_000), 'ok');
  }
  t.equal(await redis.zcard(incarnationsKey(KEY_PREFIX, 's1')), INCARNATIONS_LISTED, 'bounded');
  const listed = (await store.inspectSession('s1', INCARNATIONS_LISTED)).incarnations.map((i) => i.id);
  t.equal(listed.length, INCARNATIONS_LISTED);
  t.notOk(listed.includes('p0000'), 'the oldest fell out of the index');
  t.ok(listed.includes(ids.at(-1)!), 'the newest is listed');
});

t.test('redis: PTTL of both incarnation keys follows ttlMs on open, attach, record and touch', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  const keys = [incarnationKey(KEY_PREFIX, 's1', 'g1'), positionsKey(KEY_PREFIX, 's1', 'g1')];
  const ttls = async () => Promise.all(keys.map((key) => redis.pttl(key)));
  const expectTtl = async (set: number, what: string) => {
    for (const ttl of await ttls()) t.ok(setTo(ttl, set), `${what} (${ttl})`);
  };
  await store.openIncarnation({ id: 'g1', sessionId: 's1', owner: 'r1', kind: 'get', supersede: true }, 100_000);
  await expectTtl(100_000, 'open');
  await store.attachIncarnation('s1', 'g1', 200_000, 0);
  await expectTtl(200_000, 'attach');
  await store.recordEvents('s1', 'g1', { attach: 2, fromSeq: 1, upstreamIds: ['u1'], responded: [] }, 100, 300_000);
  await expectTtl(300_000, 'record');
  await store.touchIncarnation('s1', 'g1', 400_000);
  await expectTtl(400_000, 'touch');
  await store.recordEvents('s1', 'g1', { attach: 1, fromSeq: 2, upstreamIds: ['u2'], responded: [] }, 100, 900_000);
  await store.closeIncarnation('s1', 'g1');
  await store.readIncarnation('s1', 'g1', 0);
  await store.touchAndRead('s1', 900_000, { incarnationId: 'g1', afterSeq: 0 });
  await expectTtl(400_000, 'a refused batch, close, read and touchAndRead leave it');
});

t.test('redis: the journal is a hash of framed bytes beside the positions, same slot, same TTL', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  const [inc, pos, jnl] = [incarnationKey, positionsKey, journalKey].map((key) => key(KEY_PREFIX, 's1', 'g1')) as [string, string, string];
  t.equal(calculateSlot(jnl), calculateSlot(sessionKey(KEY_PREFIX, 's1')), "in its session's slot");
  await store.openIncarnation({ id: 'g1', sessionId: 's1', owner: 'r1', kind: 'get', supersede: true }, 100_000);
  await store.recordEvents('s1', 'g1', { attach: 1, fromSeq: 1, upstreamIds: ['u1'], responded: [] }, 100, 100_000);
  t.equal(await redis.exists(jnl), 0, 'no journal before a batch with payloads');
  const payloads = ['data: a\n\n', 'event: x\ndata: ü\n\n'];
  await store.recordEvents('s1', 'g1', { attach: 1, fromSeq: 2, upstreamIds: [null, 'u3'], payloads: JournalFrames.of(payloads), responded: [] }, 100, 300_000, 1000);
  // Each payload's UTF-8 length as 4 bytes (big-endian), then its bytes: 'ü' is two bytes.
  const framed = Buffer.concat([Buffer.from([0, 0, 0, 9]), Buffer.from('data: a\n\n'), Buffer.from([0, 0, 0, 19]), Buffer.from('event: x\ndata: ü\n\n')]);
  t.same(await redis.hmget(jnl, 'h', 'e', 'k', 'm'), ['3', String(framed.length), '0', '1'], 'journaled up to the head; one fragment, no slice yet');
  t.same(await redis.hgetBuffer(jnl, 'p1'), framed, 'each payload framed by its UTF-8 length');
  t.same(await redis.lrange(pos, 0, -1), ['', 'u1', '', 'u3']);
  t.match(await redis.hgetall(inc), { head: '3', base: '0', unjournaled: '1' });
  // The list layout's key, as a gateway before the hash layout leaves it during an upgrade.
  const listKey = jnl.replace(':jrn:', ':jnl:');
  t.not(listKey, jnl);
  await redis.rpush(listKey, '', '', 'data: other\n\n', 'data: bytes\n\n');
  t.same((await store.readJournal('s1', 'g1', 1, 10))?.events.map((e) => e.payload), payloads, "the earlier layout's list is not read");
  for (const key of [inc, pos, jnl]) t.ok(setTo(await redis.pttl(key), 300_000), `record sets the TTL of ${key}`);
  await store.attachIncarnation('s1', 'g1', 200_000, 0);
  t.ok(setTo(await redis.pttl(jnl), 200_000), 'attach sets it');
  await store.touchIncarnation('s1', 'g1', 400_000);
  t.ok(setTo(await redis.pttl(jnl), 400_000), 'touch sets it');
  await store.recordEvents('s1', 'g1', { attach: 2, fromSeq: 4, upstreamIds: [null], responded: [] }, 100, 400_000);
  t.equal(await redis.exists(jnl), 0, 'a batch without payloads drops the journal it can no longer be read from');
  t.match(await store.readIncarnation('s1', 'g1', 0), { record: { head: 4, journaled: false } });
});

/** An empty server, a store, and the GET incarnation s1/g1 open on it: its journal's key, for a look at what the store writes. */
async function journaledGet(t: Test): Promise<{ store: Store; redis: Redis; jnl: string }> {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  await store.openIncarnation({ id: 'g1', sessionId: 's1', owner: 'r1', kind: 'get', supersede: true }, 100_000);
  return { store, redis, jnl: journalKey(KEY_PREFIX, 's1', 'g1') };
}

t.test('redis: the journal cuts its fragments into whole slices of one allocator class, and frees them behind the window', async (t) => {
  const { store, redis, jnl } = await journaledGet(t);
  // 1,000-byte events of mixed widths (ü is two bytes), in batches of 7: frames straddle slices.
  const event = (seq: number) => `data: ${String(seq).padStart(6, '0')}${'ü'.repeat(10)}${'x'.repeat(1000 - 6 - 6 - 20 - 2)}\n\n`;
  let seq = 1;
  const window = 60;
  for (let b = 0; b < 30; b++) {
    const payloads = Array.from({ length: 7 }, (_, i) => event(seq + i));
    t.equal(await store.recordEvents('s1', 'g1', { attach: 1, fromSeq: seq, upstreamIds: payloads.map(() => null), payloads: JournalFrames.of(payloads), responded: [] }, window, 100_000), 'ok');
    seq += 7;
  }
  const head = seq - 1;
  const [k, z, e] = (await redis.hmget(jnl, 'k', 'z', 'e')).map(Number) as [number, number, number];
  t.equal(e, head * 1004, 'the stream: each event and its 4-byte length');
  t.equal(k, Math.floor(e / JOURNAL_SLICE_BYTES), 'every whole slice cut');
  t.ok(z > 0, 'the slices behind the window are freed');
  t.equal(await redis.hexists(jnl, String(z - 1)), 0, 'the slice before the first kept is gone');
  for (let i = z; i < k; i++) t.equal(await redis.hstrlen(jnl, String(i)), JOURNAL_SLICE_BYTES, `slice ${i} is whole`);
  // A slice is one allocation of the 16 KiB class: its value is not rounded up to a larger one.
  const usage = Number(await redis.call('MEMORY', 'USAGE', jnl, 'SAMPLES', '0'));
  t.ok(usage < (k - z + 2) * 16_384 + 4096, `the journal costs its slices and little more (${usage} bytes for ${k - z} slices)`);
  const read = await store.readJournal('s1', 'g1', head - window, 1000);
  t.same(read?.events.map((x) => x.seq), Array.from({ length: window }, (_, i) => head - window + 1 + i), 'the window, in order');
  t.ok(read?.events.every((x) => x.payload === event(x.seq)), 'byte for byte, across slices and fragments');
  t.same((await store.readJournal('s1', 'g1', head - window - 1, 10))?.events, [], 'below the window: none');
});

t.test('redis: batches are sent cut where the journal\'s slices end, and stored as sent; the stream is the same bytes', async (t) => {
  const { store, redis, jnl } = await journaledGet(t);
  // What the record script is sent: its argument count tells one piece from several.
  const monitor = await redis.monitor();
  t.teardown(() => monitor.disconnect());
  const sent: number[] = [];
  monitor.on('monitor', (_time: string, args: string[]) => {
    // EVAL the first time on a connection, EVALSHA after.
    if (/^eval(sha)?$/i.test(args[0] ?? '') && args.includes(jnl)) sent.push(args.length);
  });
  const event = (seq: number) => `data: ${String(seq).padStart(6, '0')}${'ü'.repeat(10)}${'y'.repeat(300)}\n\n`;
  const texts: string[] = [];
  let seq = 1;
  // Batches of 130 events (about 43 KB): each spans two or three slices.
  for (let b = 0; b < 6; b++) {
    const payloads = Array.from({ length: 130 }, (_, i) => event(seq + i));
    texts.push(...payloads);
    t.equal(await store.recordEvents('s1', 'g1', { attach: 1, fromSeq: seq, upstreamIds: payloads.map(() => null), payloads: JournalFrames.of(payloads), responded: [] }, 10_000, 100_000), 'ok');
    seq += 130;
  }
  await waitFor('the monitor saw every batch', RECOVERY_DEADLINE_MS, async () => sent.length === 6);
  t.ok(sent.slice(1).every((n) => n > sent[0]! + 1), `after the first answer, each batch goes in pieces (arguments: ${sent.join(', ')})`);
  const stream = JournalFrames.of(texts).frames;
  const [k, e, m] = (await redis.hmget(jnl, 'k', 'e', 'm')).map(Number) as [number, number, number];
  t.equal(e, stream.length, 'the stream: every frame once');
  t.equal(k, Math.floor(e / JOURNAL_SLICE_BYTES), 'every whole slice cut');
  for (let i = 0; i < k; i++) {
    t.same(await redis.hgetBuffer(jnl, String(i)), stream.subarray(i * JOURNAL_SLICE_BYTES, (i + 1) * JOURNAL_SLICE_BYTES), `slice ${i}: the stream's bytes at its offset`);
  }
  t.equal(m, 1, 'one fragment after the last slice');
  t.same(await redis.hgetBuffer(jnl, 'p1'), stream.subarray(k * JOURNAL_SLICE_BYTES), 'the fragment: the rest of the stream');
  const read = await store.readJournal('s1', 'g1', 0, 10_000);
  t.ok(read?.events.length === texts.length && read.events.every((x, i) => x.seq === i + 1 && x.payload === texts[i]), 'read back byte for byte, in order');
});

t.test('redis: the record script stores pieces cut where its slices end as they came, and joins and cuts any others', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = defineScripts(inspector(t, server));
  const S = JOURNAL_SLICE_BYTES;
  // One event per batch, its payload sized so that its frame is `bytes` long.
  const frame = (bytes: number, fill: string) => JournalFrames.of([fill.repeat(bytes - 4)]).frames;
  const cases: [string, (f: Buffer, end: number) => Buffer[]][] = [
    ['cut where the slices end', (f, end) => cutFrames(f, end)],
    ['in one piece', (f) => [f]],
    ['cut one byte off', (f, end) => cutFrames(f, end + 1)],
    ['cut where the slices end, an empty piece after', (f, end) => [...cutFrames(f, end), Buffer.alloc(0)]],
    ['cut in arbitrary places', (f) => [f.subarray(0, 100), f.subarray(100, 5000), f.subarray(5000)]],
  ];
  for (const [name, cut] of cases) {
    const inc = `g-${cases.findIndex((c) => c[0] === name)}`;
    await store.openIncarnation({ id: inc, sessionId: 's1', owner: 'r1', kind: 'get', supersede: false }, 100_000);
    const [incKey, posKey, jnl] = [incarnationKey(KEY_PREFIX, 's1', inc), positionsKey(KEY_PREFIX, 's1', inc), journalKey(KEY_PREFIX, 's1', inc)];
    // Batches of 1,000 bytes, then a slice and a half, then exactly the open slice's room, then two slices.
    const sizes = [1000, S + S / 2, 0, 2 * S];
    const frames: Buffer[] = [];
    let end = 0;
    for (const [i, size] of sizes.entries()) {
      const bytes = size === 0 ? S - (end % S) : size;
      const f = frame(bytes, 'abcdefgh'[i]!);
      const reply = await redis.gwRecordEvents(incKey, posKey, jnl, incarnationsKey(KEY_PREFIX, 's1'), 1, i + 1, 1000, 100_000, '0', '', '', '', '', 0, 1, '', -1, '', 0, 'ch', '1', ...cut(f, end));
      end += f.length;
      t.equal(reply, `ok ${end}`, `${name}: batch ${i + 1} journaled, the journal's end answered`);
      frames.push(f);
    }
    const stream = Buffer.concat(frames);
    const k = Number(await redis.hget(jnl, 'k'));
    t.equal(k, Math.floor(stream.length / S), `${name}: every whole slice`);
    const slices = await Promise.all(Array.from({ length: k }, (_, i) => redis.hgetBuffer(jnl, String(i))));
    t.ok(slices.every((s, i) => s !== null && s.equals(stream.subarray(i * S, (i + 1) * S))), `${name}: each slice is the stream's bytes at its offset`);
    const read = await store.readJournal('s1', inc, 0, 10);
    t.same(read?.events.map((x) => Buffer.byteLength(x.payload) + 4), frames.map((f) => f.length), `${name}: every event read back whole`);
  }
});

t.test('redis: a journal lost without its record (evicted) is read as none, and journaling starts again after it', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  await store.openIncarnation({ id: 'g1', sessionId: 's1', owner: 'r1', kind: 'get', supersede: true }, 60_000);
  const batch = (fromSeq: number, data: string) => ({ attach: 1, fromSeq, upstreamIds: [null], payloads: JournalFrames.of([`data: ${data}\n\n`]), responded: [] });
  await store.recordEvents('s1', 'g1', batch(1, 'a'), 100, 60_000, 1000);
  await redis.del(journalKey(KEY_PREFIX, 's1', 'g1'));
  t.match(await store.readJournal('s1', 'g1', 0, 10), { record: { head: 1, journaled: false }, events: [] }, 'nothing, never a wrong event');
  t.equal(await store.recordEvents('s1', 'g1', batch(1, 'a'), 100, 60_000, 1000), 'stale', 'a retry cannot claim bytes that are gone');
  t.equal(await store.recordEvents('s1', 'g1', batch(2, 'b'), 100, 60_000, 1000), 'ok');
  t.match(await store.readJournal('s1', 'g1', 1, 10), { record: { head: 2, journaled: false }, events: [{ seq: 2, payload: 'data: b\n\n' }] });
});

t.test('redis: watches share one subscriber connection, opened on the first, subscribed again after it is cut, closed with the store', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  const watcher = makeStore(server);
  t.teardown(() => Promise.all([store.close(), watcher.close()]));
  const redis = inspector(t, server);
  const pubsubClients = async () => String(await redis.call('CLIENT', 'LIST', 'TYPE', 'pubsub')).split('\n').filter(Boolean).length;
  const channels = async () => ((await redis.call('PUBSUB', 'SHARDCHANNELS')) as string[]).length;
  t.equal(await pubsubClients(), 0, 'none before the first watch');
  const notes: JournalNote[] = [];
  const unwatch = ['g1', 'g2', 'g3'].map((id) => watcher.watchJournal('s1', id, (note) => notes.push(note)));
  await store.openIncarnation({ id: 'g1', sessionId: 's1', owner: 'r1', kind: 'get', supersede: true }, 60_000);
  let head = 0;
  const noteArrives = async (what: string) => {
    const seen = notes.length;
    await waitFor(what, RECOVERY_DEADLINE_MS, async () => {
      head += 1;
      await store.recordEvents('s1', 'g1', { attach: 1, fromSeq: head, upstreamIds: [null], payloads: JournalFrames.of([`data: ${head}\n\n`]), responded: [] }, 100, 60_000);
      return notes.length > seen;
    });
  };
  await noteArrives('a note once subscribed');
  t.equal(await pubsubClients(), 1, 'one connection for three watches');
  t.equal(await channels(), 3, 'three channels');
  await redis.client('KILL', 'TYPE', 'pubsub');
  await noteArrives('a note after the connection was cut and came back');
  t.ok(notes.every((note) => note.kind === 'head'), 'head notes only');
  for (const stop of unwatch) stop();
  await waitFor('no channel left once every watch ended', RECOVERY_DEADLINE_MS, async () => (await channels()) === 0);
  await watcher.close();
  await waitFor('the subscriber connection closed with the store', RECOVERY_DEADLINE_MS, async () => (await pubsubClients()) === 0);
});

t.test('redis: an incarnation that lost one of its keys counts as not recorded', async (t) => {
  // With an eviction policy Redis may drop one key and keep the other; positions shifted against
  // base would replay the wrong events, so neither half is trusted.
  for (const lost of ['positions', 'record'] as const) {
    await server.flushall();
    const store = makeStore(server);
    t.teardown(() => store.close());
    const redis = inspector(t, server);
    await store.openIncarnation({ id: 'g1', sessionId: 's1', owner: 'r1', kind: 'get', supersede: false }, 60_000);
    await store.recordEvents('s1', 'g1', { attach: 1, fromSeq: 1, upstreamIds: ['u1'], responded: [] }, 100, 60_000);
    await redis.del(lost === 'positions' ? positionsKey(KEY_PREFIX, 's1', 'g1') : incarnationKey(KEY_PREFIX, 's1', 'g1'));
    t.equal(await store.readIncarnation('s1', 'g1', 0), null, `${lost} lost: read`);
    t.same(await store.touchAndRead('s1', 60_000, { incarnationId: 'g1', afterSeq: 0 }), { session: null, view: null }, `${lost} lost: touchAndRead`);
    t.equal(await store.attachIncarnation('s1', 'g1', 60_000, 0), null, `${lost} lost: attach`);
    t.equal(await store.recordEvents('s1', 'g1', { attach: 1, fromSeq: 2, upstreamIds: ['u2'], responded: [] }, 100, 60_000), 'missing', `${lost} lost: record`);
  }
});

t.test('redis: a resumption takes two commands: touchAndRead, then attachIncarnation', async (t) => {
  await server.flushall();
  const store = makeStore(server);
  t.teardown(() => store.close());
  const redis = inspector(t, server);
  await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 60_000);
  await store.openIncarnation({ id: 'g1', sessionId: 's1', owner: 'r1', kind: 'get', supersede: true }, 60_000);
  t.equal(await store.recordEvents('s1', 'g1', { attach: 1, fromSeq: 1, upstreamIds: ['u1', 'u2'], responded: [] }, 100, 60_000), 'ok');
  // Once each first, so that no script has to be loaded (NOSCRIPT, then EVAL) in what is counted.
  await store.touchAndRead('s1', 60_000, { incarnationId: 'g1', afterSeq: 1 });
  await store.attachIncarnation('s1', 'g1', 60_000, 1);
  await redis.config('RESETSTAT');
  const decided = await store.touchAndRead('s1', 60_000, { incarnationId: 'g1', afterSeq: 1 });
  const attached = await store.attachIncarnation('s1', 'g1', 60_000, 1);
  t.same(await scriptCalls(redis), { evalsha: 2, eval: 0 }, 'one script each');
  t.match(decided, { session: { state: 'active' }, view: { record: { attach: 2 }, after: ['u2'] } });
  t.match(attached, { attach: 3, view: { record: { attach: 3 }, at: 'u1', after: ['u2'] } });
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

// Each fault gets its own server, so the contract tests above never see one, and the faults run side by side.
t.test('redis: faults', { jobs: 6 }, async (t) => {
  t.test('stopped: every operation rejects at once, and service comes back by itself', async (t) => {
    const own = await startRedisServer(t);
    const errors: Error[] = [];
    const store = makeStore(own, (err) => errors.push(err), LONG_COMMAND_TIMEOUT_MS);
    t.teardown(() => store.close());
    t.equal(await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 60_000), true);

    await own.stop();
    for (const [op, call] of operations(store)) {
      const ms = await elapsedMs(() => t.rejects(call(), { name: 'StoreError', code: 'GW_STORE_UNAVAILABLE', op }, op));
      t.ok(ms < LONG_COMMAND_TIMEOUT_MS, `${op} failed in ${ms.toFixed(0)} ms, not queued until the ${LONG_COMMAND_TIMEOUT_MS} ms command timeout`);
    }
    await waitFor('client errors reported to onError', RECOVERY_DEADLINE_MS, async () => errors.length > 0);

    await own.restart({ keepData: false });
    await storeAnswers(store, 'the store answers after the restart');
    t.equal(await store.touchSession('s1', 60_000), null, 'a restart that lost the data loses the session');
    t.equal(await store.bindSession({ sessionId: 's2', owner: 'r1', ownerEpoch: 'e1' }, 60_000), true);
  });

  t.test('restarted without its data: the secret is lost with it, and the next candidate wins', async (t) => {
    const own = await startRedisServer(t);
    const store = await connectedStore(t, own);
    t.equal(await store.agreeSecret('before'), 'before');
    await store.openIncarnation({ id: 'g1', sessionId: 's1', owner: 'r1', kind: 'get', supersede: true }, 60_000);
    await own.restart({ keepData: false });
    await storeAnswers(store, 'the store answers after the restart');
    t.equal(await store.agreeSecret('after'), 'after', 'cursors signed before the restart are foreign now');
    t.equal(await store.readIncarnation('s1', 'g1', 0), null, 'and their incarnations are gone too');
  });

  t.test('restarted without its data: watchers are reset and their notes stop, then flow again; the generation is new', async (t) => {
    const own = await startRedisServer(t);
    const store = await connectedStore(t, own);
    const { seen, until } = watchLog(t, store);
    await until(() => seen.includes('flowing'));
    const before = await store.agreeGeneration('generation-1');
    await own.restart({ keepData: false });
    await until(() => seen.includes('reset') && seen.includes('stopped'));
    await until(() => seen.lastIndexOf('flowing') > seen.indexOf('stopped'));
    t.equal(seen.filter((s) => s === 'flowing').length, 2, 'flowing at first, and again after the restart');
    await storeAnswers(store, 'the store answers after the restart');
    t.equal(before, 'generation-1');
    t.equal(await store.agreeGeneration('generation-2'), 'generation-2', 'a store that lost its data has a new generation');
    await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 60_000);
    await store.endSession('s1', 'terminated', 60_000);
    await until(() => seen.includes('ended'));
    t.pass('notes arrive again');
  });

  t.test('the notes connection killed alone: its watchers stop, then flow again once subscribed', async (t) => {
    const own = await startRedisServer(t);
    const store = await connectedStore(t, own);
    const { seen, until } = watchLog(t, store);
    await until(() => seen.includes('flowing'));
    const redis = inspector(t, own);
    t.equal(await redis.client('KILL', 'TYPE', 'pubsub'), 1, 'one pub/sub connection per store');
    await until(() => seen.includes('stopped'));
    await until(() => seen.lastIndexOf('flowing') > seen.indexOf('stopped'));
    t.notOk(seen.includes('reset'), 'the store connection itself stayed up');
    await store.retireReplicaEpoch('r1', '', 'e2');
    await until(() => seen.includes('retired'));
    t.pass('notes arrive again');
  });

  t.test('restarted with its data: sessions are still there', async (t) => {
    const own = await startRedisServer(t);
    const store = await connectedStore(t, own);
    await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 60_000);
    await store.retireReplicaEpoch('r1', '', 'e2');
    await store.agreeSecret('kept');
    await store.openIncarnation({ id: 'g1', sessionId: 's1', owner: 'r1', kind: 'get', supersede: true }, 60_000);
    await store.recordEvents('s1', 'g1', { attach: 1, fromSeq: 1, upstreamIds: ['u1'], responded: [] }, 100, 60_000);
    await own.restart({ keepData: true });
    // The new process has an empty script cache.
    await waitFor('touch succeeds after restart', RECOVERY_DEADLINE_MS, async () => (await store.touchSession('s1', 60_000)) !== null);
    t.match(await store.touchSession('s1', 60_000), { owner: 'r1', state: 'active' });
    t.equal(await store.retireReplicaEpoch('r1', 'e2', 'e3'), 'e3');
    t.equal(await store.agreeSecret('other'), 'kept', 'the secret survives');
    const view = await store.readIncarnation('s1', 'g1', 0);
    t.match(view, { record: { head: 1 }, currentGet: 'g1', after: ['u1'] }, 'and so do the incarnations');
  });

  t.test('paused: operations reject within the command timeout, then work again', async (t) => {
    const own = await startRedisServer(t);
    const store = makeStore(own);
    t.teardown(() => store.close());
    await storeAnswers(store);
    t.teardown(() => own.resume());
    await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 60_000);

    own.pause();
    for (const [op, call] of operations(store)) {
      const ms = await elapsedMs(() => t.rejects(call(), { name: 'StoreError', code: 'GW_STORE_UNAVAILABLE', op }, op));
      // Up to one command timeout waiting for a connection attempt in flight, then one for the command.
      t.ok(ms < bound(2 * COMMAND_TIMEOUT_MS), `${op} failed in ${ms.toFixed(0)} ms, not a hang`);
    }
    own.resume();
    await storeAnswers(store, 'the store answers after the resume');
    t.match(await store.touchSession('s1', 60_000), { owner: 'r1', state: 'active' });
  });
});

/** What a watcher of `store` is told, as words (changed: the note's kind), and a way to await them. */
function watchLog(t: Test, store: Store): { seen: string[]; until: (done: () => boolean) => Promise<void> } {
  const seen: string[] = [];
  let wake: (() => void) | undefined;
  const say = (what: string) => {
    seen.push(what);
    wake?.();
  };
  t.teardown(store.watchBindings({ changed: (note) => say(note.kind), flowing: (on) => say(on ? 'flowing' : 'stopped'), reset: () => say('reset') }));
  return {
    seen,
    // Bounded by tap's test timeout: a word that never comes fails the test.
    until: async (done) => {
      while (!done()) await new Promise<void>((resolve) => (wake = resolve));
    },
  };
}

/**
 * A PTTL read back after setting `set`: no more than that, and less only by the time that passed
 * since, which a loaded machine may stretch to SLACK_MS. The TTLs set are far apart, so that a
 * step that kept the previous one cannot pass.
 */
function setTo(pttl: number, set: number): boolean {
  return pttl <= set && pttl > set - SLACK_MS;
}

/** Scripts run since the last CONFIG RESETSTAT, by command. */
async function scriptCalls(redis: Redis): Promise<{ evalsha: number; eval: number }> {
  const info = await redis.info('commandstats');
  const calls = (command: string) => Number(new RegExp(`^cmdstat_${command}:calls=(\\d+)`, 'm').exec(info)?.[1] ?? 0);
  return { evalsha: calls('evalsha'), eval: calls('eval') };
}

async function cachedScripts(redis: Redis): Promise<number> {
  const info = await redis.info('memory');
  return Number(/number_of_cached_scripts:(\d+)/.exec(info)?.[1]);
}
