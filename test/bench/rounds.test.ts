/** Figures over several rounds of a workload: the median, with its spread, never the mean. */
import t from 'tap';
import { mergeRounds } from '../../bench/run.js';

const row = (target: string, value: number, note?: string) => ({ workload: 'rpc', target, metric: 'requests_per_s', value, ...(note ? { note } : {}) });

t.test('one round passes as it is', async (t) => {
  const only = [row('direct', 10, 'x')];
  t.same(mergeRounds([only]), only);
});

t.test('the median of each figure, with the spread in the note, in first-seen order', async (t) => {
  const merged = mergeRounds([
    [row('direct', 100), row('gateway-memory', 30, 'first note')],
    [row('direct', 300), row('gateway-memory', 10)],
    [row('direct', 200), row('gateway-memory', 1000)],
  ]);
  t.same(
    merged.map((r) => [r.target, r.value]),
    [
      ['direct', 200],
      ['gateway-memory', 30],
    ],
    'an outlier does not move the median',
  );
  t.equal(merged[0]!.note, 'median of 3: 100.0–300.0');
  t.equal(merged[1]!.note, 'median of 3: 10.00–1000; first note', 'the first round note is kept after the spread');
});

t.test('an even count takes the lower middle; a figure missing from a round is merged from the others', async (t) => {
  const merged = mergeRounds([[row('direct', 4), row('nginx', 7)], [row('direct', 2)], [row('direct', 3)], [row('direct', 1)]]);
  t.equal(merged.find((r) => r.target === 'direct')?.value, 2);
  t.same(merged.find((r) => r.target === 'nginx'), { ...row('nginx', 7), note: 'median of 1: 7.00–7.00' });
});

t.test('rows without a finite value (a failed target) are kept as they were', async (t) => {
  const failed = { workload: 'rpc', target: 'haproxy', metric: 'failed', value: Number.NaN, note: 'did not start' };
  t.same(mergeRounds([[failed], [failed]]), [failed]);
});
