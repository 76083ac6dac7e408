/** The §5 decision table: one case per reason, and the first failing check wins. */
import t from 'tap';
import type { DecodeResult } from '../../src/cursor/codec.js';
import { decide, pumpLives, type ResumptionFacts } from '../../src/resumption/decide.js';
import { LEASE_LATE_MAX_MS, leaseLate } from '../../src/streams/liveness.js';
import type { IncarnationRecord, IncarnationView, SessionRecord } from '../../src/store/types.js';

const session: SessionRecord = { sessionId: 's1', owner: 'r1', ownerEpoch: '', state: 'active', createdAt: 0 };
const record: IncarnationRecord = { id: 'inc-get-000000001', sessionId: 's1', owner: 'r1', kind: 'get', state: 'open', head: 5, base: 0, attach: 1, pending: [],
  pump: '', pumpUntil: 0, tailUntil: 0, held: false, clientSeq: 0, journaled: true };
const ok: DecodeResult = { kind: 'ok', fields: { incarnation: record.id, seq: 3 } };
const view: IncarnationView = { record, currentGet: record.id, at: 'u3', after: ['u4', 'u5'] };

/** A resumption that continues; each case changes what it needs to fail one check. */
function facts(change: Partial<ResumptionFacts> = {}): ResumptionFacts {
  return { session, ownerGone: false, ownerHealth: 'up', cursor: ok, view, ...change };
}

const foreign: DecodeResult = { kind: 'foreign', why: 'bad_mac' };
const mismatch: DecodeResult = { kind: 'session_mismatch', fields: ok.fields };
const lost: SessionRecord = { ...session, state: 'lost' };
const postRecord: IncarnationRecord = { ...record, kind: 'post', pending: [7, 'a'] };

t.test('all checks pass: continue from the owner with its own id and the ids to verify', async (t) => {
  t.same(decide(facts()), { kind: 'continue', session, view, incarnation: record.id, owner: 'r1', seq: 3, upstreamId: 'u3', expected: ['u4', 'u5'] });
  const atHead: IncarnationView = { ...view, at: 'u5', after: [] };
  t.same(
    decide(facts({ view: atHead })),
    { kind: 'continue', session, view: atHead, incarnation: record.id, owner: 'r1', seq: 3, upstreamId: 'u5', expected: [] },
    'at the head: nothing to replay',
  );
});

t.test('1 session_unknown: no session, expired, or ended by DELETE: 404', async (t) => {
  t.same(decide(facts({ session: null })), { kind: 'not_found', reason: 'session_unknown' });
  t.same(decide(facts({ session: { ...session, state: 'terminated' } })), { kind: 'not_found', reason: 'session_unknown' });
  t.same(decide(facts({ session: null, cursor: foreign, view: null })), { kind: 'not_found', reason: 'session_unknown' }, 'before foreign_cursor');
});

t.test('2 foreign_cursor', async (t) => {
  t.same(decide(facts({ cursor: foreign, view: null })), { kind: 'new_stream', reason: 'foreign_cursor', session, freshGet: true, pending: [] });
  t.same(decide(facts({ session: lost, cursor: foreign, view: null })), { kind: 'not_found', reason: 'foreign_cursor' }, 'a lost session: 404 here');
  t.same(decide(facts({ ownerGone: true, cursor: foreign, view: null })), { kind: 'not_found', reason: 'foreign_cursor' }, 'owner gone: 404 here');
});

t.test('3 session_mismatch', async (t) => {
  t.match(decide(facts({ cursor: mismatch, view: null })), { kind: 'new_stream', reason: 'session_mismatch' });
  t.same(decide(facts({ session: lost, cursor: mismatch, view: null })), { kind: 'not_found', reason: 'session_mismatch' });
});

t.test('4 unknown_stream: incarnation or position not recorded', async (t) => {
  t.match(decide(facts({ view: null })), { kind: 'new_stream', reason: 'unknown_stream' });
  t.match(decide(facts({ view: { ...view, at: undefined, after: [] } })), { kind: 'new_stream', reason: 'unknown_stream' }, 'position trimmed');
  t.match(
    decide(facts({ cursor: { kind: 'ok', fields: { incarnation: record.id, seq: 9 } }, recordAwaited: true })),
    { kind: 'new_stream', reason: 'unknown_stream' },
    'beyond the head, once its record was waited for',
  );
  t.match(decide(facts({ session: lost, view: null })), { kind: 'new_stream', reason: 'unknown_stream', freshGet: false }, "a lost session's own cursor goes on to 4");
});

t.test('4, §7: a position beyond the head whose record may still come is waited for, then decided again', async (t) => {
  const beyond: DecodeResult = { kind: 'ok', fields: { incarnation: record.id, seq: 7 } };
  const now = 1_000_000;
  const leased = (pumpUntil: number, change: Partial<IncarnationRecord> = {}): IncarnationView => ({ ...view, record: { ...record, pump: 'gw-a', pumpUntil, ...change } });
  const waits = { kind: 'await_record', incarnation: record.id, seq: 7 };
  t.same(decide(facts({ cursor: beyond, view: leased(now + 1), now, journal: true })), waits, "the pump's lease runs: its instance may still record it");
  t.same(decide(facts({ cursor: beyond, now })), waits, 'no lease kept (journal off): nothing says its holder died');
  t.same(decide(facts({ cursor: beyond, view: leased(now + 1), now, journal: true, pumpEnded: true })), waits, 'a pump that ended here may still write its backlog');
  t.match(decide(facts({ cursor: beyond, view: leased(now), now, journal: true })), { kind: 'new_stream', reason: 'unknown_stream' }, 'the lease ran out, its instance gone: lost with it');
  t.same(decide(facts({ cursor: beyond, view: leased(now - 5000), now, journal: true, pumpInstanceAlive: true })), waits, 'the lease ran out, its instance alive: only late, waited for');
  t.match(
    decide(facts({ cursor: beyond, view: leased(now - 5000), now, journal: true, pumpInstanceAlive: true, recordAwaited: true })),
    { kind: 'new_stream', reason: 'unknown_stream' },
    'waited for, the record still not in: as before',
  );
  t.match(decide(facts({ cursor: beyond, view: leased(now + 1, { state: 'closed' }), now })), { kind: 'new_stream', reason: 'unknown_stream' }, 'a closed stream records nothing more');
  t.match(decide(facts({ cursor: beyond, view: leased(now + 1), now, recordAwaited: true })), { kind: 'new_stream', reason: 'unknown_stream' }, 'waited for already: not again');
  t.match(decide(facts({ cursor: beyond, view: null, now })), { kind: 'new_stream', reason: 'unknown_stream' }, 'an incarnation not recorded at all: nothing to wait on');
  t.match(decide(facts({ cursor: beyond, session: null })), { kind: 'not_found' }, 'after check 1');
  const recorded = leased(now + 1, { head: 7 });
  t.match(decide(facts({ cursor: beyond, view: { ...recorded, at: 'u7', after: [] }, now, recordAwaited: true })), { kind: 'continue', seq: 7 }, 'the record came: continued');
});

t.test('5 superseded: a newer GET incarnation exists', async (t) => {
  t.match(decide(facts({ view: { ...view, currentGet: 'inc-newer-0000001' } })), { kind: 'new_stream', reason: 'superseded' });
  t.match(
    decide(facts({ view: { ...view, record: postRecord, currentGet: 'inc-newer-0000001' } })),
    { kind: 'continue' },
    'a POST stream is never superseded by a GET',
  );
  t.match(decide(facts({ view: { ...view, currentGet: 'inc-newer-0000001' }, ownerGone: true })), { reason: 'superseded' }, 'before owner_gone');
});

t.test('6 owner_gone: the owner is gone or the session ended with it', async (t) => {
  t.match(decide(facts({ ownerGone: true })), { kind: 'new_stream', reason: 'owner_gone', freshGet: false });
  t.match(decide(facts({ session: lost })), { kind: 'new_stream', reason: 'owner_gone', freshGet: false });
  t.match(decide(facts({ session: lost, view: { ...view, record: postRecord } })), { reason: 'owner_gone', pending: [7, 'a'] }, 'pending requests of a POST stream are named');
  t.match(decide(facts({ ownerGone: true, view: { ...view, at: null } })), { reason: 'owner_gone' }, 'before gap');
});

t.test('a suspected owner: 503, after every check that needs no owner', async (t) => {
  t.same(decide(facts({ ownerHealth: 'suspect' })), { kind: 'unavailable', owner: 'r1' });
  t.match(decide(facts({ ownerHealth: 'suspect', view: { ...view, currentGet: 'inc-newer-0000001' } })), { reason: 'superseded' });
});

t.test('7 gap, where no replay can be asked for', async (t) => {
  t.match(decide(facts({ view: { ...view, at: null } })), { kind: 'new_stream', reason: 'gap', freshGet: true }, 'the cursor is a signal event the gateway made');
  t.match(decide(facts({ view: { ...view, after: ['u4', null] } })), { reason: 'gap' }, 'a gateway event after the cursor');
  t.match(decide(facts({ view: { ...view, record: { ...record, state: 'closed' } } })), { reason: 'gap' }, 'a closed stream before its end');
});

t.test('7 gap, where the owner was asked and did not replay exactly', async (t) => {
  t.match(decide(facts({ replayFailed: true })), { kind: 'new_stream', reason: 'gap', freshGet: true, pending: [] });
  t.match(decide(facts({ replayFailed: true, view: { ...view, record: postRecord } })), { reason: 'gap', pending: [7, 'a'] }, 'pending requests named');
  t.match(decide(facts({ replayFailed: true, ownerGone: true })), { reason: 'owner_gone' }, 'owner_gone first');
});

t.test('what carrying a decision out learns is decided by the same rule', async (t) => {
  // The owner refused the connection, or answered 404 for the session: it is gone for this session.
  t.match(decide(facts({ ownerGone: true })), { kind: 'new_stream', reason: 'owner_gone', freshGet: false });
  t.match(decide(facts({ session: lost })), { kind: 'new_stream', reason: 'owner_gone', freshGet: false });
  // The attach read the incarnation again: whatever changed since the first read decides.
  t.match(decide(facts({ view: { ...view, at: undefined, after: [] } })), { reason: 'unknown_stream' }, 'trimmed meanwhile');
  t.match(decide(facts({ view: { ...view, after: ['u4', null] } })), { reason: 'gap' }, 'the gateway wrote an event meanwhile');
  t.match(decide(facts({ view: { ...view, currentGet: 'inc-newer-0000001' } })), { reason: 'superseded' }, 'superseded meanwhile');
});

t.test('the last cursor of a stream the gateway ended on purpose settles', async (t) => {
  const closedAtHead: IncarnationView = { record: { ...record, state: 'closed', head: 3 }, currentGet: record.id, at: null, after: [] };
  t.same(decide(facts({ view: closedAtHead })), { kind: 'complete' }, 'session alive: nothing follows, no new signal');
  t.same(decide(facts({ session: lost, view: closedAtHead })), { kind: 'not_found', reason: 'owner_gone' }, 'session gone: 404');
});

t.test('the last cursor of a POST stream whose every response was forwarded settles', async (t) => {
  const answered: IncarnationView = { record: { ...postRecord, pending: [], head: 3 }, currentGet: undefined, at: 'u3', after: [] };
  t.same(decide(facts({ view: answered })), { kind: 'complete' }, 'nothing follows a POST stream past its responses');
  t.same(decide(facts({ session: lost, view: answered })), { kind: 'not_found', reason: 'owner_gone' }, 'session gone: 404');
  t.match(decide(facts({ view: { ...answered, record: { ...answered.record, pending: [7] } } })), { kind: 'continue' }, 'a response still to come: continued');
  t.match(decide(facts({ view: { ...answered, record: { ...answered.record, head: 5 }, after: ['u4', 'u5'] } })), { kind: 'continue' }, 'before its end: replayed');
});

// CONTRACT.md §8: the journal's rules. A journaled incarnation whose events carry no upstream id
// (a replica without a log); `now` against the pump's lease.
const NOW = 1_000_000;
const journaledGet: IncarnationRecord = { ...record, journaled: true, pump: 'gw-a', pumpUntil: NOW + 1, tailUntil: 0 };
const noLog: IncarnationView = { record: journaledGet, currentGet: record.id, at: null, after: [null, null] };
const dead = { pump: 'gw-a', pumpUntil: NOW };
function journal(change: Partial<ResumptionFacts> = {}): ResumptionFacts {
  return facts({ view: noLog, journal: true, now: NOW, ...change });
}
function withRecord(v: IncarnationView, change: Partial<IncarnationRecord>): IncarnationView {
  return { ...v, record: { ...v.record, ...change } };
}

t.test('J3: a cursor in the journal while the pump lives: the journal, then live', async (t) => {
  t.same(decide(journal()), { kind: 'journal', session, record: journaledGet, seq: 3, live: true });
  t.match(decide(journal({ view: { ...withRecord(noLog, { head: 3 }), after: [] } })), { kind: 'journal', live: true }, 'at the head: live at once');
  t.match(decide(journal({ view: { ...view, record: journaledGet } })), { kind: 'journal', live: true }, 'a replica with a log is not asked while the pump lives');
  t.match(decide(journal({ ownerHealth: 'suspect' })), { kind: 'journal', live: true }, 'a suspected owner is not asked either');
});

t.test('J3: a pump reads its replica while its lease runs, never once the stream ended here', async (t) => {
  t.equal(pumpLives(journaledGet, NOW), true, 'the lease runs');
  t.equal(pumpLives({ ...journaledGet, pumpUntil: NOW }, NOW), false, 'the lease lapsed at now');
  t.equal(pumpLives({ ...journaledGet, pump: '' }, NOW), false, 'the lease released');
  t.equal(pumpLives(journaledGet, NOW, true), false, "this instance's lease, the stream ended here");
  t.match(decide(journal({ pumpEnded: true })), { kind: 'journal', live: false }, 'no log: the journal, then the end, not live');
  t.match(decide(journal({ view: { ...view, record: journaledGet }, pumpEnded: true })), { kind: 'continue' }, "a log: the owner's log takes over");
});

t.test('J3: a lease only late, its instance alive, is a pump that lives: never a gap or a takeover for lateness alone', async (t) => {
  const late = { pump: 'gw-a', pumpUntil: NOW - 5000 };
  t.equal(leaseLate({ ...journaledGet, ...late }, NOW), true, 'lapsed lately: its instance is asked');
  t.equal(leaseLate(journaledGet, NOW), false, 'running: nothing to ask');
  t.equal(leaseLate({ ...journaledGet, pumpUntil: NOW - LEASE_LATE_MAX_MS }, NOW), false, 'lapsed too long ago: a release that never landed');
  t.equal(leaseLate({ ...journaledGet, pump: '', pumpUntil: 0 }, NOW), false, 'released: none');
  t.equal(pumpLives({ ...journaledGet, ...late }, NOW, false, true), true, 'its instance alive: lives');
  t.equal(pumpLives({ ...journaledGet, ...late }, NOW, false, false), false, 'its instance gone too: gone');
  t.equal(pumpLives({ ...journaledGet, ...late }, NOW, true, true), false, 'ended here: gone, alive or not');
  t.equal(pumpLives({ ...journaledGet, pumpUntil: NOW - LEASE_LATE_MAX_MS }, NOW, false, true), false, 'lapsed past LEASE_LATE_MAX_MS: gone');
  const lateNoLog = withRecord(noLog, late);
  t.same(decide(journal({ view: lateNoLog, pumpInstanceAlive: true })), { kind: 'journal', session, record: { ...journaledGet, ...late }, seq: 3, live: true }, 'no log: the journal, then live (tailed)');
  t.match(decide(journal({ view: lateNoLog })), { kind: 'journal', live: false }, 'the contrast, its instance gone: the journal, then the end');
  t.match(decide(journal({ view: { ...withRecord(noLog, { ...late, head: 3 }), after: [] }, pumpInstanceAlive: true })), { kind: 'journal', live: true }, 'at the head: live, not a gap');
  t.match(decide(journal({ view: { ...withRecord(noLog, { ...late, head: 3 }), after: [] } })), { kind: 'new_stream', reason: 'gap' }, 'the contrast at the head: gap');
  const lateWithLog = withRecord({ ...view, record: journaledGet }, late);
  t.match(decide(journal({ view: lateWithLog, pumpInstanceAlive: true })), { kind: 'journal', live: true }, "a log: the owner is not asked while the pump lives");
  t.match(decide(journal({ view: lateWithLog })), { kind: 'continue' }, "the contrast: the owner's log takes over");
  const post = withRecord(noLog, { ...late, kind: 'post', pending: [7] });
  t.match(decide(journal({ view: { ...post, at: undefined, after: [] }, pumpInstanceAlive: true })), { kind: 'new_stream', reason: 'gap', pending: [], follow: {} }, 'below the window, a call running: followed, not failed');
});

t.test('J3: the pump gone, the owner’s log takes over; without one, the journal and then the reconnection decides', async (t) => {
  const withLog = withRecord({ ...view, record: journaledGet }, dead);
  t.match(decide(journal({ view: withLog })), { kind: 'continue', upstreamId: 'u3', expected: ['u4', 'u5'] }, 'the owner replays, verified');
  t.match(decide(journal({ view: withRecord(withLog, { pump: '', pumpUntil: 0 }) })), { kind: 'continue' }, 'released lease: the same');
  t.same(decide(journal({ view: withRecord(noLog, dead) })), { kind: 'journal', session, record: { ...journaledGet, ...dead }, seq: 3, live: false }, 'no log: the journal, then the end');
  t.match(decide(journal({ view: { ...withRecord(noLog, { ...dead, head: 3 }), after: [] } })), { kind: 'new_stream', reason: 'gap' }, 'no log, nothing after the cursor: gap');
  t.match(decide(journal({ view: withLog, replayFailed: true })), { kind: 'journal', live: false }, 'the owner did not replay: the journal, then the end');
  t.match(decide(journal({ view: withRecord(withLog, { ...dead }), ownerHealth: 'suspect' })), { kind: 'unavailable' }, 'a suspected owner, pump gone: 503');
});

t.test('J3 mixed ids: the pump gone, the journal first, then the owner’s log from the journal’s head where that event has an upstream id', async (t) => {
  // Some events after the cursor without an upstream id: the owner cannot prove them.
  const mixed = withRecord({ ...view, record: journaledGet, at: 'u3', after: [null, 'u5'] }, dead);
  t.match(decide(journal({ view: mixed })), { kind: 'journal', seq: 3, live: false }, 'from the cursor: the journal');
  // What follows the journal's last event is decided as a resumption from it (resume.ts).
  const head: DecodeResult = { kind: 'ok', fields: { incarnation: record.id, seq: 5 } };
  const atHead = { ...mixed, at: 'u5', after: [] };
  t.match(decide(journal({ cursor: head, view: atHead })), { kind: 'continue', seq: 5, upstreamId: 'u5', expected: [] }, 'from its head: the owner’s log, after that id');
  t.match(decide(journal({ cursor: head, view: { ...atHead, at: null } })), { kind: 'new_stream', reason: 'gap' }, 'a head event without an upstream id: gap');
  t.match(decide(journal({ cursor: head, view: atHead, ownerGone: true })), { kind: 'new_stream', reason: 'owner_gone' }, 'the owner gone: owner_gone');
  t.match(decide(journal({ cursor: head, view: atHead, replayFailed: true })), { kind: 'new_stream', reason: 'gap' }, 'the owner did not replay exactly: gap');
});

t.test('J4: a POST stream’s journal survives its owner', async (t) => {
  const post = withRecord(noLog, { kind: 'post', pending: [7] });
  t.match(decide(journal({ view: post, ownerGone: true })), { kind: 'journal', live: true }, 'pump alive, owner gone');
  t.match(decide(journal({ view: withRecord(post, dead), session: lost })), { kind: 'journal', live: false }, 'pump and owner gone: the journal');
  const atHead = { ...withRecord(post, { ...dead, head: 3 }), after: [] };
  t.match(decide(journal({ view: atHead, session: lost })), { kind: 'new_stream', reason: 'owner_gone', pending: [7] }, 'at its head: -32010 for the call');
  t.match(decide(journal({ view: atHead })), { kind: 'new_stream', reason: 'gap', pending: [7] }, 'owner up without a log: -32010, gap');
  t.same(decide(journal({ view: { ...withRecord(post, { pending: [], head: 3 }), after: [] } })), { kind: 'complete' }, 'answered, at its head: complete');
});

t.test('J5: below the journal window is a gap, after superseded and owner_gone', async (t) => {
  const below: IncarnationView = { ...noLog, at: undefined, after: [] };
  t.match(decide(journal({ view: below })), { kind: 'new_stream', reason: 'gap', freshGet: true });
  t.match(decide(journal({ view: { ...below, currentGet: 'inc-newer-0000001' } })), { reason: 'superseded' });
  t.match(decide(journal({ view: below, ownerGone: true })), { reason: 'owner_gone' });
  t.match(decide(journal({ view: withRecord(below, { journaled: false }) })), { reason: 'unknown_stream' }, 'not journaled: as without the journal');
  t.match(decide(facts({ view: withRecord(below, {}) })), { reason: 'unknown_stream' }, 'journal off: unknown_stream');
  t.notOk('responses' in decide(journal({ view: below })), 'a GET stream: no responses to deliver');
});

t.test('J4 after a gap: a journaled POST stream hands over the responses its journal still holds', async (t) => {
  const below: IncarnationView = { ...withRecord(noLog, { kind: 'post', pending: [], base: 10, head: 12 }), at: undefined, after: [] };
  t.match(decide(journal({ view: below })), { kind: 'new_stream', reason: 'gap', pending: [], responses: { incarnation: record.id, after: 9 } }, 'from the window’s first event');
  // Its calls settle with their responses, and the stream ends: a fresh GET would supersede the
  // session's own GET stream, which its client may be resuming at the same moment.
  t.match(decide(journal({ view: below })), { freshGet: false }, 'no fresh GET after a POST stream’s responses');
  t.match(decide(facts({ view: withRecord(view, { kind: 'post', pending: [] }), replayFailed: true })), { reason: 'gap', freshGet: false }, 'journal off: none either');
  t.match(decide(journal({ view: below, ownerGone: true })), { reason: 'owner_gone', responses: { after: 9 } }, 'the owner gone too');
  t.notOk('responses' in decide(facts({ view: withRecord(below, {}) })), 'journal off: none');
  t.notOk('responses' in decide(journal({ view: withRecord(below, { journaled: false }) })), 'not journaled: none');
});

t.test('GET streams: superseded and owner_gone come before the journal', async (t) => {
  t.match(decide(journal({ view: { ...noLog, currentGet: 'inc-newer-0000001' } })), { reason: 'superseded' });
  t.match(decide(journal({ ownerGone: true })), { reason: 'owner_gone' });
});

t.test('journal off: the owner replays as without it', async (t) => {
  t.match(decide(facts({ view: { ...view, record: journaledGet } })), { kind: 'continue' });
  t.match(decide(facts({ view: noLog })), { kind: 'new_stream', reason: 'gap' });
});

t.test('J5 and J4: a call still running, its cursor below the window: a gap, then followed to its response', async (t) => {
  const below: IncarnationView = { ...withRecord(noLog, { kind: 'post', pending: [7], base: 10, head: 12 }), at: undefined, after: [] };
  t.same(
    decide(journal({ view: below })),
    { kind: 'new_stream', reason: 'gap', session, pending: [], freshGet: false, follow: { record: below.record, seq: 9 } },
    'the pump lives: no -32010, the journal from its window on, then live',
  );
  t.match(decide(journal({ view: withRecord(below, dead) })), { reason: 'gap', pending: [7], responses: { after: 9 } }, 'the pump gone: -32010 unless journaled');
  t.notOk('follow' in decide(journal({ view: withRecord(below, dead) })), 'the pump gone: nothing to follow');
  t.match(decide(journal({ view: below, ownerGone: true })), { reason: 'owner_gone', pending: [7] }, 'the owner gone: owner_gone, as before');
  t.notOk('follow' in decide(journal({ view: withRecord(below, { pending: [] }) })), 'answered: its responses are delivered, nothing followed');
});
