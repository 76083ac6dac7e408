import t from 'tap';
import { createMemoryStore } from '../../src/store/memory.js';
import { storeContract } from './contract.js';

/** A memory store on a clock that only moves when the test says so. */
function harness(opts: { sweepIntervalMs?: number } = {}) {
  let clock = 1_700_000_000_000;
  const now = () => clock;
  const store = createMemoryStore({ now, ...opts });
  return {
    store,
    now,
    advance(ms: number) {
      clock += ms;
    },
  };
}

storeContract(t, 'memory', async () => {
  const h = harness();
  return {
    store: h.store,
    // One process, one store: a second gateway would need a shared store.
    peer: async () => h.store,
    shortTtlMs: 1_000,
    tick: async () => h.advance(100),
    now: h.now,
    close: () => h.store.close(),
  };
});

t.test('memory: a session expires exactly idleTtlMs after its last touch', async (t) => {
  // A sweep that never runs in this test: expiry must not depend on it.
  const h = harness({ sweepIntervalMs: 3_600_000 });
  t.teardown(() => h.store.close());
  const s = { sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' };
  await h.store.bindSession(s, 1_000);
  h.advance(500);
  t.match(await h.store.touchSession('s1', 1_000), { state: 'active' });
  h.advance(999);
  t.equal(await h.store.bindSession(s, 1_000), false, 'alive 1 ms before its TTL ends');
  h.advance(1);
  t.equal(await h.store.touchSession('s1', 1_000), null, 'gone when it ends');
});

t.test('memory: a tombstone expires exactly tombstoneTtlMs after the end', async (t) => {
  const h = harness({ sweepIntervalMs: 3_600_000 });
  t.teardown(() => h.store.close());
  await h.store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 60_000);
  h.advance(10);
  await h.store.endSession('s1', 'lost', 300);
  h.advance(299);
  t.match(await h.store.touchSession('s1', 60_000), { state: 'lost', createdAt: 1_700_000_000_000 });
  h.advance(1);
  t.equal(await h.store.touchSession('s1', 60_000), null);
});
