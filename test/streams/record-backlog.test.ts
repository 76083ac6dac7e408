/**
 * src/streams/record-backlog.ts against a host that answers as the test says (the store side is
 * tested with a real redis-server in unrecorded.test.ts): held batches are written late in order,
 * merged, except one that may have landed; a batch past a bound gives the stream's records up.
 */
import t from 'tap';
import { StoreError } from '../../src/errors.js';
import { JournalFrames } from '../../src/store/journal-frames.js';
import type { EventBatch, RecordResult } from '../../src/store/types.js';
import { BATCH_COST_BYTES, EVENT_COST_BYTES, RecordBacklog, heldCost } from '../../src/streams/record-backlog.js';
import type { Backlog, RecordsHost, RecordTarget, StopReason } from '../../src/streams/record-target.js';

const target: RecordTarget = { sessionId: 's1', incarnation: 'i1', attach: 1 };

/** The host's side, counted: what was written, held, released, and why a stream stopped. */
function host(limits: { streamBytes?: number; totalBytes?: number } = {}) {
  const seen = { writes: [] as EventBatch[], held: 0, released: 0, emptied: 0, stopped: [] as [StopReason, number][], answer: 'ok' as RecordResult | 'fail' };
  const h: RecordsHost = {
    down: false,
    closed: false,
    write: async (_target, batch) => {
      seen.writes.push(batch);
      if (seen.answer === 'fail') throw new StoreError('recordEvents');
      return seen.answer;
    },
    storeFailed: () => undefined,
    streamBytes: limits.streamBytes ?? Infinity,
    fits: (cost) => seen.held - seen.released + cost <= (limits.totalBytes ?? Infinity),
    held: (_backlog: Backlog, _events, bytes) => void (seen.held += bytes),
    released: (_events, bytes) => void (seen.released += bytes),
    emptied: () => void seen.emptied++,
    stopped: (reason, events) => void seen.stopped.push([reason, events]),
    failed: () => undefined,
    lateWrite: () => undefined,
  };
  return { h, seen };
}

const batch = (fromSeq: number, ids: string[]): EventBatch => ({ attach: 1, fromSeq, upstreamIds: ids, responded: [] });

t.test('a batch costs its fixed part, each event and its id, and its journaled bytes', async (t) => {
  t.equal(heldCost(batch(1, ['ab', 'c'])), BATCH_COST_BYTES + 2 * EVENT_COST_BYTES + 3);
  const payloads = JournalFrames.of(['data: x\n\n']);
  t.equal(heldCost({ ...batch(1, ['ab']), payloads }), BATCH_COST_BYTES + EVENT_COST_BYTES + 2 + payloads.frames.length);
});

t.test('held batches are written late as one, in order, and the backlog empties', async (t) => {
  const { h, seen } = host();
  const backlog = new RecordBacklog(target, h);
  backlog.hold(batch(1, ['a']), false);
  backlog.hold(batch(2, ['b', 'c']), false);
  t.ok(backlog.pending);
  t.equal(await backlog.writeNext(), 'ok');
  t.same(seen.writes.map((b) => [b.fromSeq, b.upstreamIds]), [[1, ['a', 'b', 'c']]], 'one write, from the first position');
  t.notOk(backlog.pending);
  t.equal(seen.released, seen.held, 'every held byte released');
  t.equal(seen.emptied, 1);
});

t.test('a batch that may have landed is resent as it was, not merged with the next', async (t) => {
  const { h, seen } = host();
  const backlog = new RecordBacklog(target, h);
  backlog.hold(batch(1, ['a']), false, true);
  backlog.hold(batch(2, ['b']), false);
  seen.answer = 'fail';
  t.equal(await backlog.writeNext(), 'store_failed', 'the store did not answer');
  seen.answer = 'ok';
  t.equal(await backlog.writeNext(), 'ok');
  t.equal(await backlog.writeNext(), 'ok');
  t.same(seen.writes.map((b) => b.upstreamIds), [['a'], ['a'], ['b']], 'the same batch again, then the next');
  t.notOk(backlog.pending);
});

t.test('a batch past the stream bound gives the stream up: nothing later is held or written', async (t) => {
  const { h, seen } = host({ streamBytes: heldCost(batch(1, ['a'])) + 10 });
  const backlog = new RecordBacklog(target, h);
  backlog.hold(batch(1, ['a']), false);
  backlog.hold(batch(2, ['b']), false);
  t.ok(backlog.stopped);
  t.same(seen.stopped, [['stream_limit', 1]], 'the one event held is given up');
  backlog.hold(batch(3, ['c']), false);
  t.notOk(backlog.pending);
  t.equal(await backlog.writeNext(), 'ok');
  t.same(seen.writes, [], 'nothing written');
  t.equal(seen.released, seen.held);
});

t.test('a refused late write gives the stream up', async (t) => {
  const { h, seen } = host({ totalBytes: 10_000 });
  const backlog = new RecordBacklog(target, h);
  backlog.hold(batch(1, ['a']), true);
  seen.answer = 'stale';
  t.equal(await backlog.writeNext(), 'ok');
  t.same(seen.stopped, [['refused', 1]]);
  t.notOk(backlog.pending);
});
