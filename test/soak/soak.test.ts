/**
 * The soak (bench/soak.ts, `npm run soak`) for about a minute with a small fleet: two gateway
 * processes on one Redis, a replica with an event log and one without, 20 sessions, a fault every
 * few seconds (a cut, an owner killed and restarted, the store paused, each at least once). It
 * must pass every check of the soak; the memory bounds here only catch a runaway, as a minute is
 * too short for a slope that means more (the long runs use the tight defaults).
 */
import { randomInt } from 'node:crypto';
import t from 'tap';
import { runSoak } from '../../bench/soak.js';

const SEED = process.env['SOAK_SEED'] === undefined ? randomInt(0, 2 ** 31) : Number(process.env['SOAK_SEED']) | 0;

// Starting four node processes and Redis takes over a minute on a loaded 2-core machine; the run
// itself is 30 s, its drain bounded. A bound on failure, not an expected duration.
t.setTimeout(900_000);

t.test(`a 30-second soak passes every check (SOAK_SEED=${SEED})`, async (t) => {
  t.comment(`SOAK_SEED=${SEED}`);
  const report = await runSoak(t, {
    durationMs: 30_000,
    sessions: 20,
    seed: SEED,
    faultEveryMs: 4_000,
    warmupMs: 15_000,
    heapSlopeMiBPerMin: 100,
    rssSlopeMiBPerMin: 200,
  });
  for (const [name, value] of Object.entries(report.figures)) t.comment(`${name}: ${value}`);
  t.same(report.violations, [], 'no check failed');
  const figure = (name: string) => Number(report.figures[name] ?? 0);
  for (const kind of ['cut', 'kill', 'pause']) t.ok(figure(`fault ${kind}`) >= 1, `at least one fault: ${kind}`);
  t.ok(figure('calls settled result') > 0, 'calls were answered');
  t.equal(figure('events delivered') + figure('events signalled') >= figure('events emitted'), true, 'every event emitted was delivered or signalled');
  t.ok(report.passed, 'the soak passed');
});
