/**
 * The one contract every Store implementation passes (src/store/types.ts). Time is abstract here:
 * `tick()` lets a little store time pass (the memory store advances its injected clock, the Redis
 * store waits a tenth of its short TTL in real time), and expiry is awaited by ticking with a
 * bounded count.
 */

import { setTimeout as delay } from 'node:timers/promises';
import type { Test } from 'tap';
import type { BindingNote, EventBatch, IncarnationKind, JsonRpcId, NewIncarnation, SessionState, Store } from '../../src/store/types.js';
import { journalContract } from './journal-contract.js';

export interface StoreHarness {
  readonly store: Store;
  /** A second gateway on the same backend: the same store for memory, a second client for Redis. */
  peer(): Promise<Store>;
  /** A TTL that about ten ticks run past. */
  readonly shortTtlMs: number;
  /** Lets a little store time pass (a tenth of shortTtlMs or so). */
  tick(): Promise<void>;
  /** The store's clock, to check createdAt against. */
  now(): number;
  close(): Promise<void>;
}

/** Long enough that nothing bound with it expires during a test; far more than MAX_TICKS ticks. */
const LONG_TTL_MS = 600_000;
/** The journal's fields of a record whose events were recorded without payloads, no pump, no tail. */
const NO_JOURNAL_STATE = { pump: '', pumpUntil: 0, tailUntil: 0, held: false, clientSeq: 0, journaled: false } as const;
/** Bounds every wait for an expiry; a TTL that was wrongly extended to LONG_TTL_MS never gets there. */
const MAX_TICKS = 60;

const ODD_IDS = [
  '{braces}',
  '}{',
  '{a}b',
  '{a}c',
  'with spaces  and\ttab',
  'ünïcødé 会话 🚀',
  'a:b:{c}:session',
  'x'.repeat(1024),
];

/**
 * Redis keeps time itself, so its harness runs on real time: TTLs of seconds and ticks a tenth of
 * that, so that something touched on every tick outlives a stall of the test process (a loaded,
 * shared machine) of up to nine ticks. Expiry waits are bounded by a count of ticks, and a stall
 * only makes each tick longer, so they never end early.
 */
const REDIS_SHORT_TTL_MS = 2_000;
const REDIS_TICK_MS = 200;

/**
 * The harness of a Redis-backed store (single server, Cluster or Sentinel): real time, a key prefix
 * of its own (so the contract's tests run side by side on one backend, apart from each other as the
 * stores of different fleets are: keys and channels are all under the prefix), and every client the
 * test made closed at the end.
 */
export function redisHarness(makeStore: (keyPrefix: string) => Store, prepare?: (keyPrefix: string) => Promise<void>): () => Promise<StoreHarness> {
  let made = 0;
  return async () => {
    const keyPrefix = `contract-${++made}`;
    // A backend that lets each prefix in on its own (an ACL user per fleet) is told of it first.
    await prepare?.(keyPrefix);
    const stores = [makeStore(keyPrefix)];
    return {
      store: stores[0]!,
      peer: async () => {
        const peer = makeStore(keyPrefix);
        stores.push(peer);
        return peer;
      },
      shortTtlMs: REDIS_SHORT_TTL_MS,
      tick: () => delay(REDIS_TICK_MS),
      now: Date.now,
      close: async () => {
        await Promise.all(stores.map((s) => s.close()));
      },
    };
  };
}

/**
 * How many of the contract's tests run at once against a real backend: most of its time is spent
 * waiting for short TTLs to run out in real time, which tests can do side by side.
 */
export const CONTRACT_JOBS = 8;

/**
 * The contract's tests, as subtests of one test; `jobs` of them at a time, for harnesses whose
 * tests are apart from each other (each its own store, or its own key prefix).
 */
export function storeContract(parent: Test, name: string, makeHarness: () => Promise<StoreHarness>, { jobs = 1 }: { jobs?: number } = {}): void {
  parent.test(`${name}: the store contract`, { jobs }, async (t) => contract(t, name, makeHarness));
}

function contract(t: Test, name: string, makeHarness: () => Promise<StoreHarness>): void {
  /** A test with a fresh harness, closed on teardown. */
  function test(title: string, body: (t: Test, h: StoreHarness) => Promise<void>): void {
    t.test(`${name}: ${title}`, async (t) => {
      const h = await makeHarness();
      t.teardown(() => h.close());
      await body(t, h);
    });
  }

  /** Ticks until `done()` holds; fails the test if it does not within MAX_TICKS. */
  async function tickUntil(t: Test, h: StoreHarness, what: string, done: () => Promise<boolean>): Promise<void> {
    for (let i = 0; i < MAX_TICKS; i++) {
      if (await done()) return;
      await h.tick();
    }
    t.fail(`${what}: not within ${MAX_TICKS} ticks`);
  }

  const session = (sessionId: string, owner = 'r1', ownerEpoch = 'e1') => ({ sessionId, owner, ownerEpoch });

  test('bind then touch returns the record', async (t, h) => {
    const before = h.now();
    t.equal(await h.store.bindSession(session('s1', 'replica-a', 'epoch-7'), LONG_TTL_MS), true);
    const after = h.now();
    const record = await h.store.touchSession('s1', LONG_TTL_MS);
    t.match(record, { sessionId: 's1', owner: 'replica-a', ownerEpoch: 'epoch-7', state: 'active' });
    t.ok(record !== null && record.createdAt >= before && record.createdAt <= after, 'createdAt is the bind time');
    t.same(Object.keys(record ?? {}).sort(), ['createdAt', 'owner', 'ownerEpoch', 'sessionId', 'state']);
  });

  test('binding an existing id returns false and keeps the first owner', async (t, h) => {
    t.equal(await h.store.bindSession(session('s1', 'first', 'e1'), LONG_TTL_MS), true);
    t.equal(await h.store.bindSession(session('s1', 'second', 'e2'), LONG_TTL_MS), false);
    t.match(await h.store.touchSession('s1', LONG_TTL_MS), { owner: 'first', ownerEpoch: 'e1' });
  });

  test('concurrent binds of one id from two gateways: exactly one wins', async (t, h) => {
    const other = await h.peer();
    const results = await Promise.all([
      h.store.bindSession(session('s1', 'from-a'), LONG_TTL_MS),
      other.bindSession(session('s1', 'from-b'), LONG_TTL_MS),
    ]);
    t.same(results.filter(Boolean).length, 1, 'one bind succeeded');
    const winner = results[0] ? 'from-a' : 'from-b';
    t.equal((await other.touchSession('s1', LONG_TTL_MS))?.owner, winner);
  });

  test('a session of the HTTP+SSE transport keeps its endpoint; any other has none', async (t, h) => {
    const endpoint = '/messages/?session_id=a b&x={y}';
    t.equal(await h.store.bindSession({ ...session('sse-1'), endpoint }, LONG_TTL_MS), true);
    t.match(await h.store.touchSession('sse-1', LONG_TTL_MS), { sessionId: 'sse-1', state: 'active', endpoint });
    t.match((await (await h.peer()).touchAndRead('sse-1', LONG_TTL_MS)).session, { endpoint }, 'read by another gateway');
    await h.store.endSession('sse-1', 'lost', LONG_TTL_MS);
    t.match(await h.store.touchSession('sse-1', LONG_TTL_MS), { state: 'lost', endpoint }, 'its tombstone too');
    await h.store.bindSession(session('s2'), LONG_TTL_MS);
    t.notOk('endpoint' in ((await h.store.touchSession('s2', LONG_TTL_MS)) ?? {}), 'a Streamable HTTP session has none');
  });

  test('a session keeps the principal it was bound to; setPrincipal changes an active one only', async (t, h) => {
    t.equal(await h.store.bindSession({ ...session('p-1'), principal: 'fp-alice' }, LONG_TTL_MS), true);
    t.match(await h.store.touchSession('p-1', LONG_TTL_MS), { principal: 'fp-alice' });
    await (await h.peer()).setPrincipal('p-1', 'fp-alice-refreshed');
    t.match((await h.store.touchAndRead('p-1', LONG_TTL_MS)).session, { principal: 'fp-alice-refreshed' }, 'set by another gateway, read here');
    await h.store.endSession('p-1', 'terminated', LONG_TTL_MS);
    await h.store.setPrincipal('p-1', 'fp-mallory');
    t.match(await h.store.touchSession('p-1', LONG_TTL_MS), { state: 'terminated', principal: 'fp-alice-refreshed' }, 'an ended session keeps its own');
    await h.store.setPrincipal('nobody', 'fp-mallory');
    t.equal(await h.store.touchSession('nobody', LONG_TTL_MS), null, 'an unknown session is not created');
    await h.store.bindSession(session('p-2'), LONG_TTL_MS);
    t.notOk('principal' in ((await h.store.touchSession('p-2', LONG_TTL_MS)) ?? {}), 'bound without one: none');
  });

  test('touching an unknown session returns null', async (t, h) => {
    t.equal(await h.store.touchSession('nobody', LONG_TTL_MS), null);
  });

  // Every read of an active session extends it, so these tests see expiry through bindSession,
  // which succeeds only once the id is free and changes nothing otherwise.
  const rebound = (h: StoreHarness, sessionId: string) => async () =>
    h.store.bindSession(session(sessionId, 'rebound'), LONG_TTL_MS);

  test('an untouched session expires while a touched one lives on', async (t, h) => {
    await h.store.bindSession(session('idle'), h.shortTtlMs);
    await h.store.bindSession(session('busy'), h.shortTtlMs);
    t.equal(await h.store.bindSession(session('idle', 'rebound'), LONG_TTL_MS), false, 'present at first');
    await tickUntil(t, h, 'idle session expires', async () => {
      t.not(await h.store.touchSession('busy', h.shortTtlMs), null, 'busy session still there');
      return rebound(h, 'idle')();
    });
    t.match(await h.store.touchSession('busy', h.shortTtlMs), { owner: 'r1', state: 'active' });
    t.match(await h.store.touchSession('idle', h.shortTtlMs), { owner: 'rebound' });
  });

  test('a touch sets the idle TTL to the given value', async (t, h) => {
    await h.store.bindSession(session('extended'), h.shortTtlMs);
    await h.store.bindSession(session('control'), h.shortTtlMs);
    await h.store.touchSession('extended', LONG_TTL_MS);
    await tickUntil(t, h, 'control session expires', rebound(h, 'control'));
    t.match(await h.store.touchSession('extended', LONG_TTL_MS), { owner: 'r1', state: 'active' }, 'outlives the TTL it was bound with');
  });

  for (const state of ['terminated', 'lost'] as const) {
    test(`ending a session as ${state} leaves a tombstone that expires`, async (t, h) => {
      await h.store.bindSession(session('s1', 'owner-x', 'e9'), LONG_TTL_MS);
      await h.store.endSession('s1', state, h.shortTtlMs);
      t.match(await h.store.touchSession('s1', LONG_TTL_MS), { sessionId: 's1', owner: 'owner-x', ownerEpoch: 'e9', state });
      t.equal(await h.store.bindSession(session('s1', 'owner-y'), LONG_TTL_MS), false, 'no rebinding a tombstone');
      // Touching with a long TTL each tick: a tombstone must not be kept alive by reads.
      await tickUntil(t, h, 'tombstone expires', async () => (await h.store.touchSession('s1', LONG_TTL_MS)) === null);
    });
  }

  test('ending an ended session keeps its first state and its tombstone TTL', async (t, h) => {
    await h.store.bindSession(session('s1'), LONG_TTL_MS);
    await h.store.endSession('s1', 'lost', h.shortTtlMs);
    await h.store.endSession('s1', 'terminated', LONG_TTL_MS);
    t.match(await h.store.touchSession('s1', LONG_TTL_MS), { state: 'lost' });
    await tickUntil(t, h, 'first tombstone TTL holds', rebound(h, 's1'));
  });

  test('ending an unknown session does nothing', async (t, h) => {
    await h.store.endSession('nobody', 'terminated', LONG_TTL_MS);
    t.equal(await h.store.touchSession('nobody', LONG_TTL_MS), null);
    t.equal(await h.store.bindSession(session('nobody'), LONG_TTL_MS), true, 'the id is still free');
  });

  test('retireReplicaEpoch is a compare-and-set', async (t, h) => {
    t.equal(await h.store.retireReplicaEpoch('r1', '', 'e1'), 'e1', "'' matches a replica without an epoch");
    t.equal(await h.store.retireReplicaEpoch('r1', '', 'e2'), 'e1', 'stale expectation: the epoch in force');
    t.equal(await h.store.retireReplicaEpoch('r1', 'wrong', 'e2'), 'e1');
    t.equal(await h.store.retireReplicaEpoch('r1', 'e1', 'e2'), 'e2');
    t.equal(await h.store.retireReplicaEpoch('r2', 'e1', 'x'), '', "a replica without an epoch reports ''");
    t.same(await h.store.replicaEpochs(), { r1: 'e2' }, 'a failed CAS creates nothing');
  });

  test('concurrent retirements with the same expectation: exactly one wins', async (t, h) => {
    const other = await h.peer();
    const nexts = ['a', 'b', 'c', 'd', 'e', 'f'];
    const results = await Promise.all(
      nexts.map((next, i) => (i % 2 === 0 ? h.store : other).retireReplicaEpoch('r1', '', next)),
    );
    const winner = results[0];
    t.ok(winner !== undefined && nexts.includes(winner), `the winner is one of the candidates (${winner})`);
    t.same(results, nexts.map(() => winner), 'every caller sees the same epoch');
    t.same(await other.replicaEpochs(), { r1: winner });
  });

  test('replicaEpochs lists every replica that has an epoch', async (t, h) => {
    t.same(await h.store.replicaEpochs(), {}, 'none at first');
    await h.store.retireReplicaEpoch('r1', '', 'e1');
    await h.store.retireReplicaEpoch('replica {2}', '', 'e2');
    await h.store.retireReplicaEpoch('r1', 'e1', 'e3');
    t.same(await h.store.replicaEpochs(), { r1: 'e3', 'replica {2}': 'e2' });
  });

  test('session ids with braces, spaces, unicode, 1 KB work and stay apart', async (t, h) => {
    for (const [i, id] of ODD_IDS.entries()) {
      t.equal(await h.store.bindSession(session(id, `owner-${i}`), LONG_TTL_MS), true, `bind ${id.slice(0, 20)}`);
    }
    for (const [i, id] of ODD_IDS.entries()) {
      t.match(await h.store.touchSession(id, LONG_TTL_MS), { sessionId: id, owner: `owner-${i}` }, `touch ${id.slice(0, 20)}`);
    }
    const [ended, ...others] = ODD_IDS as [string, ...string[]];
    await h.store.endSession(ended, 'terminated', LONG_TTL_MS);
    t.match(await h.store.touchSession(ended, LONG_TTL_MS), { sessionId: ended, state: 'terminated' });
    for (const id of others) {
      t.match(await h.store.touchSession(id, LONG_TTL_MS), { state: 'active' }, `not ended: ${id.slice(0, 20)}`);
    }
  });

  incarnationContract(test, tickUntil);
  journalContract(test, tickUntil);
  taskContract(test, tickUntil);
  livenessContract(test, tickUntil);
  bindingsContract(test, tickUntil);

  test('ping resolves', async (t, h) => {
    await t.resolves(h.store.ping());
  });

  test('a closed store rejects every operation with a StoreError', async (t, h) => {
    await h.store.close();
    for (const [op, call] of operations(h.store)) {
      await t.rejects(call(), { name: 'StoreError', code: 'GW_STORE_UNAVAILABLE', op }, op);
    }
  });
}

type ContractTest = (title: string, body: (t: Test, h: StoreHarness) => Promise<void>) => void;
type TickUntil = (t: Test, h: StoreHarness, what: string, done: () => Promise<boolean>) => Promise<void>;

/** Generous enough that no test records past it unless it means to. */
const MANY_POSITIONS = 10_000;

const incarnation = (
  id: string,
  opts: { sessionId?: string; kind?: IncarnationKind; supersede?: boolean; pending?: JsonRpcId[]; owner?: string } = {},
): NewIncarnation => ({
  id,
  sessionId: opts.sessionId ?? 's1',
  owner: opts.owner ?? 'r1',
  kind: opts.kind ?? 'get',
  supersede: opts.supersede ?? opts.kind !== 'post',
  pending: opts.pending ?? [],
});

const batch = (
  fromSeq: number,
  upstreamIds: (string | null)[],
  opts: { attach?: number; responded?: JsonRpcId[]; create?: EventBatch['create'] } = {},
): EventBatch => ({
  attach: opts.attach ?? 1,
  fromSeq,
  upstreamIds,
  responded: opts.responded ?? [],
  ...(opts.create === undefined ? {} : { create: opts.create }),
});

/** What a first batch that creates a POST stream's incarnation carries. */
const creating = (opts: { owner?: string; kind?: IncarnationKind; pending?: JsonRpcId[] } = {}): EventBatch['create'] => ({
  owner: opts.owner ?? 'r1',
  kind: opts.kind ?? 'post',
  pending: opts.pending ?? [],
});

/** The incarnation registry (CONTRACT.md §4, §5): what a resumption decides on. */
function incarnationContract(test: ContractTest, tickUntil: TickUntil): void {
  const bind = (h: StoreHarness, sessionId = 's1') => h.store.bindSession({ sessionId, owner: 'r1', ownerEpoch: 'e1' }, LONG_TTL_MS);
  const record = (store: Store, id: string, b: EventBatch, maxPositions = MANY_POSITIONS, sessionId = 's1') =>
    store.recordEvents(sessionId, id, b, maxPositions, LONG_TTL_MS);
  const read = (store: Store, id: string, afterSeq = 0, sessionId = 's1') => store.readIncarnation(sessionId, id, afterSeq);
  const attach = async (store: Store, id: string, afterSeq = 0, sessionId = 's1') =>
    (await store.attachIncarnation(sessionId, id, LONG_TTL_MS, afterSeq))?.attach ?? null;

  test('incarnations: open then read', async (t, h) => {
    await bind(h);
    await h.store.openIncarnation(incarnation('p1', { kind: 'post', owner: 'replica-b', pending: [1, '1', 'req-x'] }), LONG_TTL_MS);
    const view = await read(h.store, 'p1');
    t.same(view, {
      record: {
        ...NO_JOURNAL_STATE,
        id: 'p1',
        sessionId: 's1',
        owner: 'replica-b',
        kind: 'post',
        state: 'open',
        head: 0,
        base: 0,
        attach: 1,
        pending: [1, '1', 'req-x'],
        journaled: true,
      },
      currentGet: undefined,
      after: [],
      at: null,
    });
    t.same(Object.keys(view?.record ?? {}).sort(), [
      'attach',
      'base',
      'clientSeq',
      'head',
      'held',
      'id',
      'journaled',
      'kind',
      'owner',
      'pending',
      'pump',
      'pumpUntil',
      'sessionId',
      'state',
      'tailUntil',
    ]);
    t.equal(view?.at, null, 'position 0 is recorded, with no upstream id');
    t.strictSame((await read(h.store, 'p1'))?.record.pending, [1, '1', 'req-x'], 'numbers and strings kept apart');
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    t.same((await read(h.store, 'g1'))?.record.pending, [], 'pending defaults to none');
  });

  test('incarnations: opening a recorded id again is refused and changes nothing', async (t, h) => {
    await bind(h);
    await h.store.openIncarnation(incarnation('g1', { owner: 'first' }), LONG_TTL_MS);
    t.equal(await record(h.store, 'g1', batch(1, ['u1'])), 'ok');
    await t.rejects(h.store.openIncarnation(incarnation('g1', { owner: 'second' }), LONG_TTL_MS), { name: 'StoreError', op: 'openIncarnation' });
    t.match((await read(h.store, 'g1'))?.record, { owner: 'first', head: 1 });
    t.equal((await read(h.store, 'g1', 1))?.at, 'u1', 'positions kept');
  });

  test('incarnations: a GET that supersedes becomes current; a POST does not', async (t, h) => {
    await bind(h);
    await h.store.openIncarnation(incarnation('g1', { supersede: true }), LONG_TTL_MS);
    t.equal((await read(h.store, 'g1'))?.currentGet, 'g1');
    await h.store.openIncarnation(incarnation('p1', { kind: 'post', supersede: false }), LONG_TTL_MS);
    t.equal((await read(h.store, 'p1'))?.currentGet, 'g1', 'a POST stream leaves the current GET');
    await h.store.openIncarnation(incarnation('g-resume', { supersede: false }), LONG_TTL_MS);
    t.equal((await read(h.store, 'g1'))?.currentGet, 'g1', 'an incarnation opened without supersede leaves it too');
    const other = await h.peer();
    await other.openIncarnation(incarnation('g2', { supersede: true }), LONG_TTL_MS);
    t.equal((await read(h.store, 'g1'))?.currentGet, 'g2', 'a later GET supersedes the earlier one');
    t.equal((await read(h.store, 'p1'))?.currentGet, 'g2', 'one current GET per session');
    t.match((await read(h.store, 'g1'))?.record, { state: 'open' }, 'the superseded incarnation is still recorded');
  });

  test('incarnations: the current GET is per session, and needs the session', async (t, h) => {
    await bind(h, 's1');
    await bind(h, 's2');
    await h.store.openIncarnation(incarnation('g1', { sessionId: 's1' }), LONG_TTL_MS);
    await h.store.openIncarnation(incarnation('g2', { sessionId: 's2' }), LONG_TTL_MS);
    t.equal((await read(h.store, 'g1', 0, 's1'))?.currentGet, 'g1');
    t.equal((await read(h.store, 'g2', 0, 's2'))?.currentGet, 'g2');
    t.equal(await read(h.store, 'g1', 0, 's2'), null, 'an incarnation is found only under its own session');

    await h.store.openIncarnation(incarnation('g3', { sessionId: 'unbound' }), LONG_TTL_MS);
    const view = await read(h.store, 'g3', 0, 'unbound');
    t.match(view?.record, { sessionId: 'unbound', head: 0 }, 'the incarnation is recorded without a session');
    t.equal(view?.currentGet, undefined, 'but no session record holds it as current');
    t.equal(await h.store.touchSession('unbound', LONG_TTL_MS), null, 'no session record was created');
    t.equal(await h.store.bindSession({ sessionId: 'unbound', owner: 'r1', ownerEpoch: 'e1' }, LONG_TTL_MS), true, 'the id is still free');
    t.equal((await read(h.store, 'g3', 0, 'unbound'))?.currentGet, undefined, 'a new session starts without a current GET');
  });

  test('incarnations: batches advance head, and each position reads back', async (t, h) => {
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    t.equal(await record(h.store, 'g1', batch(1, ['u1', 'u2', 'u3'])), 'ok');
    t.equal(await record(h.store, 'g1', batch(4, [null, 'u5'])), 'ok');
    t.equal(await record(h.store, 'g1', batch(6, [])), 'ok', 'an empty batch is fine');
    t.equal(await record(h.store, 'g1', batch(6, ['u6'])), 'ok', 'and issues nothing');
    t.match((await read(h.store, 'g1'))?.record, { head: 6, base: 0, attach: 1 });
    const expected: [number, string | null | undefined, (string | null)[]][] = [
      [-1, undefined, []],
      [0, null, ['u1', 'u2', 'u3', null, 'u5', 'u6']],
      [2, 'u2', ['u3', null, 'u5', 'u6']],
      [4, null, ['u5', 'u6']],
      [6, 'u6', []],
      [7, undefined, []],
      [2.5, undefined, []],
    ];
    for (const [seq, at, after] of expected) {
      const view = await read(h.store, 'g1', seq);
      t.equal(view?.at, at, `at ${seq}`);
      t.same(view?.after, after, `after ${seq}`);
    }
  });

  test('incarnations: a batch of thousands of events is recorded whole', async (t, h) => {
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    const ids = Array.from({ length: 2_500 }, (_, i) => (i % 7 === 0 ? null : `u${i + 1}`));
    t.equal(await record(h.store, 'g1', batch(1, ids)), 'ok');
    const view = await read(h.store, 'g1', 0);
    t.match(view?.record, { head: 2_500, base: 0 });
    t.same(view?.after, ids);
    t.equal((await read(h.store, 'g1', 2_499))?.at, 'u2499');
    t.equal((await read(h.store, 'g1', 2_500))?.at, null, 'position 2500 is one of the nulls');
  });

  test('incarnations: null and empty upstream ids read back as null', async (t, h) => {
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    t.equal(await record(h.store, 'g1', batch(1, [null, '', 'null', '0', ' '])), 'ok');
    const view = await read(h.store, 'g1', 1);
    t.equal(view?.at, null);
    t.same(view?.after, [null, 'null', '0', ' '], "'' is no upstream id (SSE: an empty id resets it)");
  });

  test('incarnations: a batch of a stale attachment is refused', async (t, h) => {
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    t.equal(await record(h.store, 'g1', batch(1, ['u1'])), 'ok');
    const other = await h.peer();
    t.equal(await attach(other, 'g1'), 2, 'a continuation attaches');
    t.equal(await record(h.store, 'g1', batch(2, ['old'], { attach: 1 })), 'stale', 'the previous connection is refused');
    t.equal(await record(h.store, 'g1', batch(2, ['future'], { attach: 3 })), 'stale', 'an attachment not yet issued too');
    t.equal(await record(other, 'g1', batch(2, ['new'], { attach: 2 })), 'ok');
    t.equal(await attach(h.store, 'g1'), 3);
    t.equal(await record(other, 'g1', batch(3, ['x'], { attach: 2 })), 'stale');
    const view = await read(h.store, 'g1', 0);
    t.match(view?.record, { head: 2, attach: 3 });
    t.same(view?.after, ['u1', 'new'], 'only current attachments recorded');
  });

  test('incarnations: fromSeq must be head + 1', async (t, h) => {
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    t.equal(await record(h.store, 'g1', batch(0, ['a'])), 'stale', 'position 0 is never issued');
    t.equal(await record(h.store, 'g1', batch(2, ['a'])), 'stale', 'no gap');
    t.equal(await record(h.store, 'g1', batch(1, ['a', 'b'])), 'ok');
    t.equal(await record(h.store, 'g1', batch(2, ['c'])), 'stale', 'no position issued twice');
    t.equal(await record(h.store, 'g1', batch(1, ['c'])), 'stale');
    t.equal(await record(h.store, 'g1', batch(1, ['a', 'b'])), 'ok', 'only the same batch again is ok (a retry)');
    const view = await read(h.store, 'g1', 0);
    t.match(view?.record, { head: 2 });
    t.same(view?.after, ['a', 'b'], 'refused batches changed nothing');
  });

  test('incarnations: a batch retried after it landed is ok and changes nothing', async (t, h) => {
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    t.equal(await record(h.store, 'g1', batch(1, ['a', 'b'])), 'ok');
    t.equal(await record(h.store, 'g1', batch(3, ['c'])), 'ok');
    t.equal(await record(h.store, 'g1', batch(1, ['a', 'b'])), 'ok', 'the same ids at the same positions: a retry');
    t.equal(await record(h.store, 'g1', batch(3, ['c'])), 'ok');
    t.equal(await record(h.store, 'g1', batch(2, ['b', 'c'])), 'ok', 'a retry is recognised by its positions');
    t.equal(await record(h.store, 'g1', batch(3, ['x'])), 'stale', 'other ids at those positions: another writer');
    t.equal(await record(h.store, 'g1', batch(3, ['c', 'd'])), 'stale', 'reaching past the head is not a retry');
    t.same((await read(h.store, 'g1', 0))?.after, ['a', 'b', 'c'], 'nothing changed');
  });

  test('incarnations: writers racing for the same fromSeq: exactly one wins', async (t, h) => {
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    const stores = [h.store, await h.peer(), h.store, await h.peer()];
    const results = await Promise.all(stores.map((store, i) => record(store, 'g1', batch(1, [`w${i}-a`, `w${i}-b`]))));
    t.equal(results.filter((r) => r === 'ok').length, 1, `one ok (${results.join(', ')})`);
    t.equal(results.filter((r) => r === 'stale').length, stores.length - 1, 'the others are stale');
    const winner = results.indexOf('ok');
    const view = await read(h.store, 'g1', 0);
    t.match(view?.record, { head: 2 });
    t.same(view?.after, [`w${winner}-a`, `w${winner}-b`], "the winner's batch, whole");
  });

  test('incarnations: a first batch with create creates the incarnation', async (t, h) => {
    await bind(h);
    const create = creating({ owner: 'replica-b', pending: [1, '1', 'req-x', 1] });
    t.equal(await read(h.store, 'p1'), null, 'not recorded before');
    t.equal(await record(h.store, 'p1', batch(1, ['u1', null], { create, responded: ['1', 1] })), 'ok');
    const view = await read(h.store, 'p1');
    t.same(view, {
      record: { ...NO_JOURNAL_STATE, id: 'p1', sessionId: 's1', owner: 'replica-b', kind: 'post', state: 'open', head: 2, base: 0, attach: 1, pending: ['req-x', 1] },
      currentGet: undefined,
      after: ['u1', null],
      at: null,
    });
    t.strictSame(view?.record.pending, ['req-x', 1], 'each responded id settled one pending, 1 and "1" apart');
    const other = await h.peer();
    t.equal(await record(other, 'p1', batch(3, ['u3'], { responded: [1, 1, 'req-x'] })), 'ok', 'the next batch follows without create');
    t.match((await read(other, 'p1', 2))?.record, { head: 3, pending: [] });
    t.same((await read(other, 'p1', 2))?.after, ['u3']);

    t.equal(await record(h.store, 'p-empty', batch(1, [], { create: creating({ kind: 'get', pending: [5] }) })), 'ok', 'an empty first batch');
    t.match((await read(h.store, 'p-empty'))?.record, { kind: 'get', head: 0, base: 0, attach: 1, pending: [5] }, 'creates it at head 0');
    t.equal(await record(h.store, 'p-empty', batch(1, ['u1'])), 'ok', 'and its first event is still seq 1');
  });

  test('incarnations: one created by a batch lives for ttlMs, like one opened', async (t, h) => {
    t.equal(await h.store.recordEvents('s1', 'short', batch(1, ['u1'], { create: creating() }), MANY_POSITIONS, h.shortTtlMs), 'ok');
    t.equal(await h.store.recordEvents('s1', 'long', batch(1, ['u1'], { create: creating() }), MANY_POSITIONS, LONG_TTL_MS), 'ok');
    t.not(await read(h.store, 'short'), null, 'recorded at first');
    await tickUntil(t, h, 'incarnation created with a short TTL expires', async () => (await read(h.store, 'short')) === null);
    t.match((await read(h.store, 'long'))?.record, { head: 1 }, 'the one created with a long TTL lives on');
  });

  test('incarnations: a batch with ttlMs 0 leaves the TTL as it was; one that creates must give one', async (t, h) => {
    t.equal(await h.store.recordEvents('s1', 'short', batch(1, ['u1'], { create: creating() }), MANY_POSITIONS, h.shortTtlMs), 'ok');
    t.equal(await h.store.recordEvents('s1', 'long', batch(1, ['u1'], { create: creating() }), MANY_POSITIONS, LONG_TTL_MS), 'ok');
    t.equal(await h.store.recordEvents('s1', 'short', batch(2, ['u2']), MANY_POSITIONS, 0), 'ok', 'recorded without extending');
    t.equal(await h.store.recordEvents('s1', 'long', batch(2, ['u2']), MANY_POSITIONS, 0), 'ok');
    await tickUntil(t, h, 'the short TTL runs out as set by the first batch', async () => (await read(h.store, 'short')) === null);
    t.match((await read(h.store, 'long'))?.record, { head: 2 }, 'the long one keeps its TTL, not 0');
    await t.rejects(h.store.recordEvents('s1', 'zero', batch(1, ['u1'], { create: creating() }), MANY_POSITIONS, 0), { name: 'StoreError', op: 'recordEvents' });
    t.equal(await read(h.store, 'zero'), null, 'and nothing was created');
  });

  test('incarnations: a first batch with create retried after it landed is ok and records nothing twice', async (t, h) => {
    const first = batch(1, ['a', 'b'], { create: creating({ pending: [1, 1, 2] }), responded: [1] });
    t.equal(await record(h.store, 'p1', first), 'ok');
    t.equal(await record(h.store, 'p1', first), 'ok', 'a retry');
    let view = await read(h.store, 'p1');
    t.match(view?.record, { head: 2, attach: 1 });
    t.same(view?.after, ['a', 'b'], 'its events once');
    t.strictSame(view?.record.pending, [1, 2], 'its response settled one request, once');
    t.equal(await record(h.store, 'p1', batch(3, ['c'])), 'ok');
    t.equal(await record(h.store, 'p1', first), 'ok', 'a retry that arrives after the next batch');
    view = await read(h.store, 'p1');
    t.match(view?.record, { head: 3 });
    t.same(view?.after, ['a', 'b', 'c']);
    t.strictSame(view?.record.pending, [1, 2]);
  });

  test('incarnations: another first batch with open after one landed is stale and changes nothing', async (t, h) => {
    t.equal(await record(h.store, 'p1', batch(1, ['a'], { create: creating({ owner: 'first', pending: [1, 2] }) })), 'ok');
    const other = await h.peer();
    const second = batch(1, ['x'], { create: creating({ owner: 'second', kind: 'get', pending: [9] }), responded: [1] });
    t.equal(await record(other, 'p1', second), 'stale');
    const view = await read(h.store, 'p1');
    t.match(view?.record, { owner: 'first', kind: 'post', head: 1 });
    t.strictSame(view?.record.pending, [1, 2], 'the refused batch settled nothing');
    t.same(view?.after, ['a']);
  });

  test('incarnations: writers racing to create the same incarnation: exactly one wins', async (t, h) => {
    const stores = [h.store, await h.peer(), h.store, await h.peer()];
    const results = await Promise.all(
      stores.map((store, i) => record(store, 'p1', batch(1, [`w${i}`], { create: creating({ owner: `o${i}` }) }))),
    );
    t.equal(results.filter((r) => r === 'ok').length, 1, `one ok (${results.join(', ')})`);
    t.equal(results.filter((r) => r === 'stale').length, stores.length - 1, 'the others are stale');
    const winner = results.indexOf('ok');
    const view = await read(h.store, 'p1');
    t.match(view?.record, { owner: `o${winner}`, head: 1 });
    t.same(view?.after, [`w${winner}`], "the winner's batch, alone");
  });

  test('incarnations: create on a recorded incarnation records as without it', async (t, h) => {
    await h.store.openIncarnation(incarnation('p1', { kind: 'post', owner: 'opened', pending: [1, 2] }), LONG_TTL_MS);
    const create = creating({ owner: 'other', kind: 'get', pending: [9] });
    t.equal(await record(h.store, 'p1', batch(1, ['u1'], { create, responded: [1] })), 'ok');
    const view = await read(h.store, 'p1');
    t.match(view?.record, { owner: 'opened', kind: 'post', head: 1, attach: 1 }, 'owner and kind are the recorded ones');
    t.strictSame(view?.record.pending, [2], 'pending is the recorded one, settled as usual');
    t.same(view?.after, ['u1']);

    t.equal(await attach(h.store, 'p1'), 2);
    t.equal(await record(h.store, 'p1', batch(1, ['u1'], { create })), 'stale', 'a batch of a stale attachment, even one that landed');
    t.equal(await record(h.store, 'p1', batch(2, ['u2'], { attach: 2 })), 'ok');
    await h.store.closeIncarnation('s1', 'p1');
    t.equal(await record(h.store, 'p-closed', batch(1, ['u1'], { create })), 'ok');
    await h.store.closeIncarnation('s1', 'p-closed');
    t.equal(await record(h.store, 'p-closed', batch(1, ['u1'], { create })), 'stale', 'a closed incarnation is never reopened');
    t.match((await read(h.store, 'p-closed'))?.record, { state: 'closed', head: 1, attach: 1 });
    t.match((await read(h.store, 'p1'))?.record, { state: 'closed', head: 2, attach: 2 }, 'nothing changed');
  });

  test('incarnations: create never changes the current GET', async (t, h) => {
    await bind(h, 's1');
    await h.store.openIncarnation(incarnation('g1', { sessionId: 's1', supersede: true }), LONG_TTL_MS);
    t.equal(await record(h.store, 'g2', batch(1, ['u1'], { create: creating({ kind: 'get' }) })), 'ok');
    t.equal(await record(h.store, 'p1', batch(1, ['u1'], { create: creating({ kind: 'post' }) })), 'ok');
    t.equal((await read(h.store, 'g2'))?.currentGet, 'g1', 'a GET created by a batch does not supersede');
    t.equal((await read(h.store, 'g1'))?.currentGet, 'g1');

    await bind(h, 's2');
    t.equal(await record(h.store, 'g3', batch(1, ['u1'], { create: creating({ kind: 'get' }) }), MANY_POSITIONS, 's2'), 'ok');
    t.equal((await read(h.store, 'g3', 0, 's2'))?.currentGet, undefined, 'nor becomes the first current GET');

    t.equal(await record(h.store, 'g4', batch(1, ['u1'], { create: creating({ kind: 'get' }) }), MANY_POSITIONS, 'unbound'), 'ok');
    t.match((await read(h.store, 'g4', 0, 'unbound'))?.record, { sessionId: 'unbound', head: 1 }, 'no session needed');
    t.equal(await h.store.touchSession('unbound', LONG_TTL_MS), null, 'and none is created');
  });

  test('incarnations: create with another attach or fromSeq than 1 is refused', async (t, h) => {
    for (const [attach, fromSeq] of [[2, 1], [1, 2], [2, 2]] as const) {
      const refused = batch(fromSeq, ['u1'], { attach, create: creating() });
      await t.rejects(record(h.store, 'p-new', refused), { name: 'StoreError', op: 'recordEvents' }, `attach ${attach}, fromSeq ${fromSeq}`);
    }
    t.equal(await read(h.store, 'p-new'), null, 'nothing created');

    await h.store.openIncarnation(incarnation('p1', { kind: 'post' }), LONG_TTL_MS);
    t.equal(await record(h.store, 'p1', batch(1, ['u1'])), 'ok');
    t.equal(await attach(h.store, 'p1'), 2);
    await t.rejects(record(h.store, 'p1', batch(2, ['u2'], { attach: 2, create: creating() })), { name: 'StoreError', op: 'recordEvents' });
    t.match((await read(h.store, 'p1'))?.record, { head: 1 }, 'nothing recorded, though the same batch without create would be');
    t.equal(await record(h.store, 'p1', batch(2, ['u2'], { attach: 2 })), 'ok');
  });

  test('incarnations: a batch with an upstream id holding LF is refused whole; other odd ids are kept exactly', async (t, h) => {
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    await t.rejects(record(h.store, 'g1', batch(1, ['u1', 'a\nb'])), { name: 'StoreError', op: 'recordEvents' });
    await t.rejects(record(h.store, 'p-new', batch(1, ['a\n'], { create: creating() })), { name: 'StoreError', op: 'recordEvents' });
    t.equal(await read(h.store, 'p-new'), null, 'nothing created');
    t.match((await read(h.store, 'g1'))?.record, { head: 0 }, 'nothing recorded');
    const odd = ['', 'a\rb', ' spaced ', 'ü🚀', '\\n', null, 'x'.repeat(2048), ''];
    t.equal(await record(h.store, 'g1', batch(1, odd)), 'ok');
    t.same((await read(h.store, 'g1', 0))?.after, odd.map((id) => (id === '' ? null : id)), 'every id as it was, in order');
  });

  test('incarnations: responded requests leave pending, ids compared exactly', async (t, h) => {
    const odd = ['a"b', 'c\\d', ',', ']', '[1]', 'ü🚀', ''];
    await h.store.openIncarnation(incarnation('p1', { kind: 'post', pending: [1, '1', 7, 2, 'x', 7, 1e21, 12345678901234567, 0.5, ...odd] }), LONG_TTL_MS);
    const pending = async () => (await read(h.store, 'p1'))?.record.pending;
    let seq = 1;
    const respond = (responded: JsonRpcId[]) => record(h.store, 'p1', batch(seq++, ['u'], { responded }));

    t.equal(await respond(['1']), 'ok');
    t.strictSame(await pending(), [1, 7, 2, 'x', 7, 1e21, 12345678901234567, 0.5, ...odd], '"1" settles "1", not 1');
    await respond([2, 'x']);
    t.strictSame(await pending(), [1, 7, 7, 1e21, 12345678901234567, 0.5, ...odd], 'several in one batch');
    await respond(['2', 3, 'y', '7']);
    t.strictSame(await pending(), [1, 7, 7, 1e21, 12345678901234567, 0.5, ...odd], 'unknown ids change nothing');
    await respond([7]);
    t.strictSame(await pending(), [1, 7, 1e21, 12345678901234567, 0.5, ...odd], 'one response settles one request');
    await respond([1e21, 12345678901234567, 0.5]);
    t.strictSame(await pending(), [1, 7, ...odd], 'large and fractional numbers match themselves');
    await respond(odd.slice(0, 3));
    t.strictSame(await pending(), [1, 7, ...odd.slice(3)], 'strings with quotes, backslashes and commas');
    t.equal(await record(h.store, 'p1', batch(seq, ['u'], { attach: 9, responded: [1, 7, ...odd.slice(3)] })), 'stale');
    t.strictSame(await pending(), [1, 7, ...odd.slice(3)], 'a refused batch settles nothing');
    await respond([1, 7, ...odd.slice(3)]);
    t.strictSame(await pending(), [], 'all settled');
    await respond([1]);
    t.strictSame(await pending(), [], 'settling again is harmless');
  });

  test('incarnations: at most maxPositions are kept, raising base', async (t, h) => {
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    for (let seq = 1; seq <= 5; seq++) t.equal(await record(h.store, 'g1', batch(seq, [`u${seq}`]), 3), 'ok');
    let view = await read(h.store, 'g1', 3);
    t.match(view?.record, { head: 5, base: 3 }, 'positions 3..5 kept');
    t.equal(view?.at, 'u3');
    t.same(view?.after, ['u4', 'u5']);
    for (const seq of [0, 1, 2]) {
      view = await read(h.store, 'g1', seq);
      t.equal(view?.at, undefined, `position ${seq} is no longer recorded`);
      t.same(view?.after, [], `nothing is offered after ${seq}`);
    }

    t.equal(await record(h.store, 'g1', batch(6, ['u6', 'u7', 'u8', 'u9', 'u10', 'u11', 'u12']), 4), 'ok', 'a batch longer than the limit');
    view = await read(h.store, 'g1', 9);
    t.match(view?.record, { head: 12, base: 9 });
    t.equal(view?.at, 'u9');
    t.same(view?.after, ['u10', 'u11', 'u12']);
    t.equal((await read(h.store, 'g1', 8))?.at, undefined);

    t.equal(await record(h.store, 'g1', batch(13, ['u13']), 1), 'ok');
    view = await read(h.store, 'g1', 13);
    t.match(view?.record, { head: 13, base: 13 }, 'maxPositions 1 keeps the head');
    t.equal(view?.at, 'u13');
    t.equal(await record(h.store, 'g1', batch(14, ['u14']), 0), 'ok');
    t.match((await read(h.store, 'g1', 14))?.record, { head: 14, base: 14 }, 'even a limit below 1 keeps the head');
    t.equal((await read(h.store, 'g1', 14))?.at, 'u14');

    t.equal(await record(h.store, 'g1', batch(15, ['u15', 'u16']), 100), 'ok', 'a larger limit later keeps more from then on');
    view = await read(h.store, 'g1', 14);
    t.match(view?.record, { head: 16, base: 14 });
    t.same(view?.after, ['u15', 'u16']);
  });

  test('incarnations: a closed incarnation says so and takes no more events', async (t, h) => {
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    t.equal(await record(h.store, 'g1', batch(1, ['u1'])), 'ok');
    await h.store.closeIncarnation('s1', 'g1');
    const view = await read(h.store, 'g1', 0);
    t.match(view?.record, { state: 'closed', head: 1 });
    t.same(view?.after, ['u1'], 'its positions stay readable');
    t.equal(await record(h.store, 'g1', batch(2, ['u2'])), 'stale', 'nothing follows a closed incarnation');
    await h.store.closeIncarnation('s1', 'g1');
    t.match((await read(h.store, 'g1'))?.record, { state: 'closed', head: 1 }, 'closing twice is harmless');
  });

  test('incarnations: a diverged incarnation (E6) says so, takes no more events, and stays diverged', async (t, h) => {
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    t.equal(await record(h.store, 'g1', batch(1, ['u1', 'u2'])), 'ok');
    await h.store.closeIncarnation('s1', 'g1', 'diverged');
    const view = await read(h.store, 'g1', 0);
    t.match(view?.record, { state: 'diverged', head: 2 });
    t.same(view?.after, ['u1', 'u2'], 'its positions stay readable');
    t.equal(await record(h.store, 'g1', batch(3, ['u3'])), 'stale', 'nothing follows it');
    await h.store.closeIncarnation('s1', 'g1');
    t.match((await read(h.store, 'g1'))?.record, { state: 'diverged' }, 'a close after it leaves it diverged');
  });

  test('incarnations: one that is not recorded is missing everywhere', async (t, h) => {
    await bind(h);
    t.equal(await read(h.store, 'nope'), null);
    t.equal(await h.store.attachIncarnation('s1', 'nope', LONG_TTL_MS, 0), null);
    t.equal(await record(h.store, 'nope', batch(1, ['u1'])), 'missing');
    await h.store.closeIncarnation('s1', 'nope');
    await h.store.touchIncarnation('s1', 'nope', LONG_TTL_MS);
    t.equal(await read(h.store, 'nope'), null, 'close and touch create nothing');
  });

  test('incarnations: an idle one expires; touch, record and attach extend it', async (t, h) => {
    const ids = ['idle', 'touched', 'recorded', 'attached'];
    for (const id of ids) await h.store.openIncarnation(incarnation(id, { supersede: false }), h.shortTtlMs);
    let seq = 1;
    await tickUntil(t, h, 'idle incarnation expires', async () => {
      await h.store.touchIncarnation('s1', 'touched', h.shortTtlMs);
      t.equal(await h.store.recordEvents('s1', 'recorded', batch(seq, [`u${seq}`]), MANY_POSITIONS, h.shortTtlMs), 'ok');
      seq++;
      t.not(await h.store.attachIncarnation('s1', 'attached', h.shortTtlMs, 0), null);
      return (await read(h.store, 'idle')) === null;
    });
    for (const id of ids.slice(1)) t.not(await read(h.store, id), null, `${id} lives on`);
    t.equal((await read(h.store, 'recorded', 1))?.at, 'u1', 'with its positions');
    t.equal(await record(h.store, 'idle', batch(1, ['late'])), 'missing', 'an expired one takes no events');
    t.equal(await h.store.attachIncarnation('s1', 'idle', LONG_TTL_MS, 0), null);
  });

  test('incarnations: a touch sets the TTL to the given value; close and read leave it', async (t, h) => {
    for (const id of ['extended', 'control', 'closed']) await h.store.openIncarnation(incarnation(id), h.shortTtlMs);
    await h.store.touchIncarnation('s1', 'extended', LONG_TTL_MS);
    await h.store.closeIncarnation('s1', 'closed');
    await tickUntil(t, h, 'control incarnation expires', async () => {
      await read(h.store, 'closed');
      return (await read(h.store, 'control')) === null;
    });
    t.match((await read(h.store, 'extended'))?.record, { state: 'open' }, 'outlives the TTL it was opened with');
    await tickUntil(t, h, 'closed incarnation expires', async () => (await read(h.store, 'closed')) === null);
  });

  test('incarnations: ending the session leaves its incarnations to their own TTL', async (t, h) => {
    await bind(h);
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    await h.store.endSession('s1', 'terminated', LONG_TTL_MS);
    const view = await read(h.store, 'g1');
    t.match(view?.record, { state: 'open' });
    t.equal(view?.currentGet, 'g1', 'a tombstone still names the current GET');
  });

  test('inspectSession: the record, the current GET and the incarnations newest first, apart from other sessions', async (t, h) => {
    t.same(await h.store.inspectSession('s1', 10), { session: null, currentGet: undefined, incarnations: [] }, 'nothing held');
    await bind(h);
    await bind(h, 'other');
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    t.equal(await record(h.store, 'g1', batch(1, ['u1', 'u2'])), 'ok');
    await h.tick();
    t.equal(await record(h.store, 'p1', batch(1, ['u1'], { create: creating({ pending: [7] }) })), 'ok', 'a POST stream created by its first batch');
    await h.tick();
    await h.store.openIncarnation(incarnation('g2'), LONG_TTL_MS);
    await h.store.closeIncarnation('s1', 'g1');
    await h.store.openIncarnation(incarnation('x1', { sessionId: 'other' }), LONG_TTL_MS);
    const seen = await (await h.peer()).inspectSession('s1', 10);
    t.match(seen.session, { sessionId: 's1', owner: 'r1', ownerEpoch: 'e1', state: 'active' });
    t.equal(seen.currentGet, 'g2');
    t.same(seen.incarnations.map((i) => i.id), ['g2', 'p1', 'g1'], 'newest first, none of another session');
    t.match(seen.incarnations[1], { id: 'p1', sessionId: 's1', owner: 'r1', kind: 'post', state: 'open', head: 1, base: 0, attach: 1, pending: [7] });
    t.match(seen.incarnations[2], { id: 'g1', kind: 'get', state: 'closed', head: 2 });
    t.same((await h.store.inspectSession('s1', 2)).incarnations.map((i) => i.id), ['g2', 'p1'], 'at most the limit');
    t.same((await h.store.inspectSession('s1', 0)).incarnations, [], 'none with limit 0');
    await h.store.endSession('s1', 'lost', LONG_TTL_MS);
    t.match((await h.store.inspectSession('s1', 10)).session, { state: 'lost' }, 'a tombstone too');
  });

  test('inspectSession: touches nothing, and expired incarnations are not listed', async (t, h) => {
    await h.store.bindSession({ sessionId: 'idle', owner: 'r1', ownerEpoch: 'e1' }, h.shortTtlMs);
    await h.store.openIncarnation(incarnation('short', { sessionId: 'idle' }), h.shortTtlMs);
    await h.tick();
    await h.store.openIncarnation(incarnation('long', { sessionId: 'idle', supersede: false }), LONG_TTL_MS);
    t.same((await h.store.inspectSession('idle', 10)).incarnations.map((i) => i.id), ['long', 'short']);
    await tickUntil(t, h, 'the inspected session expires', async () => (await h.store.inspectSession('idle', 10)).session === null);
    // The short incarnation was opened after the session, so it may outlive it by as long as that
    // took: it goes too, however often it is inspected.
    const listed = async () => (await h.store.inspectSession('idle', 10)).incarnations.map((i) => i.id);
    await tickUntil(t, h, 'the short incarnation expires', async () => !(await listed()).includes('short'));
    const after = await h.store.inspectSession('idle', 10);
    t.same(after.incarnations.map((i) => i.id), ['long'], 'the expired incarnation is gone, the other one listed');
  });

  test('incarnations: odd session and incarnation ids work and stay apart', async (t, h) => {
    const incIds = ['{braces}', 'a', 'a:ids', 'pos:a', 'inc:a', 'a}{', 'ünï 🚀', 'y'.repeat(300)];
    for (const sessionId of ODD_IDS) await bind(h, sessionId);
    for (const [i, sessionId] of ODD_IDS.entries()) {
      for (const [j, id] of incIds.entries()) {
        await h.store.openIncarnation(incarnation(id, { sessionId, owner: `o${i}-${j}` }), LONG_TTL_MS);
        t.equal(await record(h.store, id, batch(1, [`u${i}-${j}`]), MANY_POSITIONS, sessionId), 'ok');
      }
    }
    for (const [i, sessionId] of ODD_IDS.entries()) {
      for (const [j, id] of incIds.entries()) {
        const view = await read(h.store, id, 0, sessionId);
        t.match(view?.record, { id, sessionId, owner: `o${i}-${j}`, head: 1 }, `${sessionId.slice(0, 12)} / ${id.slice(0, 12)}`);
        t.same(view?.after, [`u${i}-${j}`]);
      }
      t.equal((await read(h.store, incIds[0]!, 0, sessionId))?.currentGet, incIds.at(-1), 'the last GET opened is current');
    }
  });

  test("touchAndRead: what touchSession then readIncarnation return, whatever the session's state", async (t, h) => {
    const sessions: [string, SessionState | undefined][] = [['s-active', 'active'], ['s-ended', 'lost'], ['s-unknown', undefined]];
    for (const [sessionId, state] of sessions) {
      if (state !== undefined) await bind(h, sessionId);
      await h.store.openIncarnation(incarnation('g1', { sessionId }), LONG_TTL_MS);
      for (let seq = 1; seq <= 5; seq++) t.equal(await record(h.store, 'g1', batch(seq, [`${sessionId}-u${seq}`]), 3, sessionId), 'ok');
    }
    await h.store.openIncarnation(incarnation('p1', { sessionId: 's-active', kind: 'post', pending: [1, '1', 'x'] }), LONG_TTL_MS);
    await h.store.endSession('s-ended', 'lost', LONG_TTL_MS);

    /** touchAndRead, checked against touchSession then readIncarnation right after it. */
    const both = async (sessionId: string, read?: { incarnationId: string; afterSeq: number }) => {
      const together = await h.store.touchAndRead(sessionId, LONG_TTL_MS, read);
      const session = await h.store.touchSession(sessionId, LONG_TTL_MS);
      const view = read === undefined ? null : await h.store.readIncarnation(sessionId, read.incarnationId, read.afterSeq);
      t.same(together, { session, view }, `${sessionId} ${JSON.stringify(read)}: as touchSession then readIncarnation`);
      return together;
    };
    // base 3, head 5: [afterSeq, at, after], each upstream id without its session prefix.
    const positions: [number, string | undefined, string[]][] = [
      [4, 'u4', ['u5']],
      [3, 'u3', ['u4', 'u5']],
      [5, 'u5', []],
      [2, undefined, []],
      [0, undefined, []],
      [6, undefined, []],
      [2.5, undefined, []],
    ];
    for (const [sessionId, state] of sessions) {
      const sessionIs = (actual: unknown, what: string) =>
        state === undefined ? t.equal(actual, null, `${what}: no session`) : t.match(actual, { sessionId, owner: 'r1', ownerEpoch: 'e1', state }, what);

      const bare = await both(sessionId);
      sessionIs(bare.session, `${sessionId} without read`);
      t.equal(bare.view, null, 'nothing named, nothing read');

      for (const [afterSeq, at, after] of positions) {
        const { session, view } = await both(sessionId, { incarnationId: 'g1', afterSeq });
        const what = `${sessionId} after ${afterSeq}`;
        sessionIs(session, what);
        t.match(view?.record, { id: 'g1', sessionId, kind: 'get', state: 'open', head: 5, base: 3, attach: 1 }, what);
        t.equal(view?.currentGet, state === undefined ? undefined : 'g1', `${what}: the current GET, named by the session record or its tombstone`);
        t.equal(view?.at, at === undefined ? undefined : `${sessionId}-${at}`, `${what}: at`);
        t.same(view?.after, after.map((id) => `${sessionId}-${id}`), `${what}: after`);
      }

      const post = await both(sessionId, { incarnationId: 'p1', afterSeq: 0 });
      sessionIs(post.session, `${sessionId}, p1`);
      if (sessionId === 's-active') {
        t.match(post.view?.record, { id: 'p1', kind: 'post', head: 0 });
        t.strictSame(post.view?.record.pending, [1, '1', 'x']);
        t.equal(post.view?.at, null, 'position 0, no upstream id');
      } else {
        t.equal(post.view, null, `${sessionId}: an incarnation of another session is not found`);
      }
      t.equal((await both(sessionId, { incarnationId: 'nope', afterSeq: 0 })).view, null, `${sessionId}: unknown incarnation`);
    }
  });

  test('touchAndRead: extends an active session like touchSession, neither a tombstone nor the incarnation', async (t, h) => {
    const rebound = async (sessionId: string) => h.store.bindSession({ sessionId, owner: 'rebound', ownerEpoch: 'e1' }, LONG_TTL_MS);
    for (const sessionId of ['read', 'bare', 'control', 'ended']) {
      await h.store.bindSession({ sessionId, owner: 'r1', ownerEpoch: 'e1' }, h.shortTtlMs);
    }
    await h.store.endSession('ended', 'terminated', h.shortTtlMs);
    await h.store.openIncarnation(incarnation('g1', { sessionId: 'read' }), h.shortTtlMs);
    await h.store.openIncarnation(incarnation('g1', { sessionId: 'ended' }), LONG_TTL_MS);
    t.match((await h.store.touchAndRead('bare', LONG_TTL_MS)).session, { state: 'active' });
    const g1 = { incarnationId: 'g1', afterSeq: 0 };
    // Read with a long TTL on every tick: neither the incarnation nor the tombstone may live on.
    await tickUntil(t, h, 'the incarnation and the tombstone expire', async () => {
      const read = await h.store.touchAndRead('read', LONG_TTL_MS, g1);
      t.match(read.session, { state: 'active' });
      const ended = await h.store.touchAndRead('ended', LONG_TTL_MS, g1);
      t.not(ended.view, null, "the tombstone's incarnation is read");
      return read.view === null && ended.session === null;
    });
    await tickUntil(t, h, 'the control session expires', async () => rebound('control'));
    t.match(await h.store.touchSession('read', LONG_TTL_MS), { owner: 'r1', state: 'active' }, 'outlives the TTL it was bound with');
    t.match(await h.store.touchSession('bare', LONG_TTL_MS), { owner: 'r1', state: 'active' }, 'without read too');
    t.equal(await rebound('ended'), true, 'the tombstone is gone');
  });

  test('touchAndRead: session ids with braces and the like', async (t, h) => {
    for (const [i, sessionId] of ODD_IDS.entries()) {
      await bind(h, sessionId);
      await h.store.openIncarnation(incarnation('{x}y', { sessionId, owner: `o${i}` }), LONG_TTL_MS);
      t.equal(await record(h.store, '{x}y', batch(1, [`u${i}`]), MANY_POSITIONS, sessionId), 'ok');
    }
    for (const [i, sessionId] of ODD_IDS.entries()) {
      const { session, view } = await h.store.touchAndRead(sessionId, LONG_TTL_MS, { incarnationId: '{x}y', afterSeq: 0 });
      t.match(session, { sessionId, state: 'active' }, sessionId.slice(0, 20));
      t.match(view, { record: { id: '{x}y', sessionId, owner: `o${i}` }, currentGet: '{x}y', after: [`u${i}`] });
      const attached = await h.store.attachIncarnation(sessionId, '{x}y', LONG_TTL_MS, 1);
      t.match(attached, { attach: 2, view: { record: { sessionId, owner: `o${i}`, attach: 2 }, currentGet: '{x}y', at: `u${i}`, after: [] } });
    }
  });

  test('incarnations: attach returns the new attachment and the incarnation after it', async (t, h) => {
    await bind(h);
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    t.equal(await record(h.store, 'g1', batch(1, ['u1', 'u2'])), 'ok');
    const decided = await h.store.touchAndRead('s1', LONG_TTL_MS, { incarnationId: 'g1', afterSeq: 1 });
    t.same(decided.view?.after, ['u2'], 'what the decision read');
    t.equal(await record(h.store, 'g1', batch(3, ['u3', null])), 'ok', 'the connection being replaced records more');

    const other = await h.peer();
    const first = await other.attachIncarnation('s1', 'g1', LONG_TTL_MS, 1);
    t.same(first, {
      attach: 2,
      view: {
        record: { ...NO_JOURNAL_STATE, id: 'g1', sessionId: 's1', owner: 'r1', kind: 'get', state: 'open', head: 4, base: 0, attach: 2, pending: [] },
        currentGet: 'g1',
        at: 'u1',
        after: ['u2', 'u3', null],
      },
    }, 'the events recorded since the decision are in the view');
    t.same(first?.view, await read(h.store, 'g1', 1), 'as readIncarnation reads it afterwards');
    t.equal(await record(h.store, 'g1', batch(5, ['late'])), 'stale', 'the replaced connection records nothing more');
    t.equal(await record(other, 'g1', batch(5, ['u5', 'u6'], { attach: 2 }), 3), 'ok', 'the new one does (base 4)');

    const cases: [number, string | null | undefined, (string | null)[]][] = [
      [4, null, ['u5', 'u6']],
      [6, 'u6', []],
      [3, undefined, []],
      [7, undefined, []],
      [4.5, undefined, []],
    ];
    let expected = 2;
    for (const [afterSeq, at, after] of cases) {
      const attached = await h.store.attachIncarnation('s1', 'g1', LONG_TTL_MS, afterSeq);
      expected++;
      t.equal(attached?.attach, expected, `after ${afterSeq}: the attachment is bumped`);
      t.match(attached?.view.record, { head: 6, base: 4, attach: expected }, `after ${afterSeq}: the record as bumped`);
      t.equal(attached?.view.at, at, `after ${afterSeq}: at`);
      t.same(attached?.view.after, after, `after ${afterSeq}: after`);
      t.equal(await record(other, 'g1', batch(7, ['x'], { attach: expected - 1 })), 'stale', `after ${afterSeq}: the previous attachment is refused`);
    }

    t.equal(await h.store.attachIncarnation('s1', 'nope', LONG_TTL_MS, 0), null, 'an unknown incarnation');
    t.equal(await h.store.attachIncarnation('s2', 'g1', LONG_TTL_MS, 0), null, 'an incarnation of another session');
    t.match((await read(h.store, 'g1'))?.record, { head: 6, attach: expected }, 'neither bumped anything');

    await h.store.openIncarnation(incarnation('p1', { kind: 'post', pending: [1, '1'] }), LONG_TTL_MS);
    await h.store.closeIncarnation('s1', 'p1');
    const post = await h.store.attachIncarnation('s1', 'p1', LONG_TTL_MS, 0);
    t.match(post, { attach: 2, view: { record: { kind: 'post', state: 'closed', attach: 2 }, currentGet: 'g1', at: null, after: [] } });
    t.strictSame(post?.view.record.pending, [1, '1']);
  });

  test('incarnations: racing attachments each get their own, with the view after their own bump', async (t, h) => {
    await h.store.openIncarnation(incarnation('g1'), LONG_TTL_MS);
    t.equal(await record(h.store, 'g1', batch(1, ['u1'])), 'ok');
    const stores = [h.store, await h.peer(), h.store, await h.peer()];
    const results = await Promise.all(stores.map((store) => store.attachIncarnation('s1', 'g1', LONG_TTL_MS, 0)));
    t.same(results.map((r) => r?.attach).sort(), [2, 3, 4, 5], 'each a different attachment');
    for (const r of results) t.equal(r?.view.record.attach, r?.attach, `attachment ${r?.attach} reads itself`);
    t.equal(await record(h.store, 'g1', batch(2, ['u2'], { attach: 4 })), 'stale');
    t.equal(await record(h.store, 'g1', batch(2, ['u2'], { attach: 5 })), 'ok', 'only the last one records');
  });

  test('publishKeyFingerprint: every live instance is listed; one that stops publishing drops out', async (t, h) => {
    const other = await h.peer();
    t.same(await h.store.publishKeyFingerprint('a', 'fa', LONG_TTL_MS), { a: 'fa' });
    t.same(await other.publishKeyFingerprint('b', 'fb', h.shortTtlMs), { a: 'fa', b: 'fb' }, 'another gateway sees both');
    t.same(await h.store.publishKeyFingerprint('a', 'fa2', LONG_TTL_MS), { a: 'fa2', b: 'fb' }, 'a new fingerprint replaces the old one');
    await tickUntil(t, h, 'b drops out', async () => !('b' in (await h.store.publishKeyFingerprint('a', 'fa2', LONG_TTL_MS))));
    t.same(await other.publishKeyFingerprint('c', 'fc', LONG_TTL_MS), { a: 'fa2', c: 'fc' }, 'and stays out');
  });

  test('withdrawKeyFingerprint: the instance drops out at once, for every instance; withdrawing none is nothing', async (t, h) => {
    const other = await h.peer();
    await h.store.publishKeyFingerprint('a', 'fa', LONG_TTL_MS);
    t.same(await other.publishKeyFingerprint('b', 'fb', LONG_TTL_MS), { a: 'fa', b: 'fb' });
    await other.withdrawKeyFingerprint('b');
    t.same(await h.store.publishKeyFingerprint('a', 'fa', LONG_TTL_MS), { a: 'fa' }, 'the other gateway sees it gone before its TTL');
    await h.store.withdrawKeyFingerprint('never-published');
    await other.withdrawKeyFingerprint('b');
    t.same(await other.publishKeyFingerprint('b', 'fb', LONG_TTL_MS), { a: 'fa', b: 'fb' }, 'and it may publish again');
  });

  test('readSecret: the agreed secret, never offering one', async (t, h) => {
    t.equal(await h.store.readSecret(), null, 'none agreed yet');
    t.equal(await h.store.readSecret(), null, 'and reading agreed none');
    t.equal(await h.store.agreeSecret('first-candidate'), 'first-candidate', 'the first candidate still wins');
    t.equal(await (await h.peer()).readSecret(), 'first-candidate');
  });

  test('agreeSecret: the first candidate wins for good', async (t, h) => {
    t.equal(await h.store.agreeSecret('first-candidate'), 'first-candidate');
    t.equal(await h.store.agreeSecret('second-candidate'), 'first-candidate');
    const other = await h.peer();
    t.equal(await other.agreeSecret('third-candidate'), 'first-candidate', 'another gateway gets it too');
  });

  test('agreeSecret: concurrent candidates agree on one of them', async (t, h) => {
    const other = await h.peer();
    const candidates = ['c0', 'c1', 'c2', 'c3', 'c4', 'c5'];
    const results = await Promise.all(candidates.map((c, i) => (i % 2 === 0 ? h.store : other).agreeSecret(c)));
    const winner = results[0];
    t.ok(winner !== undefined && candidates.includes(winner), `the winner is a candidate (${winner})`);
    t.same(results, candidates.map(() => winner), 'every caller has the same secret');
  });
}

/** Task records (CONTRACT.md §9 M2): which replica holds a task, under a digest of its id. */
/** J3: an instance's liveness, which proves its pumps alive whatever their own leases say (docs/journal.md#instance-liveness). */
function livenessContract(test: ContractTest, tickUntil: TickUntil): void {
  test('renewInstance: alive for every instance until its TTL runs out; renewed, it lives on', async (t, h) => {
    const other = await h.peer();
    t.equal(await other.instanceAlive('gw-a'), false, 'never renewed: not alive');
    await h.store.renewInstance('gw-a', h.shortTtlMs);
    await h.store.renewInstance('gw-b', LONG_TTL_MS);
    t.equal(await other.instanceAlive('gw-a'), true, 'another gateway sees it alive');
    // gw-b, renewed on every tick, outlives gw-a's TTL.
    await tickUntil(t, h, 'gw-a lapses', async () => {
      await h.store.renewInstance('gw-b', h.shortTtlMs);
      return !(await other.instanceAlive('gw-a'));
    });
    t.equal(await other.instanceAlive('gw-b'), true, 'the renewed one lives on');
    await h.store.renewInstance('gw-a', LONG_TTL_MS);
    t.equal(await other.instanceAlive('gw-a'), true, 'renewed after it lapsed: alive again');
  });

  test('withdrawInstance: not alive at once, for every instance; withdrawing none is nothing', async (t, h) => {
    const other = await h.peer();
    await h.store.renewInstance('gw-a', LONG_TTL_MS);
    await h.store.renewInstance('gw-b', LONG_TTL_MS);
    await other.withdrawInstance('gw-a');
    t.equal(await h.store.instanceAlive('gw-a'), false);
    t.equal(await h.store.instanceAlive('gw-b'), true, 'the others stay');
    await h.store.withdrawInstance('never-renewed');
  });

  test('keepInstanceAlive: alive past its TTL while kept, each renewal told; stop withdraws it at once', async (t, h) => {
    const other = await h.peer();
    const late: number[] = [];
    // The renewals' timers do not hold a process open: this one does while the test waits for them.
    const open = setInterval(() => undefined, 1000);
    t.teardown(() => clearInterval(open));
    let next: (() => void) | undefined;
    const renewal = () => new Promise<void>((resolve) => (next = resolve));
    const kept = h.store.keepInstanceAlive('gw-a', {
      ttlMs: h.shortTtlMs,
      everyMs: h.shortTtlMs / 4,
      maxStallMs: LONG_TTL_MS,
      renewed: (ms) => {
        late.push(ms);
        next?.();
      },
    });
    await tickUntil(t, h, 'alive', () => other.instanceAlive('gw-a'));
    // Half a TTL passes three times, a renewal between each: it lives past its TTL, renewed.
    for (let round = 0; round < 3; round++) {
      await renewal();
      for (let i = 0; i < 5; i++) await h.tick();
    }
    t.equal(await other.instanceAlive('gw-a'), true, 'kept alive past its TTL');
    t.ok(late.length >= 3, `renewals told (${late.length})`);
    t.ok(late.every((ms) => ms >= 0), 'each as late as it was, never early');
    await kept.stop();
    t.equal(await other.instanceAlive('gw-a'), false, 'stopped: withdrawn at once');
  });
}

function taskContract(test: ContractTest, tickUntil: TickUntil): void {
  const task = (owner: string, ownerEpoch = 'e1') => ({ owner, ownerEpoch });

  test('tasks: bind then read returns the record, from another gateway too', async (t, h) => {
    t.equal(await h.store.readTask('k1'), null, 'none before');
    t.equal(await h.store.bindTask('k1', task('replica-a', 'epoch-7'), LONG_TTL_MS), true);
    t.same(await h.store.readTask('k1'), { owner: 'replica-a', ownerEpoch: 'epoch-7' });
    t.same(await (await h.peer()).readTask('k1'), { owner: 'replica-a', ownerEpoch: 'epoch-7' }, 'another gateway reads it');
    t.equal(await h.store.readTask('k2'), null, 'another key is another task');
  });

  test('tasks: binding a recorded key returns false and keeps the first owner', async (t, h) => {
    t.equal(await h.store.bindTask('k1', task('first'), LONG_TTL_MS), true);
    t.equal(await h.store.bindTask('k1', task('second', 'e2'), LONG_TTL_MS), false);
    t.same(await h.store.readTask('k1'), task('first'));
  });

  test('tasks: concurrent binds of one key from two gateways: exactly one wins', async (t, h) => {
    const other = await h.peer();
    const results = await Promise.all([h.store.bindTask('k1', task('from-a'), LONG_TTL_MS), other.bindTask('k1', task('from-b'), LONG_TTL_MS)]);
    t.same(results.filter(Boolean).length, 1, 'one bind succeeded');
    t.equal((await other.readTask('k1'))?.owner, results[0] ? 'from-a' : 'from-b');
  });

  test('tasks: a record expires after its TTL; reading does not extend it', async (t, h) => {
    await h.store.bindTask('short', task('r1'), h.shortTtlMs);
    await h.store.bindTask('long', task('r1'), LONG_TTL_MS);
    t.ok(await h.store.readTask('short'), 'present at first');
    await tickUntil(t, h, 'the short record expires while read on every tick', async () => (await h.store.readTask('short')) === null);
    t.ok(await h.store.readTask('long'), 'the long one lives on');
    t.equal(await h.store.bindTask('short', task('r2'), LONG_TTL_MS), true, 'its key is free again');
  });

  test('tasks: keys and owners with odd characters stay apart and read back exactly', async (t, h) => {
    const keys = ['a', 'A', 'a-b_c', 'x'.repeat(64)];
    for (const [i, key] of keys.entries()) t.equal(await h.store.bindTask(key, task(`r.${i}`, `e:${i}`), LONG_TTL_MS), true, key);
    for (const [i, key] of keys.entries()) t.same(await h.store.readTask(key), task(`r.${i}`, `e:${i}`), key);
  });
}

/** What a watcher was told, in order, with a way to await the next notes. */
class Watched {
  readonly notes: BindingNote[] = [];
  flowing = false;
  #waiters: (() => void)[] = [];
  readonly stop: () => void;

  constructor(store: Store) {
    this.stop = store.watchBindings({
      changed: (note) => {
        this.notes.push(note);
        this.#wake();
      },
      flowing: (on) => {
        this.flowing = on;
        this.#wake();
      },
      reset: () => undefined,
    });
  }

  /** Resolves once `done()` holds (tap's test timeout bounds a note that never comes). */
  async until(done: () => boolean): Promise<void> {
    while (!done()) await new Promise<void>((resolve) => this.#waiters.push(resolve));
  }

  #wake(): void {
    for (const wake of this.#waiters.splice(0)) wake();
  }
}

/** Binding notes (Store.watchBindings) and the batched reads that a binding cache confirms with. */
function bindingsContract(test: ContractTest, tickUntil: TickUntil): void {
  const bind = (store: Store, sessionId: string, ttlMs = LONG_TTL_MS) => store.bindSession({ sessionId, owner: 'r1', ownerEpoch: 'e1' }, ttlMs);

  /** A watcher on another gateway of the same store, once its notes flow. */
  async function peerWatcher(t: Test, h: StoreHarness): Promise<Watched> {
    const watched = new Watched(await h.peer());
    t.teardown(() => watched.stop());
    await watched.until(() => watched.flowing);
    return watched;
  }

  test('refreshSessions: each session as it stands, in order, null for one not held', async (t, h) => {
    await bind(h.store, 's1');
    await bind(h.store, 's2');
    await h.store.endSession('s2', 'lost', LONG_TTL_MS);
    const records = await h.store.refreshSessions(
      [
        { sessionId: 's1', touch: false },
        { sessionId: 'unknown', touch: true },
        { sessionId: 's2', touch: true },
        { sessionId: 's1', touch: true },
      ],
      LONG_TTL_MS,
    );
    t.match(records, [{ sessionId: 's1', state: 'active', owner: 'r1', ownerEpoch: 'e1' }, null, { sessionId: 's2', state: 'lost' }, { sessionId: 's1', state: 'active' }]);
    t.same(await h.store.refreshSessions([], LONG_TTL_MS), [], 'nothing to read: nothing');
  });

  test('refreshSessions: extends the idle TTL of the active sessions it touches, and only theirs', async (t, h) => {
    await bind(h.store, 'touched', h.shortTtlMs);
    await bind(h.store, 'read', h.shortTtlMs);
    await h.store.refreshSessions(
      [
        { sessionId: 'touched', touch: true },
        { sessionId: 'read', touch: false },
      ],
      LONG_TTL_MS,
    );
    const peek = async (sessionId: string) => (await h.store.refreshSessions([{ sessionId, touch: false }], LONG_TTL_MS))[0];
    await tickUntil(t, h, 'the session only read expires', async () => (await peek('read')) === null);
    t.match(await peek('touched'), { state: 'active' }, 'the touched one lives on');
  });

  test('agreeGeneration: the first candidate wins, for every gateway', async (t, h) => {
    t.equal(await h.store.agreeGeneration('g-first'), 'g-first');
    t.equal(await h.store.agreeGeneration('g-second'), 'g-first');
    t.equal(await (await h.peer()).agreeGeneration('g-third'), 'g-first', 'another gateway gets it too');
    t.not(await h.store.agreeSecret('a-secret'), 'g-first', 'apart from the cursor secret');
  });

  test('watchBindings: another gateway is told of each session that ends, once', async (t, h) => {
    const watched = await peerWatcher(t, h);
    await bind(h.store, 's1');
    await bind(h.store, 'odd {id} ü 🚀');
    await h.store.endSession('s1', 'terminated', LONG_TTL_MS);
    await h.store.endSession('s1', 'lost', LONG_TTL_MS);
    await h.store.endSession('never-bound', 'lost', LONG_TTL_MS);
    await h.store.endSession('odd {id} ü 🚀', 'lost', LONG_TTL_MS);
    await watched.until(() => watched.notes.length >= 2);
    t.same(watched.notes, [
      { kind: 'ended', sessionId: 's1' },
      { kind: 'ended', sessionId: 'odd {id} ü 🚀' },
    ], 'ending an ended or unknown session tells nobody');
  });

  test('watchBindings: another gateway is told of each retired epoch, with the new one', async (t, h) => {
    const watched = await peerWatcher(t, h);
    t.equal(await h.store.retireReplicaEpoch('r1', '', 'e2'), 'e2');
    t.equal(await h.store.retireReplicaEpoch('r1', '', 'e3'), 'e2', 'a lost compare-and-set changes nothing...');
    t.equal(await h.store.retireReplicaEpoch('r1', 'e2', 'e4'), 'e4');
    await watched.until(() => watched.notes.length >= 2);
    t.same(watched.notes, [
      { kind: 'retired', replicaId: 'r1', epoch: 'e2' },
      { kind: 'retired', replicaId: 'r1', epoch: 'e4' },
    ], '...and tells nobody');
  });

  test('watchBindings: the gateway that made the change is told too; a stopped watcher is not', async (t, h) => {
    const own = new Watched(h.store);
    t.teardown(() => own.stop());
    const stopped = new Watched(h.store);
    await own.until(() => own.flowing);
    await stopped.until(() => stopped.flowing);
    stopped.stop();
    await bind(h.store, 's1');
    await h.store.endSession('s1', 'terminated', LONG_TTL_MS);
    await own.until(() => own.notes.length >= 1);
    const marker = await peerWatcher(t, h);
    await h.store.retireReplicaEpoch('marker', '', 'e1');
    await marker.until(() => marker.notes.length >= 1);
    await own.until(() => own.notes.length >= 2);
    t.same(own.notes, [
      { kind: 'ended', sessionId: 's1' },
      { kind: 'retired', replicaId: 'marker', epoch: 'e1' },
    ]);
    t.same(stopped.notes, [], 'nothing after stop');
  });
}

/** Every operation but close, each by the name that StoreError carries as `op`. */
export function operations(store: Store): [string, () => Promise<unknown>][] {
  return [
    ['bindSession', () => store.bindSession({ sessionId: 'op-s', owner: 'r1', ownerEpoch: 'e1' }, LONG_TTL_MS)],
    ['touchSession', () => store.touchSession('op-s', LONG_TTL_MS)],
    ['touchAndRead', () => store.touchAndRead('op-s', LONG_TTL_MS, { incarnationId: 'op-i', afterSeq: 0 })],
    ['refreshSessions', () => store.refreshSessions([{ sessionId: 'op-s', touch: true }], LONG_TTL_MS)],
    ['endSession', () => store.endSession('op-s', 'terminated', LONG_TTL_MS)],
    ['bindTask', () => store.bindTask('op-t', { owner: 'r1', ownerEpoch: 'e1' }, LONG_TTL_MS)],
    ['readTask', () => store.readTask('op-t')],
    ['replicaEpochs', () => store.replicaEpochs()],
    ['retireReplicaEpoch', () => store.retireReplicaEpoch('op-r', '', 'e1')],
    ['openIncarnation', () => store.openIncarnation(incarnation('op-i', { sessionId: 'op-s' }), LONG_TTL_MS)],
    ['attachIncarnation', () => store.attachIncarnation('op-s', 'op-i', LONG_TTL_MS, 0)],
    ['recordEvents', () => store.recordEvents('op-s', 'op-i', batch(1, ['u1']), MANY_POSITIONS, LONG_TTL_MS)],
    ['readIncarnation', () => store.readIncarnation('op-s', 'op-i', 0)],
    ['closeIncarnation', () => store.closeIncarnation('op-s', 'op-i')],
    ['touchIncarnation', () => store.touchIncarnation('op-s', 'op-i', LONG_TTL_MS)],
    ['readJournal', () => store.readJournal('op-s', 'op-i', 0, 10)],
    ['touchTail', () => store.touchTail('op-s', 'op-i', LONG_TTL_MS)],
    ['releasePump', () => store.releasePump('op-s', 'op-i', 'op-instance')],
    ['releaseHeldGet', () => store.releaseHeldGet('op-s')],
    ['inspectSession', () => store.inspectSession('op-s', 10)],
    ['readSecret', () => store.readSecret()],
    ['agreeSecret', () => store.agreeSecret('op-secret')],
    ['agreeGeneration', () => store.agreeGeneration('op-generation')],
    ['publishKeyFingerprint', () => store.publishKeyFingerprint('op-instance', 'op-fingerprint', LONG_TTL_MS)],
    ['withdrawKeyFingerprint', () => store.withdrawKeyFingerprint('op-instance')],
    ['renewInstance', () => store.renewInstance('op-instance', LONG_TTL_MS)],
    ['instanceAlive', () => store.instanceAlive('op-instance')],
    ['withdrawInstance', () => store.withdrawInstance('op-instance')],
    ['ping', () => store.ping()],
  ];
}
