/**
 * A GET with Last-Event-ID (CONTRACT.md §5): gathers what the store and the fleet know, lets the
 * pure decision choose (decide.ts), refuses whom J6 refuses, and hands the decision to its path
 * (paths/): a continuation from the journal (§8) or from the owner (verified before anything is
 * sent), a new stream with the signal or 410 in reject mode; 404 as R3 and 503 here. A plain GET
 * that takes a held GET stream over enters here too.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { isStoreError } from '../errors.js';
import { NO_REASON, NO_REPLICA } from '../metrics.js';
import type { IncarnationRecord, SessionRecord } from '../store/types.js';
import type { Decided } from '../tracing/index.js';
import type { PrincipalVerdict } from '../trust/principal.js';
import { Admission, endTurnOnHeaders } from './admission.js';
import { decide, type Decision, type ResumptionFacts } from './decide.js';
import { awaitRecord } from './await-record.js';
import { gatherFacts } from './facts.js';
import { fromJournal, prefetchJournal } from './paths/journal.js';
import { endBegun, type Exchange, type JournalPrefetch, type ResumeKit } from './paths/kit.js';
import { newStream } from './paths/new-stream.js';
import { fromOwner } from './paths/owner.js';
import { takeOverHeld } from './paths/take-over.js';
import { RESUMPTION_HEADER } from './signal.js';

export type { ResumeKit } from './paths/kit.js';

export function createResumption(services: Omit<ResumeKit, 'gather'>) {
  const { store, fleet, requests } = services;
  const kit: ResumeKit = {
    ...services,
    // A resumption reads the store with a touch: it is the session's activity.
    gather: (cursor, sessionId) =>
      gatherFacts(cursor, (at) => store.touchAndRead(sessionId, kit.config().sessions.idleTtlMs, at), fleet, {
        journal: kit.config().resumption.journal.enabled,
        now: Date.now(),
        endedHere: (record) => kit.pumps.endedHere(record),
        instanceAlive: (instanceId) => store.instanceAlive(instanceId),
      }),
  };

  /** The request as the paths see it: a decision made again is carried out on it here. */
  function exchange(request: FastifyRequest, reply: FastifyReply, lastEventId: string, prefetched?: JournalPrefetch): Exchange {
    const ex: Exchange = { request, reply, lastEventId, settle: (facts, decision) => settle(ex, facts, decision), prefetched };
    return ex;
  }

  const admission = new Admission(() => kit.config().resumption.admission);
  const queued = kit.metrics.resumptionTimes.labels({ phase: 'queued' });
  const decided = kit.metrics.resumptionTimes.labels({ phase: 'decided' });
  const decisions = () => {
    kit.metrics.resumptionDecisions.set({ state: 'running' }, admission.running);
    kit.metrics.resumptionDecisions.set({ state: 'queued' }, admission.queued);
  };

  /** A resumption in its turn (admission.ts), or 503 GW_RESUMPTION_BUSY at once past the bound. */
  async function resume(request: FastifyRequest, reply: FastifyReply, sessionId: string | undefined, lastEventId: string) {
    const arrived = performance.now();
    const entered = admission.enter();
    decisions();
    const turn = entered instanceof Promise ? await entered : entered;
    if (turn === undefined) {
      decisions();
      kit.metrics.resumptionsBusy.inc();
      return kit.answer(request, reply, 'GW_RESUMPTION_BUSY');
    }
    const began = performance.now();
    const end = (headers: boolean) => {
      turn();
      decisions();
      if (headers) decided.observe((performance.now() - began) / 1000);
    };
    // A client that left while it waited is not decided for: nothing of it may reach a replica.
    // Its connection tells (the request's own stream is destroyed once read, as a GET's is at once).
    if (reply.raw.destroyed || request.raw.socket?.destroyed !== false) {
      end(false);
      return reply;
    }
    queued.observe((began - arrived) / 1000);
    decisions();
    endTurnOnHeaders(reply.raw, end);
    return decideAndSettle(request, reply, sessionId, lastEventId);
  }

  async function decideAndSettle(request: FastifyRequest, reply: FastifyReply, sessionId: string | undefined, lastEventId: string) {
    if (sessionId === undefined) {
      requests.resumption(request, 'rejected', 'session_unknown');
      return kit.answer(request, reply, 'GW_SESSION_NOT_FOUND');
    }
    let facts: ResumptionFacts;
    let decision: Decision;
    let prefetched: JournalPrefetch | undefined;
    try {
      const cursor = (await kit.keys.codec()).decode(lastEventId, sessionId);
      // Tells an operator when a retired key is no longer used (docs/security.md#cursor-keys).
      if (cursor.kind !== 'foreign' && cursor.previous !== undefined) kit.metrics.cursorPreviousKey.inc();
      prefetched = prefetchJournal(kit, cursor, sessionId);
      facts = await kit.gather(cursor, sessionId);
      decision = decide(facts);
      if (decision.kind === 'await_record') {
        // §7: the record is on its way from the instance that holds the stream; decided on what came.
        const { incarnation, seq } = decision;
        const wait = () => awaitRecord({ store, sessionId, incarnation, seq, timeoutMs: kit.config().resumption.replayTimeoutMs });
        const recorded = await (kit.tracing?.span('resumption await_record', wait, (recorded) => ({ 'resumption.recorded': recorded })) ?? wait());
        kit.metrics.recordWaits.inc({ outcome: recorded ? 'recorded' : 'not_recorded' });
        // Read before the record came: the journal is read again after this decision.
        prefetched = undefined;
        facts = { ...(await kit.gather(cursor, sessionId)), recordAwaited: true };
        decision = decide(facts);
      }
      const { session } = facts;
      if (session && facts.ownerGone && session.state === 'active') kit.loseSession(session, 'owner gone');
    } catch (err) {
      if (!isStoreError(err)) throw err;
      return kit.answer(request, reply, 'GW_STORE_UNAVAILABLE');
    }
    if (servesOwnState(decision) && facts.session && (await refused(request, reply, facts.session, facts.ownerGone))) return reply;
    return settle(exchange(request, reply, lastEventId, prefetched), facts, decision);
  }

  /**
   * J6: true once a refusal was answered (the owner's own, or the gateway's), before anything of
   * the session was read for the client, attached or superseded; false when it may be served.
   */
  async function refused(request: FastifyRequest, reply: FastifyReply, session: SessionRecord, ownerGone: boolean): Promise<boolean> {
    let verdict: PrincipalVerdict;
    try {
      verdict = await kit.principals.check(request, session, ownerGone);
    } catch (err) {
      if (!isStoreError(err)) throw err;
      kit.answer(request, reply, 'GW_STORE_UNAVAILABLE');
      return true;
    }
    switch (verdict.kind) {
      case 'allowed':
        return false;
      case 'refused':
        kit.answer(request, reply, verdict.code, { detail: verdict.owner });
        return true;
      case 'owner_refused':
        requests.answered(request, { status: verdict.status, replica: session.owner });
        void reply.code(verdict.status).headers(verdict.headers).send(verdict.body);
        return true;
    }
  }

  /** Carries a decision out: each kind of decide.ts to its path. */
  function settle(ex: Exchange, facts: ResumptionFacts, decision: Decision): unknown {
    const { request, reply } = ex;
    // await_record is carried out as the decision after the wait (below): that one is traced.
    if (decision.kind !== 'await_record') {
      kit.tracing?.decided(request, { decision: decision.kind, from: SOURCES[decision.kind], recordAwaited: facts.recordAwaited === true, ...pumpOf(facts.view?.record) });
    }
    switch (decision.kind) {
      case 'not_found':
        requests.resumption(request, 'rejected', decision.reason);
        return kit.answer(request, reply, 'GW_SESSION_NOT_FOUND');
      case 'unavailable':
        return kit.answer(request, reply, 'GW_REPLICA_SUSPECT', { detail: decision.owner });
      case 'await_record': {
        // Only a first decision waits (resume): one made again on the way is decided as after the wait.
        const known = { ...facts, recordAwaited: true };
        return settle(ex, known, decide(known));
      }
      case 'complete':
        // After a journal continuation on the same response: it simply ends.
        if (reply.raw.headersSent) return endBegun(kit, ex, 'gateway_end');
        // Everything of that stream was delivered and nothing will follow: an empty answer, on
        // which the SDK client settles instead of reconnecting again.
        requests.resumption(request, 'continued', NO_REASON);
        requests.answered(request, { status: 204, replica: NO_REPLICA });
        void reply.code(204).header(RESUMPTION_HEADER, 'continued').send();
        requests.ended(request, reply, 'answered');
        return reply;
      case 'new_stream':
        return newStream(kit, ex, facts, decision);
      case 'continue':
        return fromOwner(kit, ex, facts, decision);
      case 'journal':
        return fromJournal(kit, ex, facts, decision);
    }
  }

  /** A plain GET that takes its session's held GET stream over (paths/take-over.ts), once J6 allows it. */
  async function takeOver(request: FastifyRequest, reply: FastifyReply, session: SessionRecord, record: IncarnationRecord): Promise<unknown> {
    if (await refused(request, reply, session, false)) return reply;
    kit.tracing?.decided(request, { decision: 'take_over', from: 'journal', recordAwaited: false, ...pumpOf(record) });
    return takeOverHeld(kit, exchange(request, reply, ''), session, record);
  }

  return { resume, takeOver };
}

/** Where a decision's events come from: the journal (§8), the owner's replay, or the gateway itself (the signal, 204, the refusals). */
const SOURCES: Readonly<Record<Exclude<Decision['kind'], 'await_record'>, 'journal' | 'owner' | 'gateway'>> = {
  journal: 'journal',
  continue: 'owner',
  new_stream: 'gateway',
  complete: 'gateway',
  not_found: 'gateway',
  unavailable: 'gateway',
};

/** The instance that pumps a stream (none: no pump's lease), and the span it was held under, for its trace. */
function pumpOf(record: IncarnationRecord | undefined): Pick<Decided, 'stream' | 'holderSpan'> {
  if (record === undefined) return {};
  return {
    ...(record.pump !== '' ? { stream: { pump: record.pump, held: record.held } } : {}),
    ...(record.holderSpan !== undefined ? { holderSpan: record.holderSpan } : {}),
  };
}

/** The decisions that serve the session from the gateway's own state (J6): all but the owner's replay and the refusals. */
function servesOwnState(decision: Decision): boolean {
  return decision.kind === 'journal' || decision.kind === 'new_stream' || decision.kind === 'complete';
}
