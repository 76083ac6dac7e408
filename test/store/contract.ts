/**
 * The one contract every Store implementation passes (src/store/types.ts). Time is abstract here:
 * `tick()` lets a little store time pass (the memory store advances its injected clock, the Redis
 * store waits a few real milliseconds), and expiry is awaited by ticking with a bounded count.
 */

import type { Test } from 'tap';
import type { Store } from '../../src/store/types.js';

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

export function storeContract(t: Test, name: string, makeHarness: () => Promise<StoreHarness>): void {
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

/** Every operation but close, each by the name that StoreError carries as `op`. */
export function operations(store: Store): [string, () => Promise<unknown>][] {
  return [
    ['bindSession', () => store.bindSession({ sessionId: 'op-s', owner: 'r1', ownerEpoch: 'e1' }, LONG_TTL_MS)],
    ['touchSession', () => store.touchSession('op-s', LONG_TTL_MS)],
    ['endSession', () => store.endSession('op-s', 'terminated', LONG_TTL_MS)],
    ['replicaEpochs', () => store.replicaEpochs()],
    ['retireReplicaEpoch', () => store.retireReplicaEpoch('op-r', '', 'e1')],
    ['ping', () => store.ping()],
  ];
}
