/** The streams workload's accounting: what counts as lost and as repeated, by each event's seq. */
import t from 'tap';
import { countSeq } from '../../bench/fleet-load.js';

t.test('skipped seqs are lost, a seq at or below the last is repeated, and the stream moves on only forward', async (t) => {
  const totals = { lost: 0, repeated: 0 };
  const stream = { lastSeq: 0 };
  t.same([1, 2, 4].map((seq) => countSeq(totals, stream, seq)), ['next', 'next', 'next']);
  t.same(totals, { lost: 1, repeated: 0 }, 'seq 3 was skipped');
  t.equal(countSeq(totals, stream, 3), 'repeated', 'seq 3 after seq 4 comes too late');
  t.equal(countSeq(totals, stream, 4), 'repeated', 'seq 4 twice');
  t.equal(stream.lastSeq, 4, 'a repeat does not move the stream back');
  t.equal(countSeq(totals, stream, 5), 'next');
  t.same(totals, { lost: 1, repeated: 2 });
});
