/**
 * The resumption decision of CONTRACT.md §5, as a pure function over what the store and the fleet
 * know. It reads top to bottom like the table: the first check that fails gives the reason.
 * Check 7 (the owner's replay) happens later, against the bytes the owner sends; here it is
 * refused early when a replay cannot even be asked for, and decided when the owner was asked and
 * did not replay. What is learnt while carrying a decision out (the attach's fresh view, an owner
 * that refuses or no longer knows the session, a replay that fails) goes back into the facts and
 * the decision is made again: the rule lives here only.
 *
 * With the journal (CONTRACT.md §8), a cursor in the journal's window is continued from the
 * journal while the stream's pump lives (J3), and a POST stream's journal even after its owner is
 * gone (J4); the owner's log serves only to take a stream over from a pump that is gone; a cursor
 * below the window, or a stream nothing can prove contiguous, is a gap (J5).
 */
import type { DecodeResult } from '../cursor/codec.js';
import type { Health } from '../fleet/health.js';
import { tagId } from '../sse/event-tag.js';
import { leaseLate } from '../streams/liveness.js';
import type { IncarnationRecord, IncarnationView, JsonRpcId, SessionRecord } from '../store/types.js';

export const REASONS = ['session_unknown', 'foreign_cursor', 'session_mismatch', 'unknown_stream', 'superseded', 'owner_gone', 'gap'] as const;
export type Reason = (typeof REASONS)[number];
/** The reasons answered with a new stream (signal) or 410 (reject). */
export type NewStreamReason = Exclude<Reason, 'session_unknown'>;

export interface ResumptionFacts {
  /** The session named by Mcp-Session-Id, as the store holds it (null: none, or no header). */
  readonly session: SessionRecord | null;
  /** The session's owner is gone (R4): its epoch was retired, or it left the configuration. */
  readonly ownerGone: boolean;
  /** The owner's health on this instance (suspect: 503). */
  readonly ownerHealth: Health | undefined;
  /** The Last-Event-ID value, decoded against the request's session. */
  readonly cursor: DecodeResult;
  /** The cursor's incarnation read at the cursor's position (null: not recorded). */
  readonly view: IncarnationView | null;
  /** The owner was asked to replay and did not replay exactly (check 7, known only by asking). */
  readonly replayFailed?: boolean;
  /** resumption.journal.enabled (absent: off). */
  readonly journal?: boolean;
  /** Milliseconds since the epoch, against which a pump's lease is read (needed with the journal). */
  readonly now?: number;
  /**
   * The pump's lease is this instance's, and this instance no longer pumps the stream: its
   * replica's stream has ended here (the lease's release may not have landed yet).
   */
  readonly pumpEnded?: boolean;
  /**
   * The instance that the pump's lapsed lease names still renews its liveness
   * (docs/journal.md#instance-liveness): alive and reading, its stream's renewal only late.
   * Asked only of a lease that lapsed.
   */
  readonly pumpInstanceAlive?: boolean;
  /**
   * §7: the decision waited for the cursor's record already (resumption.replayTimeoutMs): a
   * position still not recorded now was lost with the instance that held its stream.
   */
  readonly recordAwaited?: boolean;
}

export type Decision =
  /** Answered as R3: 404 Session not found. */
  | { readonly kind: 'not_found'; readonly reason: Reason }
  /** The owner is only suspected (R4): 503 with Retry-After. */
  | { readonly kind: 'unavailable'; readonly owner: string }
  /**
   * §7: the cursor's position is not recorded yet, and the instance that holds its stream may
   * still record it (its records written late after a store outage): wait for it, then decide again.
   */
  | { readonly kind: 'await_record'; readonly incarnation: string; readonly seq: number }
  /** The cursor is the last event of a stream that is over: nothing follows. */
  | { readonly kind: 'complete' }
  | {
      readonly kind: 'new_stream';
      readonly reason: NewStreamReason;
      readonly session: SessionRecord;
      /** POST stream requests whose responses never reached the client: each gets -32010. */
      readonly pending: readonly JsonRpcId[];
      /**
       * A fresh GET stream from the owner may follow the signal: the session lives on with its
       * owner up, and the cursor is not of a POST stream. A POST stream's signal ends once its
       * calls are settled (-32010, or their journaled responses: J4): a fresh GET would supersede
       * the session's own GET stream (E4), which its client may be resuming at the same moment.
       */
      readonly freshGet: boolean;
      /**
       * A journaled POST stream (J4): the responses its journal still holds after `after` are
       * delivered after the signal, with their original cursors, so that a call whose response
       * reached the gateway settles with it, whatever was lost before it.
       */
      readonly responses?: { readonly incarnation: string; readonly after: number };
      /**
       * A journaled POST stream whose pump lives, with calls still awaited (J4): after the signal,
       * its journal's events from the window on, then the live stream, to the calls' responses.
       * The calls are not failed: their responses have yet to reach the gateway, and will.
       */
      readonly follow?: { readonly record: IncarnationRecord; readonly seq: number };
    }
  | {
      readonly kind: 'continue';
      readonly session: SessionRecord;
      /** What the decision read: the replay is verified against it. */
      readonly view: IncarnationView;
      readonly incarnation: string;
      readonly owner: string;
      /** The cursor's position; replayed events get the positions after it. */
      readonly seq: number;
      /** The owner's own event id at the cursor, sent to it as Last-Event-ID (the id of its tag). */
      readonly upstreamId: string;
      /** The tags (sse/event-tag.ts: id and digest) of every recorded event after the cursor, in order (check 7). */
      readonly expected: readonly string[];
    }
  | {
      /** J3, J4: the journal's events after the cursor, with their original cursors. */
      readonly kind: 'journal';
      readonly session: SessionRecord;
      readonly record: IncarnationRecord;
      readonly seq: number;
      /**
       * The pump lives: the live stream follows the journal. Otherwise the stream ends after the
       * journal's last event, and the client's reconnection from there is decided anew.
       */
      readonly live: boolean;
    };

/**
 * J3: a stream's pump reads its replica's stream while its lease runs, or while the lease is only
 * late and its instance alive (`instanceAlive`: its liveness runs, docs/journal.md#instance-liveness):
 * a renewal delayed by load is not a loss. Not once the lease is this instance's and the stream has
 * ended here (`endedHere`). Never live once the replica's stream ended: the pump gives its lease up
 * before it ends the client's stream, so that a client back at once is not continued with nothing.
 */
export function pumpLives(record: IncarnationRecord, now: number, endedHere = false, instanceAlive = false): boolean {
  if (record.pump === '' || endedHere) return false;
  return record.pumpUntil > now || (instanceAlive && leaseLate(record, now));
}

/**
 * §7: the record of a position beyond the head may still come. It comes from the instance that
 * holds the stream, which lives while its pump lives (pumpLives: its lease runs, or its instance
 * is alive); a pump whose instance is gone too was lost with it, its unwritten records with it.
 * Without the journal no lease is kept, so nothing tells a live holder from a dead one: such a
 * record is waited for too (bounded by the wait).
 */
export function recordMayCome(record: IncarnationRecord, now: number, instanceAlive = false): boolean {
  return record.state === 'open' && (record.pump === '' || pumpLives(record, now, false, instanceAlive));
}

export function decide(facts: ResumptionFacts): Decision {
  const { session, cursor, view } = facts;

  // 1. session_unknown: never held, expired, or ended by the client (R3).
  if (!session || session.state === 'terminated') return { kind: 'not_found', reason: 'session_unknown' };
  const lost = session.state === 'lost' || facts.ownerGone;
  const newStream = (reason: NewStreamReason, pending: readonly JsonRpcId[] = [], post = false): Decision => ({
    kind: 'new_stream',
    reason,
    session,
    pending,
    freshGet: !lost && !post,
  });

  // 2. foreign_cursor. A lost session answers 404 here: only its own cursors go further.
  if (cursor.kind === 'foreign') return lost ? { kind: 'not_found', reason: 'foreign_cursor' } : newStream('foreign_cursor');

  // 3. session_mismatch.
  if (cursor.kind === 'session_mismatch') return lost ? { kind: 'not_found', reason: 'session_mismatch' } : newStream('session_mismatch');

  // 4. unknown_stream: the incarnation, or the cursor's position in it, is not recorded. A cursor
  // below a journal's window is recorded enough to be a gap (J5, below).
  // A position beyond the head whose record may still come is waited for first (§7).
  const { seq } = cursor.fields;
  if (view && seq > view.record.head && !facts.recordAwaited && recordMayCome(view.record, facts.now ?? 0, facts.pumpInstanceAlive)) {
    return { kind: 'await_record', incarnation: view.record.id, seq };
  }
  if (!view || seq > view.record.head) return newStream('unknown_stream');
  const { record } = view;
  const journaled = facts.journal === true && record.journaled;
  const belowWindow = view.at === undefined;
  if (belowWindow && !journaled) return newStream('unknown_stream');
  const pending = record.kind === 'post' ? record.pending : [];
  const responses = journaled && record.kind === 'post' ? { incarnation: record.id, after: Math.max(seq, record.base - 1) } : undefined;
  const postStream = (reason: NewStreamReason): Decision => ({ ...newStream(reason, pending, record.kind === 'post'), ...(responses ? { responses } : {}) });

  // A stream that is over, resumed from its last event: nothing follows. Over: the gateway ended
  // it on purpose, or it is a POST stream whose every response was forwarded (the replica ends a
  // POST stream there). The client settles at once, never held open or signalled again and
  // again: 404 where the session is gone, else an empty end.
  const over = record.state === 'closed' || (record.kind === 'post' && record.pending.length === 0);
  if (over && seq === record.head) {
    return lost ? { kind: 'not_found', reason: 'owner_gone' } : { kind: 'complete' };
  }

  // J3: the journal holds every event after the cursor. Live while the pump reads the replica.
  const pumpAlive = journaled && pumpLives(record, facts.now ?? 0, facts.pumpEnded, facts.pumpInstanceAlive);
  const fromJournal = (live: boolean): Decision => ({ kind: 'journal', session, record, seq, live });

  // J4: a POST stream's journal survives its owner; its response, if journaled, with it.
  if (journaled && !belowWindow && record.kind === 'post' && (pumpAlive || seq < record.head)) return fromJournal(pumpAlive);

  // 5. superseded: a newer GET incarnation of the session exists (E4).
  if (record.kind === 'get' && view.currentGet !== undefined && view.currentGet !== record.id) return newStream('superseded', pending);

  // 6. owner_gone: the owner is gone, or the session ended because it was.
  if (lost || record.owner !== session.owner) return postStream('owner_gone');

  // J5: older than the journal's window.
  if (belowWindow) {
    // A call still running: what was lost is signalled, and the call is followed to its response
    // from the journal's window on, not failed with -32010 (its response has yet to come, J4).
    if (pumpAlive && pending.length > 0) {
      return { kind: 'new_stream', reason: 'gap', session, pending: [], freshGet: false, follow: { record, seq: Math.max(record.base, 1) - 1 } };
    }
    return postStream('gap');
  }
  // J3: the pump reads the replica's stream; the owner is not asked.
  if (pumpAlive) return fromJournal(true);
  if (facts.ownerHealth === 'suspect') return { kind: 'unavailable', owner: session.owner };

  // 7. gap, where no replay can be asked for: a closed stream has no owner stream to resume,
  // and a position the gateway made itself (a signal) has no owner id to resume after. Or the
  // owner was asked, and did not replay exactly; or its log diverged from what was recorded
  // (E6: the incarnation is marked `diverged`, and its owner is never asked again).
  // With the journal, that is a pump gone (J3): the owner's log takes the stream over where it can,
  // else the journal's events go, and what follows them cannot be proven contiguous.
  const expected = view.after.filter((id): id is string => id !== null);
  const replayable = record.state === 'open' && view.at !== null && expected.length === view.after.length && !facts.replayFailed;
  if (replayable) return { kind: 'continue', session, view, incarnation: record.id, owner: record.owner, seq, upstreamId: tagId(view.at!), expected };
  if (journaled && seq < record.head) return fromJournal(false);
  return postStream('gap');
}
