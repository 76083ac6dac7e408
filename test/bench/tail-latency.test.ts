/**
 * The tail-latency benchmark runs end to end, briefly: two gateways on one Redis with the journal
 * on. It asserts only that every path gave a figure for every event and that the continuation
 * through the other instance was served from the journal; how fast belongs to
 * `npm run bench:tail-latency`, never to a test.
 */
import t from 'tap';
import { runTailLatency, type Path } from '../../bench/tail-latency.js';

t.test('a short run measures every event on each path, the tail served from the journal', async (t) => {
  const result = await runTailLatency({ events: 10, intervalMs: 2, rounds: 1, warmup: 3 });
  for (const path of ['direct', 'pump', 'tail'] as Path[]) {
    t.equal(result.latenciesMs[path].length, 10, `${path}: one latency per measured event`);
    const { p50, p99 } = result.summary[path];
    t.ok(Number.isFinite(p50) && p50 > 0 && p99 >= p50, `${path}: p50 ${p50} and p99 ${p99} are positive and ordered`);
  }
  t.equal(result.tailContinuations, 1, 'the other instance continued the stream from the journal once');
});
