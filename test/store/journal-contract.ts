/**
 * The journal's part of the store contract (CONTRACT.md §8 J1, docs/journal.md): each event's bytes
 * journaled beside its position in the same step, bounded by count and by bytes with one window
 * for both, read after a position, the pump's and the tail's leases, and the notes that any
 * gateway sharing the store can watch. Run by storeContract against every store.
 */

import type { Test } from 'tap';
import type { EventBatch, JournalNote, Store } from '../../src/store/types.js';
import type { StoreHarness } from './contract.js';
import { JournalFrames } from '../../src/store/journal-frames.js';

type ContractTest = (title: string, body: (t: Test, h: StoreHarness) => Promise<void>) => void;
type TickUntil = (t: Test, h: StoreHarness, what: string, done: () => Promise<boolean>) => Promise<void>;

const LONG_TTL_MS = 600_000;
const MANY = 10_000;
const LEASE_MS = 30_000;

/** A batch of journaled events from fromSeq on, one payload each (upstream ids: none). */
const journaled = (fromSeq: number, payloads: string[], opts: Partial<EventBatch> = {}): EventBatch => ({
  attach: 1,
  fromSeq,
  upstreamIds: payloads.map(() => null),
  payloads: JournalFrames.of(payloads),
  responded: [],
  ...opts,
});

/** Payloads as the rewriter writes them: an SSE block without its id line. */
const block = (data: string): string => `event: message\ndata: ${data}\n\n`;

/** The notes one watch has received so far, and a way to wait for the next ones. */
function collect(store: Store, incarnationId: string, sessionId = 's1'): { notes: JournalNote[]; unwatch: () => void } {
  const notes: JournalNote[] = [];
  const unwatch = store.watchJournal(sessionId, incarnationId, (note) => notes.push(note));
  return { notes, unwatch };
}

export function journalContract(test: ContractTest, tickUntil: TickUntil): void {
  const open = async (h: StoreHarness, id = 'g1', supersede = true) => {
    await h.store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, LONG_TTL_MS).catch(() => false);
    await h.store.openIncarnation({ id, sessionId: 's1', owner: 'r1', kind: 'get', supersede }, LONG_TTL_MS);
  };
  const record = (store: Store, b: EventBatch, maxPositions = MANY, maxBytes?: number, id = 'g1') =>
    store.recordEvents('s1', id, b, maxPositions, LONG_TTL_MS, maxBytes);
  const readAll = async (store: Store, afterSeq = 0, limit = MANY, id = 'g1') => {
    const read = await store.readJournal('s1', id, afterSeq, limit);
    return read?.events.map((e) => [e.seq, e.payload]);
  };

  test('journal: a batch with payloads journals each event at its position, in the same step', async (t, h) => {
    await open(h);
    t.match(await h.store.readJournal('s1', 'g1', 0, 10), { record: { head: 0, base: 0, journaled: true }, events: [] }, 'nothing yet');
    const payloads = [block('one'), block('zwei ü'), 'data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'];
    t.equal(await record(h.store, { ...journaled(1, payloads), upstreamIds: ['u1', null, 'u3'] }), 'ok');
    const read = await h.store.readJournal('s1', 'g1', 0, 10);
    t.match(read?.record, { id: 'g1', sessionId: 's1', head: 3, base: 0, journaled: true, state: 'open' });
    t.same(read?.events, payloads.map((payload, i) => ({ seq: i + 1, payload })), 'every event once, in order, byte for byte');
    t.match(await h.store.readIncarnation('s1', 'g1', 0), { record: { head: 3, journaled: true }, after: ['u1', null, 'u3'] }, 'positions beside');
    t.equal(await record(h.store, journaled(4, [block('four')])), 'ok');
    t.same(await readAll(h.store, 3), [[4, block('four')]], 'appended after the head');
    const other = await h.peer();
    t.same(await readAll(other), [...payloads.map((p, i) => [i + 1, p]), [4, block('four')]], 'read by another gateway');
  });

  test('journal: read after a position, at most limit; nothing after the head; null when not recorded', async (t, h) => {
    await open(h);
    const payloads = ['a', 'b', 'c', 'd', 'e'].map(block);
    t.equal(await record(h.store, journaled(1, payloads)), 'ok');
    t.same(await readAll(h.store, 2), [[3, block('c')], [4, block('d')], [5, block('e')]]);
    t.same(await readAll(h.store, 1, 2), [[2, block('b')], [3, block('c')]], 'the limit counts events');
    t.same(await readAll(h.store, 0, 0), [], 'limit 0: none');
    t.same(await readAll(h.store, 5), [], 'after the head: none');
    t.same(await readAll(h.store, 9), [], 'past the head: none');
    t.same(await readAll(h.store, -3), [], 'below position 0: none');
    t.equal(await h.store.readJournal('s1', 'nope', 0, 10), null, 'an incarnation not recorded');
    t.equal(await h.store.readJournal('nobody', 'g1', 0, 10), null, 'of another session');
  });

  test('journal: trimmed by count, base rising for positions and journal together', async (t, h) => {
    await open(h);
    t.equal(await record(h.store, journaled(1, ['1', '2', '3', '4', '5'].map(block)), 3), 'ok');
    const read = await h.store.readJournal('s1', 'g1', 2, 10);
    t.match(read?.record, { head: 5, base: 3, journaled: true });
    t.same(read?.events.map((e) => e.seq), [3, 4, 5], 'the window: positions base..head');
    t.same(await readAll(h.store, 1), [], 'an older position is not in the window: none, never a part');
    t.match(await h.store.readIncarnation('s1', 'g1', 3), { record: { base: 3 }, at: null, after: [null, null] }, 'one window for both');
    t.equal(await record(h.store, journaled(6, [block('6')]), 3), 'ok');
    t.same(await readAll(h.store, 3), [[4, block('4')], [5, block('5')], [6, block('6')]]);
  });

  test('journal: trimmed by bytes (UTF-8), the oldest first; the head is kept whatever its size', async (t, h) => {
    await open(h);
    // 10 bytes each; 'ü' is two bytes in UTF-8.
    const ten = ['aaaaaaaaaa', 'bbbbbbbbbb', 'üüüüü', 'dddddddddd'];
    t.equal(await record(h.store, journaled(1, ten), MANY, 25), 'ok');
    const read = await h.store.readJournal('s1', 'g1', 2, 10);
    t.match(read?.record, { head: 4, base: 3 });
    t.same(read?.events.map((e) => e.payload), ['üüüüü', 'dddddddddd'], 'the newest that fit in 25 bytes');
    t.equal(await record(h.store, journaled(5, ['x'.repeat(40)]), MANY, 25), 'ok');
    const big = await h.store.readJournal('s1', 'g1', 4, 10);
    t.match(big?.record, { head: 5, base: 5 }, 'only the head, larger than the bound, stays');
    t.same(big?.events.map((e) => e.seq), [5]);
    t.equal(await record(h.store, journaled(6, ['y', 'z']), MANY, 25), 'ok');
    t.same(await readAll(h.store, 5), [[6, 'y'], [7, 'z']], 'the large one went first');
    t.match(await h.store.readIncarnation('s1', 'g1', 6), { record: { base: 6 }, after: [null] }, 'one window for both');
    t.equal(await record(h.store, journaled(8, ['0123456789']), 3, 100), 'ok');
    t.match(await h.store.readIncarnation('s1', 'g1', 6), { record: { head: 8, base: 6 } }, 'the count bound applies with a byte bound');
  });

  test('journal: trimmed by count while within the byte bound, then by bytes from the exact size of what is left', async (t, h) => {
    await open(h);
    const five = (c: string) => c.repeat(5);
    t.equal(await record(h.store, journaled(1, ['a', 'b', 'c'].map(five)), 3, 25), 'ok');
    // 25 bytes with the two oldest still counted: they go by count alone.
    t.equal(await record(h.store, journaled(4, ['d', 'e'].map(five)), 3, 25), 'ok');
    t.same(await readAll(h.store, 2), [[3, five('c')], [4, five('d')], [5, five('e')]]);
    // c, d, e and f are 25 bytes: only the count bound takes c.
    t.equal(await record(h.store, journaled(6, ['f'.repeat(10)]), 3, 25), 'ok');
    t.same(await readAll(h.store, 3), [[4, five('d')], [5, five('e')], [6, 'f'.repeat(10)]], 'what the positions dropped by count weighed is not counted again');
    t.equal(await record(h.store, journaled(7, ['g'.repeat(10)]), 3, 25), 'ok');
    t.same(await readAll(h.store, 4), [[5, five('e')], [6, 'f'.repeat(10)], [7, 'g'.repeat(10)]]);
    t.equal(await record(h.store, journaled(8, ['h'.repeat(20)]), 3, 25), 'ok');
    t.same(await readAll(h.store, 7), [[8, 'h'.repeat(20)]], 'then by bytes, the oldest first');
    t.match(await h.store.readIncarnation('s1', 'g1', 7), { record: { head: 8, base: 8 } }, 'one window for both');
  });

  test('journal: a batch without payloads is recorded but not journaled, until its positions are trimmed', async (t, h) => {
    await open(h);
    t.equal(await record(h.store, journaled(1, [block('1'), block('2')]), 4), 'ok');
    t.equal(await record(h.store, { attach: 1, fromSeq: 3, upstreamIds: ['u3'], responded: [] }, 4), 'ok');
    const after = await h.store.readJournal('s1', 'g1', 0, 10);
    t.match(after?.record, { head: 3, journaled: false });
    t.same(after?.events, [], 'position 1 can no longer be read: nothing is returned rather than a part');
    t.same(await readAll(h.store, 2), [], 'nor the unjournaled position itself');
    t.equal(await record(h.store, journaled(4, [block('4'), block('5')]), 4), 'ok');
    t.same(await readAll(h.store, 3), [[4, block('4')], [5, block('5')]], 'journaled again after it');
    t.same(await readAll(h.store, 2), [], 'but not from before it');
    t.match(await h.store.readJournal('s1', 'g1', 3, 10), { record: { base: 2, journaled: false } });
    t.equal(await record(h.store, journaled(6, [block('6'), block('7')]), 4), 'ok');
    t.match(await h.store.readJournal('s1', 'g1', 3, 10), { record: { base: 4, journaled: true } }, 'journaled once position 3 is trimmed');
    t.same(await readAll(h.store, 3), [4, 5, 6, 7].map((seq) => [seq, block(String(seq))]));
  });

  test('journal: a retried batch with payloads is ok only with the bytes that landed', async (t, h) => {
    await open(h);
    const first = journaled(1, [block('a'), block('b')]);
    t.equal(await record(h.store, first), 'ok');
    t.equal(await record(h.store, first), 'ok', 'the same batch again: ok');
    t.equal(await record(h.store, journaled(2, [block('b')])), 'ok', 'its tail again: ok');
    t.equal(await record(h.store, journaled(1, [block('a'), block('B')])), 'stale', 'other bytes at the same positions');
    t.equal(await record(h.store, { ...first, upstreamIds: ['x', null] }), 'stale', 'other ids at the same positions');
    t.same(await readAll(h.store), [[1, block('a')], [2, block('b')]], 'nothing changed');
    t.equal(await record(h.store, journaled(3, [block('c')], { attach: 2 })), 'stale', 'another attachment');
    t.equal(await record(h.store, journaled(3, [block('c')])), 'ok');
    t.match(await h.store.readJournal('s1', 'g1', 0, 10), { record: { head: 3 } });
  });

  test('journal: payloads of another length than the ids are refused, and nothing changes', async (t, h) => {
    await open(h);
    await t.rejects(record(h.store, { ...journaled(1, [block('a')]), upstreamIds: ['u1', 'u2'] }), { name: 'StoreError', op: 'recordEvents' });
    t.match(await h.store.readJournal('s1', 'g1', 0, 10), { record: { head: 0 }, events: [] });
    t.equal(await record(h.store, journaled(1, [block('a')])), 'ok', 'the stream goes on at position 1');
  });

  test('journal: a POST stream created by its first batch is journaled by it', async (t, h) => {
    await open(h, 'g1');
    const b = journaled(1, [block('progress'), 'data: {"jsonrpc":"2.0","id":7,"result":{}}\n\n'], {
      responded: [7],
      create: { owner: 'r1', kind: 'post', pending: [7] },
    });
    t.equal(await record(h.store, b, MANY, undefined, 'p1'), 'ok');
    const read = await h.store.readJournal('s1', 'p1', 0, 10);
    t.match(read?.record, { kind: 'post', head: 2, pending: [], journaled: true });
    t.equal(read?.events.length, 2);
  });

  test('journal: the pump lease is set by a batch, kept by one without it, and released only by its holder', async (t, h) => {
    await open(h);
    const before = h.now();
    t.equal(await record(h.store, journaled(1, [block('a')], { pump: { instanceId: 'gw-a', leaseMs: LEASE_MS } })), 'ok');
    const after = h.now();
    const leased = (await h.store.readJournal('s1', 'g1', 0, 0))?.record;
    t.equal(leased?.pump, 'gw-a');
    t.ok(leased !== undefined && leased.pumpUntil >= before + LEASE_MS && leased.pumpUntil <= after + LEASE_MS, 'until now + leaseMs');
    t.equal(await record(h.store, journaled(2, [block('b')])), 'ok');
    t.match(await h.store.readJournal('s1', 'g1', 0, 0), { record: { pump: 'gw-a', pumpUntil: leased?.pumpUntil } }, 'a batch without pump leaves it');
    await h.store.releasePump('s1', 'g1', 'gw-b');
    t.match(await h.store.readJournal('s1', 'g1', 0, 0), { record: { pump: 'gw-a' } }, 'another instance cannot release it');
    await h.store.releasePump('s1', 'g1', 'gw-a');
    t.match(await h.store.readIncarnation('s1', 'g1', 0), { record: { pump: '', pumpUntil: 0 } }, 'released by its holder');
    await h.store.releasePump('s1', 'nope', 'gw-a');
    t.equal(await h.store.readIncarnation('s1', 'nope', 0), null, 'releasing an unknown incarnation creates nothing');
  });

  test('journal: touchTail sets tailUntil, never lowers it, and ignores unknown incarnations', async (t, h) => {
    await open(h);
    t.match(await h.store.readIncarnation('s1', 'g1', 0), { record: { tailUntil: 0 } }, 'none at first');
    const before = h.now();
    await h.store.touchTail('s1', 'g1', LEASE_MS);
    const after = h.now();
    const tailUntil = (await h.store.readIncarnation('s1', 'g1', 0))?.record.tailUntil ?? 0;
    t.ok(tailUntil >= before + LEASE_MS && tailUntil <= after + LEASE_MS, 'until now + leaseMs');
    const other = await h.peer();
    await other.touchTail('s1', 'g1', 1);
    t.match(await h.store.readIncarnation('s1', 'g1', 0), { record: { tailUntil } }, 'a shorter lease from another tail does not cut it');
    await h.store.touchTail('s1', 'nope', LEASE_MS);
    t.equal(await h.store.readIncarnation('s1', 'nope', 0), null, 'nothing created');
  });

  test('journal: watchers on another gateway get head, closed and superseded notes of their incarnation only', async (t, h) => {
    await open(h, 'g1');
    const other = await h.peer();
    const g1 = collect(other, 'g1');
    const g1Twin = collect(other, 'g1');
    const g9 = collect(other, 'g9');
    t.teardown(() => [g1, g1Twin, g9].forEach((w) => w.unwatch()));
    // A subscription is in force a little after the watch (Redis): record until the first note arrives.
    let head = 0;
    await tickUntil(t, h, 'the first head note', async () => {
      head += 1;
      t.equal(await record(h.store, journaled(head, [block(String(head))])), 'ok');
      await h.tick();
      return g1.notes.length > 0;
    });
    // Notes of one channel arrive in order: once one has, the last batch's follows.
    await tickUntil(t, h, 'the note of the last batch', async () => g1.notes.some((n) => n.kind === 'head' && n.head === head));
    t.ok(g1.notes.every((n) => n.kind === 'head' && n.head >= 1 && n.head <= head), `head notes: ${JSON.stringify(g1.notes)}`);
    g1.notes.length = 0;
    t.equal(await record(h.store, journaled(head + 1, [block('x'), block('y')])), 'ok');
    await tickUntil(t, h, 'the head note of the batch', async () => g1.notes.length > 0);
    t.same(g1.notes, [{ kind: 'head', head: head + 2 }], 'the new head, once per batch');
    t.equal(await record(h.store, { attach: 1, fromSeq: head + 3, upstreamIds: ['u'], responded: [] }), 'ok');
    await h.store.openIncarnation({ id: 'g2', sessionId: 's1', owner: 'r1', kind: 'get', supersede: true }, LONG_TTL_MS);
    await h.store.closeIncarnation('s1', 'g1');
    await tickUntil(t, h, 'superseded and closed', async () => g1.notes.length >= 3);
    t.same(g1.notes, [{ kind: 'head', head: head + 2 }, { kind: 'superseded' }, { kind: 'closed' }], 'a batch without payloads notes nothing');
    t.same(g1Twin.notes.slice(-3), g1.notes, 'every watcher of the incarnation gets them');
    t.same(g9.notes, [], 'a watcher of another incarnation gets none');
  });

  test('journal: releaseHeldGet notes release to the current GET while its pump leases it and no client tails it', async (t, h) => {
    t.equal(await h.store.releaseHeldGet('s1'), 'none', 'no session');
    await open(h, 'g1');
    await open(h, 'g0', false);
    t.equal(await h.store.releaseHeldGet('s1'), 'none', 'no pump leases the current GET');
    const other = await h.peer();
    const g1 = collect(other, 'g1');
    const g0 = collect(other, 'g0');
    t.teardown(() => [g1, g0].forEach((w) => w.unwatch()));
    t.equal(await record(h.store, journaled(1, [block('a')], { pump: { instanceId: 'gw-a', leaseMs: LEASE_MS } })), 'ok');
    t.equal(await record(h.store, journaled(1, [block('b')], { pump: { instanceId: 'gw-a', leaseMs: LEASE_MS } }), MANY, undefined, 'g0'), 'ok');
    // A subscription is in force a little after the watch (Redis): asked until the note arrives.
    await tickUntil(t, h, 'the release note', async () => {
      t.equal(await h.store.releaseHeldGet('s1'), 'asked');
      await h.tick();
      return g1.notes.some((n) => n.kind === 'release');
    });
    t.ok(g0.notes.every((n) => n.kind !== 'release'), 'only the current GET is asked');
    t.match(await h.store.readIncarnation('s1', 'g1', 0), { record: { state: 'open', pump: 'gw-a' } }, 'asking changes nothing');
    await h.store.touchTail('s1', 'g1', LEASE_MS);
    g1.notes.length = 0;
    t.equal(await h.store.releaseHeldGet('s1'), 'tailed', 'a client tails it: not asked');
    await h.store.closeIncarnation('s1', 'g1');
    await tickUntil(t, h, 'the closed note', async () => g1.notes.length > 0);
    t.same(g1.notes, [{ kind: 'closed' }], 'no release note while tailed');
    t.equal(await h.store.releaseHeldGet('s1'), 'none', 'a closed stream');
    await open(h, 'g2');
    t.equal(await record(h.store, journaled(1, [block('c')], { pump: { instanceId: 'gw-a', leaseMs: LEASE_MS } }), MANY, undefined, 'g2'), 'ok');
    await h.store.releasePump('s1', 'g2', 'gw-a');
    t.equal(await h.store.releaseHeldGet('s1'), 'none', 'a pump that let it go');
  });

  test('journal: a GET opened with its pump is leased from the start, before any event', async (t, h) => {
    await h.store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, LONG_TTL_MS);
    const before = h.now();
    const pump = { instanceId: 'gw-a', leaseMs: LEASE_MS };
    await h.store.openIncarnation({ id: 'g1', sessionId: 's1', owner: 'r1', kind: 'get', supersede: true, pump }, LONG_TTL_MS);
    const after = h.now();
    const record = (await h.store.readIncarnation('s1', 'g1', 0))?.record;
    t.match(record, { pump: 'gw-a', head: 0, held: false, clientSeq: 0 });
    t.ok(record !== undefined && record.pumpUntil >= before + LEASE_MS && record.pumpUntil <= after + LEASE_MS, 'until now + leaseMs');
    t.equal(await h.store.releaseHeldGet('s1'), 'asked', 'a pumped stream with no event yet can be asked to go');
  });

  test('journal: setHeld marks the stream held at the position written to its client, only from the lease holder', async (t, h) => {
    await open(h);
    t.equal(await record(h.store, journaled(1, [block('a'), block('b')], { pump: { instanceId: 'gw-a', leaseMs: LEASE_MS } })), 'ok');
    await h.store.setHeld('s1', 'g1', 'gw-b', 1);
    t.match(await h.store.readCurrentGet('s1'), { id: 'g1', held: false, clientSeq: 0 }, 'another instance cannot say it is held');
    await h.store.setHeld('s1', 'g1', 'gw-a', 1);
    t.match(await h.store.readCurrentGet('s1'), { id: 'g1', held: true, clientSeq: 1 }, 'held, the client having been written up to 1');
    await h.store.setHeld('s1', 'g1', 'gw-a', undefined);
    t.match(await h.store.readCurrentGet('s1'), { held: false, clientSeq: 1 }, 'a client again: no longer held, its position kept');
    await h.store.setHeld('s1', 'g1', 'gw-a', 2);
    await h.store.releasePump('s1', 'g1', 'gw-a');
    t.match(await h.store.readCurrentGet('s1'), { held: false, pump: '' }, 'the lease released: no longer held');
    await h.store.setHeld('s1', 'nope', 'gw-a', 1);
    t.equal(await h.store.readIncarnation('s1', 'nope', 0), null, 'nothing created for an unknown incarnation');
  });

  test("journal: setHeld keeps the holder's span on the record, where every read of it shows it; none unless told", async (t, h) => {
    const span = '00-5bf92f3577b34da6a3ce929d0e0e4737-10f067aa0ba902b7-01';
    await open(h);
    t.equal(await record(h.store, journaled(1, [block('a')], { pump: { instanceId: 'gw-a', leaseMs: LEASE_MS } })), 'ok');
    await h.store.setHeld('s1', 'g1', 'gw-a', 1);
    t.notOk('holderSpan' in (await h.store.readCurrentGet('s1'))!, 'held without a span (traces off): none on the record');
    await h.store.setHeld('s1', 'g1', 'gw-b', 1, span);
    t.notOk('holderSpan' in (await h.store.readCurrentGet('s1'))!, 'not from an instance without the lease');
    await h.store.setHeld('s1', 'g1', 'gw-a', 1, span);
    t.match(await h.store.readCurrentGet('s1'), { held: true, clientSeq: 1, holderSpan: span }, 'held with its span');
    t.equal((await h.store.readIncarnation('s1', 'g1', 0))?.record.holderSpan, span, 'readIncarnation shows it');
    t.equal((await h.store.touchAndRead('s1', LONG_TTL_MS, { incarnationId: 'g1', afterSeq: 1 })).view?.record.holderSpan, span, 'touchAndRead too');
    t.equal((await h.store.readJournal('s1', 'g1', 0, 10))?.record.holderSpan, span, 'and readJournal');
    t.equal((await h.store.inspectSession('s1', 10)).incarnations.find((i) => i.id === 'g1')?.holderSpan, span, 'and inspectSession');
    await h.store.setHeld('s1', 'g1', 'gw-a', undefined);
    t.match(await h.store.readCurrentGet('s1'), { held: false, holderSpan: span }, 'a client again: the span stays, the stream is no longer held');
    const other = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00';
    await h.store.setHeld('s1', 'g1', 'gw-a', 1, other);
    t.equal((await h.store.readCurrentGet('s1'))?.holderSpan, other, 'held again: the span told last');
    t.equal(await record(h.store, journaled(2, [block('b')], { pump: { instanceId: 'gw-a', leaseMs: LEASE_MS } })), 'ok');
    t.equal((await h.store.readCurrentGet('s1'))?.holderSpan, other, 'kept through the batches that follow');
  });

  test('journal: endTail ends the tail lease now and raises the client position, never lowers it', async (t, h) => {
    await open(h);
    t.equal(await record(h.store, journaled(1, [block('a'), block('b'), block('c')])), 'ok');
    await h.store.touchTail('s1', 'g1', LEASE_MS);
    const before = h.now();
    await h.store.endTail('s1', 'g1', 2);
    const ended = (await h.store.readCurrentGet('s1'))!;
    t.ok(ended.tailUntil <= h.now() && ended.tailUntil <= before + LEASE_MS, 'the tail lease ended');
    t.equal(ended.clientSeq, 2, 'written up to 2');
    await h.store.endTail('s1', 'g1', 1);
    t.equal((await h.store.readCurrentGet('s1'))?.clientSeq, 2, 'an older position does not lower it');
    await h.store.endTail('s1', 'nope', 1);
    t.equal(await h.store.readIncarnation('s1', 'nope', 0), null, 'nothing created for an unknown incarnation');
  });

  test('journal: readCurrentGet reads the session\'s current GET incarnation, null without one', async (t, h) => {
    t.equal(await h.store.readCurrentGet('s1'), null, 'no session');
    await h.store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, LONG_TTL_MS);
    t.equal(await h.store.readCurrentGet('s1'), null, 'no GET stream yet');
    await open(h, 'g1');
    await open(h, 'g0', false);
    t.match(await h.store.readCurrentGet('s1'), { id: 'g1', kind: 'get', state: 'open', owner: 'r1' }, 'the one that superseded, not the later one that did not');
    await h.store.closeIncarnation('s1', 'g1');
    t.match(await h.store.readCurrentGet('s1'), { id: 'g1', state: 'closed' }, 'as it stands: closed');
  });

  test('journal: unwatch stops the notes of that watcher only', async (t, h) => {
    await open(h, 'g1');
    const other = await h.peer();
    const leaving = collect(other, 'g1');
    const staying = collect(other, 'g1');
    t.teardown(() => staying.unwatch());
    let head = 0;
    await tickUntil(t, h, 'both watching', async () => {
      head += 1;
      t.equal(await record(h.store, journaled(head, [block(String(head))])), 'ok');
      await h.tick();
      return leaving.notes.length > 0 && staying.notes.length > 0;
    });
    leaving.unwatch();
    leaving.unwatch();
    const seen = leaving.notes.length;
    staying.notes.length = 0;
    await h.store.closeIncarnation('s1', 'g1');
    await tickUntil(t, h, 'the note reaches the staying watcher', async () => staying.notes.some((n) => n.kind === 'closed'));
    t.equal(leaving.notes.length, seen, 'none after unwatch (delivered with the staying one)');
    // Its last listener gone, the channel is left; a new watch of it works again.
    staying.unwatch();
    const again = collect(other, 'g1');
    t.teardown(() => again.unwatch());
    await tickUntil(t, h, 'a note after watching again', async () => {
      await h.store.closeIncarnation('s1', 'g1');
      await h.tick();
      return again.notes.length > 0;
    });
    t.same(again.notes[0], { kind: 'closed' });
  });
}
