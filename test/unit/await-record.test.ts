/**
 * resumption/await-record.ts on both stores: a decision waiting for a cursor's record (§7) is
 * answered once the record lands (a journaled batch notes it, any other is found by re-reading),
 * and not when the stream closed or nothing came in time.
 */
import t, { type Test } from 'tap';
import { awaitRecord } from '../../src/resumption/await-record.js';
import { JournalFrames } from '../../src/store/journal-frames.js';
import { createMemoryStore } from '../../src/store/memory.js';
import { createRedisStore } from '../../src/store/redis/index.js';
import type { Store } from '../../src/store/types.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { storeAnswers } from '../helpers/wait.js';

const TTL_MS = 60_000;
/** Long enough never to be what ends a wait that something answers. */
const LONG_MS = 60_000;

const redis = await startRedisServer(t);

const stores: Record<string, (t: Test) => Promise<Store>> = {
  memory: async (t) => {
    const store = createMemoryStore();
    t.teardown(() => store.close());
    return store;
  },
  redis: async (t) => {
    const store = createRedisStore({ url: redis.url, keyPrefix: 'await', connectTimeoutMs: 500, commandTimeoutMs: 500 });
    t.teardown(() => store.close());
    await storeAnswers(store);
    return store;
  },
};

let streams = 0;
async function stream(store: Store) {
  const sessionId = `s${++streams}`;
  const incarnation = `inc-${streams}`;
  await store.bindSession({ sessionId, owner: 'r1', ownerEpoch: '' }, TTL_MS);
  await store.openIncarnation({ id: incarnation, sessionId, owner: 'r1', kind: 'get', supersede: true }, TTL_MS);
  const record = (fromSeq: number, n: number, journaled: boolean) =>
    store.recordEvents(sessionId, incarnation, {
      attach: 1,
      fromSeq,
      upstreamIds: Array.from({ length: n }, (_, i) => `u${fromSeq + i}`),
      responded: [],
      ...(journaled ? { payloads: JournalFrames.of(Array.from({ length: n }, (_, i) => `data: ${fromSeq + i}\n\n`)) } : {}),
    }, 100, TTL_MS);
  return { sessionId, incarnation, record };
}

for (const [name, open] of Object.entries(stores)) {
  t.test(name, async (t) => {
    const store = await open(t);

    t.test('a journaled batch that lands while it waits answers it (its note)', async (t) => {
      const s = await stream(store);
      t.equal(await s.record(1, 1, true), 'ok');
      const waited = awaitRecord({ store, sessionId: s.sessionId, incarnation: s.incarnation, seq: 3, timeoutMs: LONG_MS });
      t.equal(await s.record(2, 1, true), 'ok');
      t.equal(await s.record(3, 2, true), 'ok');
      t.equal(await waited, true, 'recorded');
    });

    t.test('a batch without the journal, which notes nothing, is found by re-reading', async (t) => {
      const s = await stream(store);
      const waited = awaitRecord({ store, sessionId: s.sessionId, incarnation: s.incarnation, seq: 2, timeoutMs: LONG_MS });
      t.equal(await s.record(1, 2, false), 'ok');
      t.equal(await waited, true, 'recorded');
    });

    t.test('recorded already: answered at once', async (t) => {
      const s = await stream(store);
      t.equal(await s.record(1, 2, false), 'ok');
      t.equal(await awaitRecord({ store, sessionId: s.sessionId, incarnation: s.incarnation, seq: 2, timeoutMs: LONG_MS }), true);
    });

    t.test('the stream closed while it waits: nothing more will be recorded', async (t) => {
      const s = await stream(store);
      const waited = awaitRecord({ store, sessionId: s.sessionId, incarnation: s.incarnation, seq: 1, timeoutMs: LONG_MS });
      await store.closeIncarnation(s.sessionId, s.incarnation);
      t.equal(await waited, false);
    });

    t.test('an incarnation the store does not hold: not waited for', async (t) => {
      const s = await stream(store);
      t.equal(await awaitRecord({ store, sessionId: s.sessionId, incarnation: 'inc-none', seq: 1, timeoutMs: LONG_MS }), false);
    });

    t.test('nothing comes within the timeout: not recorded', async (t) => {
      const s = await stream(store);
      t.equal(await s.record(1, 1, true), 'ok');
      t.equal(await awaitRecord({ store, sessionId: s.sessionId, incarnation: s.incarnation, seq: 2, timeoutMs: 300 }), false);
      t.equal((await store.readIncarnation(s.sessionId, s.incarnation, 0))?.record.head, 1, 'the head is where it was');
    });
  });
}
