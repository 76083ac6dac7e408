import t from 'tap';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { BoundedEventStore, ReplayRefusedError } from '../../demo/src/event-store.js';

const GET = '_GET_stream';
const msg = (n: number): JSONRPCMessage => ({ jsonrpc: '2.0', method: 'notifications/message', params: { n } });

/** Replays into an array; the store's own promise is returned so rejections can be asserted. */
function replay(store: { replayEventsAfter: BoundedEventStore['replayEventsAfter'] }, after: string) {
  const sent: { id: string; message: JSONRPCMessage }[] = [];
  const done = store.replayEventsAfter(after, {
    send: async (id, message) => {
      sent.push({ id, message });
    },
  });
  return { sent, done };
}

t.test('replays only the events of the given stream, the GET stream included', async (t) => {
  const store = new BoundedEventStore({ maxEvents: 100 });
  const g1 = await store.storeEvent(GET, msg(1));
  await store.storeEvent('post-a', msg(2));
  const g3 = await store.storeEvent(GET, msg(3));
  await store.storeEvent('post-b', msg(4));
  const g5 = await store.storeEvent(GET, msg(5));

  const { sent, done } = replay(store, g1);
  t.equal(await done, GET);
  t.same(sent, [
    { id: g3, message: msg(3) },
    { id: g5, message: msg(5) },
  ]);
});

t.test('replays in order everything after the id, and nothing after the last one', async (t) => {
  const store = new BoundedEventStore({ maxEvents: 100 });
  const ids: string[] = [];
  for (let i = 0; i < 10; i++) ids.push(await store.storeEvent('s', msg(i)));

  const after3 = replay(store, ids[2] as string);
  t.equal(await after3.done, 's');
  t.same(after3.sent.map((e) => e.id), ids.slice(3));
  t.same(after3.sent.map((e) => e.message), [3, 4, 5, 6, 7, 8, 9].map(msg));

  const afterLast = replay(store, ids[9] as string);
  t.equal(await afterLast.done, 's', 'a known last id is a complete, empty replay');
  t.same(afterLast.sent, []);
});

t.test('ids are unique across streams and stores, and fit an SSE id line', async (t) => {
  const a = new BoundedEventStore({ maxEvents: 10_000 });
  const b = new BoundedEventStore({ maxEvents: 10_000 });
  const ids = new Set<string>();
  for (let i = 0; i < 500; i++) {
    ids.add(await a.storeEvent(i % 2 ? GET : `s${i % 7}`, msg(i)));
    ids.add(await b.storeEvent(i % 2 ? GET : `s${i % 7}`, msg(i)));
  }
  t.equal(ids.size, 1000);
  t.ok([...ids].every((id) => /^[A-Za-z0-9-]+$/.test(id)), 'no newline, colon or other SSE-hostile byte');
});

t.test('is bounded: the oldest events go first, across streams', async (t) => {
  const store = new BoundedEventStore({ maxEvents: 5 });
  const ids: string[] = [];
  for (let i = 0; i < 8; i++) ids.push(await store.storeEvent(i % 2 ? GET : 'post', msg(i)));
  t.equal(store.size, 5);

  // Retained: ids[3..7]. ids[3] and ids[5] are on GET, so after ids[3] come ids[5], ids[7].
  const fromOldest = replay(store, ids[3] as string);
  t.equal(await fromOldest.done, GET);
  t.same(fromOldest.sent.map((e) => e.id), [ids[5], ids[7]]);

  const evicted = replay(store, ids[1] as string);
  await t.rejects(evicted.done, { name: 'ReplayRefusedError', code: 'DEMO_EVENT_NOT_RETAINED' });
  t.same(evicted.sent, [], 'an evicted id replays no partial tail');
});

t.test('stays exact while eviction compacts a long stream', async (t) => {
  const store = new BoundedEventStore({ maxEvents: 100 });
  const ids: string[] = [];
  for (let i = 0; i < 1000; i++) ids.push(await store.storeEvent(i % 10 === 0 ? 'other' : 'long', msg(i)));
  t.equal(store.size, 100);
  const { sent, done } = replay(store, ids[951] as string);
  t.equal(await done, 'long');
  const expected = ids.slice(952).filter((_, k) => (952 + k) % 10 !== 0);
  t.same(sent.map((e) => e.id), expected);
});

t.test('trimmed and never-issued ids replay nothing', async (t) => {
  const store = new BoundedEventStore({ maxEvents: 100 });
  const ids: string[] = [];
  for (let i = 0; i < 6; i++) ids.push(await store.storeEvent(GET, msg(i)));

  store.trim(2);
  t.equal(store.size, 2);
  const trimmed = replay(store, ids[2] as string);
  await t.rejects(trimmed.done, ReplayRefusedError);
  t.same(trimmed.sent, []);
  const kept = replay(store, ids[4] as string);
  await kept.done;
  t.same(kept.sent.map((e) => e.id), [ids[5]], 'what is retained still replays');

  store.trim(0);
  t.equal(store.size, 0);
  await t.rejects(replay(store, ids[5] as string).done, ReplayRefusedError);

  const never = replay(store, 'not-an-id');
  await t.rejects(never.done, ReplayRefusedError);
  t.same(never.sent, []);
  t.throws(() => store.trim(-1), RangeError);
});

t.test('clear drops everything', async (t) => {
  const store = new BoundedEventStore({ maxEvents: 100 });
  const id = await store.storeEvent(GET, msg(1));
  await store.storeEvent(GET, msg(2));
  store.clear();
  t.equal(store.size, 0);
  await t.rejects(replay(store, id).done, ReplayRefusedError);
});

t.test('events stored while replaying are replayed too', async (t) => {
  const store = new BoundedEventStore({ maxEvents: 100 });
  const first = await store.storeEvent('s', msg(1));
  const second = await store.storeEvent('s', msg(2));
  let late: string | undefined;
  const sent: string[] = [];
  await store.replayEventsAfter(first, {
    send: async (id) => {
      sent.push(id);
      late ??= await store.storeEvent('s', msg(3));
    },
  });
  t.same(sent, [second, late]);
});

t.test('eviction in the middle of a replay refuses it rather than skip', async (t) => {
  const store = new BoundedEventStore({ maxEvents: 3 });
  const [a1, a2] = [await store.storeEvent('a', msg(1)), await store.storeEvent('a', msg(2))];
  await store.storeEvent('a', msg(3));
  const sent: string[] = [];
  const done = store.replayEventsAfter(a1, {
    send: async (id) => {
      sent.push(id);
      // Pushes a2 and a3 out before a3 could be sent.
      for (let i = 0; i < 3; i++) await store.storeEvent('b', msg(10 + i));
    },
  });
  await t.rejects(done, ReplayRefusedError);
  t.same(sent, [a2]);
});

t.test('scoped views keep sessions apart although every GET stream has the same name', async (t) => {
  const store = new BoundedEventStore({ maxEvents: 100 });
  const s1 = store.scoped('session-1');
  const s2 = store.scoped('session-2');
  const a1 = await s1.storeEvent(GET, msg(1));
  const b1 = await s2.storeEvent(GET, msg(2));
  const a2 = await s1.storeEvent(GET, msg(3));
  await s2.storeEvent(GET, msg(4));

  const own = replay(s1, a1);
  t.equal(await own.done, GET, 'the SDK gets its own stream name back');
  t.same(own.sent.map((e) => e.id), [a2]);

  const foreign = replay(s1, b1);
  await t.rejects(foreign.done, ReplayRefusedError, "another session's id is unknown here");
  t.same(foreign.sent, []);
});

t.test('rejects a bound that is not a positive integer', async (t) => {
  t.throws(() => new BoundedEventStore({ maxEvents: 0 }), RangeError);
  t.throws(() => new BoundedEventStore({ maxEvents: 1.5 }), RangeError);
});
