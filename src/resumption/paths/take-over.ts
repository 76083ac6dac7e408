/**
 * A plain GET that takes its session's held GET stream over (streams/held-get.ts): the journal's
 * events after the last position written to the client that left, then the live stream, as a
 * continuation from the journal (J3) is, but answered as the fresh stream the client asked for.
 * Decided as a resumption from that position where it cannot go on (the window moved past it:
 * a gap, signalled; the pump gone: what follows is decided anew).
 */
import type { IncarnationRecord, SessionRecord } from '../../store/types.js';
import type { ResumptionFacts } from '../decide.js';
import { fromJournal, type JournalKit } from './journal.js';
import type { Exchange, ResumeKit } from './kit.js';

export type TakeOverKit = JournalKit & Pick<ResumeKit, 'fleet'>;

/** The held GET of `session`, whose incarnation is `record`, continued for this request. */
export function takeOverHeld(kit: TakeOverKit, ex: Exchange, session: SessionRecord, record: IncarnationRecord): Promise<unknown> {
  const seq = record.clientSeq;
  const facts: ResumptionFacts = {
    session,
    ownerGone: false,
    ownerHealth: kit.fleet.health(session.owner),
    cursor: { kind: 'ok', fields: { incarnation: record.id, seq } },
    view: { record, currentGet: record.id, after: [], at: undefined },
    journal: true,
    now: Date.now(),
  };
  return fromJournal(kit, ex, facts, { kind: 'journal', session, record, seq, live: true }, 'take_over');
}
