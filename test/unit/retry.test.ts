import t from 'tap';
import { retryWithin } from '../../src/retry.js';

t.test('retries a retryable failure until it succeeds', async (t) => {
  let calls = 0;
  const value = await retryWithin(1000, { firstMs: 1, maxMs: 4 }, async () => {
    if (++calls < 3) throw new Error('passing');
    return 'done';
  });
  t.equal(value, 'done');
  t.equal(calls, 3);
});

t.test('a failure that is not retryable is thrown at once', async (t) => {
  let calls = 0;
  const refused = new Error('refused');
  await t.rejects(retryWithin(1000, { firstMs: 1, maxMs: 4 }, async () => {
    calls++;
    throw refused;
  }, (err) => err !== refused), refused);
  t.equal(calls, 1);
});

t.test('the last failure is thrown once the budget is spent', async (t) => {
  let calls = 0;
  // Pauses of a quarter of the budget: at most five attempts fit, however fast the machine, and a
  // second one comes unless the process stalls for most of the budget before the first pause.
  const thrown = await retryWithin(1_000, { firstMs: 250, maxMs: 250 }, async () => {
    calls++;
    throw new Error(`attempt ${calls}`);
  }).catch((err: Error) => err);
  t.ok(calls >= 2 && calls <= 5, `a few attempts within the budget (${calls})`);
  t.equal((thrown as Error).message, `attempt ${calls}`, 'the last one');
});
