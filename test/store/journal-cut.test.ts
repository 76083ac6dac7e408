/** Where the Redis store cuts a batch's frames (src/store/redis/journal-cut.ts). */
import t from 'tap';
import { cutFrames, JournalEnds } from '../../src/store/redis/journal-cut.js';
import { JOURNAL_SLICE_BYTES as S } from '../../src/store/redis/scripts/journal.js';

const bytes = (n: number) => Buffer.alloc(n, 0x61);
const lengths = (pieces: Buffer[]) => pieces.map((p) => p.length);

t.test('cutFrames: one piece while the end is unknown or the batch fits the open slice', async (t) => {
  t.same(lengths(cutFrames(bytes(3 * S), undefined)), [3 * S]);
  t.same(lengths(cutFrames(bytes(100), 5)), [100]);
  t.same(lengths(cutFrames(bytes(S - 5), 5)), [S - 5], 'exactly the room left: one piece');
});

t.test('cutFrames: the room left in the open slice, whole slices, then the rest', async (t) => {
  t.same(lengths(cutFrames(bytes(S - 4), 5)), [S - 5, 1]);
  t.same(lengths(cutFrames(bytes(3 * S), 2 * S + 10)), [S - 10, S, S, 10], 'an end past earlier slices: only its place in its slice counts');
  t.same(lengths(cutFrames(bytes(2 * S), 0)), [S, S], 'from a slice boundary: whole slices, no rest');
  const frames = Buffer.from(Array.from({ length: 2 * S }, (_, i) => i % 251));
  t.same(Buffer.concat(cutFrames(frames, 7)), frames, 'the pieces are the frames, in order');
});

t.test('JournalEnds: batches in flight are cut where the ones before them will end', async (t) => {
  const ends = new JournalEnds();
  t.same(lengths(ends.send('k', bytes(1000))), [1000], 'nothing known yet: one piece');
  t.same(lengths(ends.send('k', bytes(S))), [S], 'still nothing known');
  ends.answered('k', 1000, 1000);
  t.same(lengths(ends.send('k', bytes(S))), [S - 1000, 1000], 'after the answer, the bytes still in flight counted: the end is 1000 + S');
  ends.answered('k', S, 1000 + S);
  ends.answered('k', S, 1000 + 2 * S);
  t.same(lengths(ends.send('k', bytes(S))), [S - 1000, 1000], 'each answer sets the end again');
});

t.test('JournalEnds: a refusal or a failure forgets the end until the next answer', async (t) => {
  const ends = new JournalEnds();
  ends.send('k', bytes(10));
  ends.answered('k', 10, 10);
  ends.send('k', bytes(10));
  ends.answered('k', 10, undefined);
  t.same(lengths(ends.send('k', bytes(2 * S))), [2 * S], 'unknown again: one piece');
  ends.answered('k', 2 * S, 10 + 2 * S);
  t.same(lengths(ends.send('k', bytes(S))), [S - 10, 10]);
  ends.forget('k');
  t.same(lengths(ends.send('k', bytes(S))), [S], 'forgotten: one piece');
});

t.test('JournalEnds: bounded, the least recently written forgotten first', async (t) => {
  const ends = new JournalEnds(2);
  for (const key of ['a', 'b']) {
    ends.send(key, bytes(10));
    ends.answered(key, 10, 10);
  }
  ends.send('a', bytes(1));
  ends.answered('a', 1, 11);
  ends.send('c', bytes(1));
  t.equal(ends.size, 2);
  t.equal(ends.send('a', bytes(S)).length, 2, 'a, written lately, is kept: cut');
  t.same(lengths(ends.send('b', bytes(S))), [S], 'b was forgotten: one piece');
});
