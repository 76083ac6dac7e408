/**
 * An instance's liveness on Redis (docs/journal.md#instance-liveness) is renewed on a thread of its
 * own: an event loop blocked by work for longer than the liveness lasts does not let it lapse, and
 * one blocked for longer than maxStallMs (taken as hung) does.
 */
import t from 'tap';
import { createRedisStore } from '../../src/store/redis/index.js';
import type { Store } from '../../src/store/types.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { bound, storeAnswers, waitFor } from '../helpers/wait.js';

/** Blocks this thread's event loop, as a burst of synchronous work does. */
function blockLoop(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

const server = await startRedisServer(t);
let prefixes = 0;

async function store(): Promise<Store> {
  const s = createRedisStore({ url: server.url, keyPrefix: `liveness-${++prefixes}`, connectTimeoutMs: 500, commandTimeoutMs: 5000 });
  t.teardown(() => s.close());
  await storeAnswers(s);
  return s;
}

t.test('a loop blocked for longer than the liveness lasts: it stays alive, renewed on time meanwhile', async (t) => {
  const s = await store();
  const late: number[] = [];
  const kept = s.keepInstanceAlive('gw-a', { ttlMs: 1500, everyMs: 150, maxStallMs: 60_000, renewed: (ms) => late.push(ms) });
  t.teardown(() => kept.stop());
  await waitFor('first renewal', bound(5000), () => late.length > 0);
  const before = late.length;
  blockLoop(4000);
  // Sent before this loop runs anything else: what the store holds after the block.
  t.equal(await s.instanceAlive('gw-a'), true, 'alive after more than two of its TTLs with the loop blocked');
  await waitFor('the renewals told', bound(5000), () => late.length > before + 5);
  t.ok(late.slice(before).some((ms) => ms < 1500), 'renewals landed during the block, not behind it');
});

t.test('a loop blocked past maxStallMs: taken as hung, its liveness lapses; it lives again once the loop runs', async (t) => {
  const s = await store();
  let renewals = 0;
  const kept = s.keepInstanceAlive('gw-a', { ttlMs: 600, everyMs: 150, maxStallMs: 300, renewed: () => renewals++ });
  t.teardown(() => kept.stop());
  await waitFor('first renewal', bound(5000), () => renewals > 0);
  blockLoop(4000);
  t.equal(await s.instanceAlive('gw-a'), false, 'lapsed while the loop did not beat');
  await waitFor('alive again', bound(5000), () => s.instanceAlive('gw-a'));
  await kept.stop();
  t.equal(await s.instanceAlive('gw-a'), false, 'stopped: withdrawn');
});
