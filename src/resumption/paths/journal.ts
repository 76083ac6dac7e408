/**
 * The continuation from the journal (J3, J4): the journal's events after the cursor, then the
 * live stream while the pump lives (from-journal.ts), and once every event went and the pump is
 * gone, what follows decided again on the same response. A takeover of a held GET (take-over.ts)
 * and the follow after a POST stream's signal (new-stream.ts) go on the same way.
 */
import type { CursorCodec, DecodeResult } from '../../cursor/codec.js';
import { isStoreError } from '../../errors.js';
import { SESSION_HEADER } from '../../headers.js';
import { NO_REASON, NO_REPLICA } from '../../metrics.js';
import type { JournalRead } from '../../store/types.js';
import { decide, type Decision, type ResumptionFacts } from '../decide.js';
import { continueFromJournal, JOURNAL_READ_EVENTS } from '../from-journal.js';
import { primingEvent } from '../../sse/rewriter.js';
import { RESUMPTION_HEADER } from '../signal.js';
import { decideAgain, endBegun, gatewayStreamHead, type Exchange, type JournalPrefetch, type ResumeKit } from './kit.js';

export type FromJournal = Extract<Decision, { kind: 'journal' }>;
export type JournalKit = Pick<ResumeKit, 'config' | 'store' | 'keys' | 'pumps' | 'metrics' | 'requests' | 'answer' | 'gather'>;

/** J3, J4: the journal's events after the cursor, then the live stream while the pump lives. */
export async function fromJournal(
  kit: JournalKit,
  ex: Exchange,
  facts: ResumptionFacts,
  decision: FromJournal,
  as: 'resumption' | 'take_over' = 'resumption',
): Promise<unknown> {
  const { session, record, seq } = decision;
  const { request, reply } = ex;
  let codec;
  let first;
  try {
    codec = await kit.keys.codec();
    first = await (takePrefetched(ex, record.id, seq) ?? kit.store.readJournal(session.sessionId, record.id, seq, JOURNAL_READ_EVENTS));
  } catch (err) {
    if (!isStoreError(err)) throw err;
    return kit.answer(request, reply, 'GW_STORE_UNAVAILABLE');
  }
  // The window moved past the cursor since the decision read it (or the stream is gone): decided
  // again on what the journal says now.
  if (first === null || (seq < first.record.head && first.events[0]?.seq !== seq + 1)) {
    const view = facts.view && first ? { ...facts.view, record: first.record, at: undefined } : null;
    return decideAgain(ex, { ...facts, view, now: Date.now() });
  }
  const res = reply.raw;
  if (!res.headersSent) {
    if (as === 'take_over') {
      kit.metrics.heldTakeovers.inc();
    } else {
      kit.metrics.continuations.inc({ source: 'journal' });
      kit.requests.resumption(request, 'continued', NO_REASON);
    }
    kit.requests.answered(request, { status: 200, replica: NO_REPLICA });
    reply.hijack();
    res.writeHead(
      200,
      gatewayStreamHead({ [SESSION_HEADER]: session.sessionId, ...(as === 'take_over' ? {} : { [RESUMPTION_HEADER]: 'continued' }) }),
    );
    // J1: the continued stream begins with the position the client holds (a cursor at 0 stands
    // for nothing: the journal's first event, the stream's own priming, follows at once).
    if (seq > 0) res.write(primingEvent(codec.issuer(session.sessionId, record.id).encode([seq])[0]!));
    else res.flushHeaders();
  }
  return followJournal(kit, ex, facts, decision, codec, first);
}

/**
 * With the journal, the journal after an authentic cursor is read beside the decision's own read
 * of the store, not after it: the journal continuation, the decision a storm of reconnections
 * mostly makes, then waits for one store round trip instead of two. Nothing of it is sent unless
 * the decision continues that incarnation from that position and J6 allows it (takePrefetched);
 * otherwise it is dropped.
 */
export function prefetchJournal(kit: Pick<JournalKit, 'config' | 'store'>, cursor: DecodeResult, sessionId: string): JournalPrefetch | undefined {
  if (cursor.kind !== 'ok' || !kit.config().resumption.journal.enabled) return undefined;
  const { incarnation, seq } = cursor.fields;
  const read = kit.store.readJournal(sessionId, incarnation, seq, JOURNAL_READ_EVENTS);
  // Unused, its failure is nobody's: a path that takes it answers the failure itself.
  read.catch(() => undefined);
  return { incarnation, seq, read };
}

/**
 * The read made beside the decision (resume.ts), when it is of this incarnation after this
 * position; once: a decision made again on the same exchange reads the journal anew.
 */
function takePrefetched(ex: Exchange, incarnation: string, seq: number): Promise<JournalRead | null> | undefined {
  const prefetched = ex.prefetched;
  ex.prefetched = undefined;
  return prefetched !== undefined && prefetched.incarnation === incarnation && prefetched.seq === seq ? prefetched.read : undefined;
}

/** The journal continuation on a begun response, then what follows it (decided again). */
export async function followJournal(
  kit: JournalKit,
  ex: Exchange,
  facts: ResumptionFacts,
  decision: FromJournal,
  codec: CursorCodec,
  first: JournalRead,
): Promise<unknown> {
  const config = kit.config();
  const res = ex.reply.raw;
  const { session, record } = decision;
  const { end, last } = await continueFromJournal({
    store: kit.store,
    pumps: kit.pumps,
    codec,
    sessionId: session.sessionId,
    incarnation: record.id,
    seq: decision.seq,
    first,
    live: decision.live,
    lagMs: config.resumption.replayTimeoutMs,
    leaseMs: config.resumption.journal.leaseMs,
    res,
  });
  if (end === 'caught_up' && !res.destroyed) {
    // Every journaled event went and the pump is gone: what follows the last one is decided as a
    // resumption from it, on this response (a takeover by the owner's log, -32010, a gap).
    let known: ResumptionFacts;
    try {
      const cursor: DecodeResult = { kind: 'ok', fields: { incarnation: record.id, seq: last } };
      // What the attempts learnt (an owner that did not replay) still holds.
      known = { ...facts, ...(await kit.gather(cursor, session.sessionId)) };
    } catch (err) {
      if (!isStoreError(err)) throw err;
      return endBegun(kit, ex, 'store_failed');
    }
    const next = decide(known);
    // The same journal again only when a pump lives (one took over): never a loop of replays.
    if (next.kind !== 'journal' || next.live) return ex.settle(known, next);
  }
  return endBegun(kit, ex, end === 'attached' ? 'upstream_end' : end);
}
