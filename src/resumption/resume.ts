/**
 * A GET with Last-Event-ID (CONTRACT.md §5): gathers what the store and the fleet know, lets the
 * pure decision choose, and carries it out: a continuation from the journal (§8, from-journal.ts)
 * or from the owner (verified before anything is sent), a new stream with the signal, a 410 in
 * reject mode, or 404 as R3.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ServerResponse } from 'node:http';
import type { Config, ReplicaConfig } from '../config/schema.js';
import type { CursorKeys } from '../cursor/keys.js';
import { isStoreError, type AnswerCode } from '../errors.js';
import type { Fleet } from '../fleet/index.js';
import { LAST_EVENT_ID, replicaOnlyHeaders, responseHeadersForClient, SESSION_HEADER } from '../headers.js';
import type { Logger } from '../logger.js';
import { NO_REASON, NO_REPLICA, type Metrics } from '../metrics.js';
import { serializeEvent } from '../sse/serializer.js';
import type { CursorCodec, DecodeResult } from '../cursor/codec.js';
import type { IncarnationRecord, JournalRead, JsonRpcId, SessionRecord, Store } from '../store/types.js';
import { askOwner } from '../streams/held-get.js';
import type { PrincipalVerdict, Principals } from '../trust/principal.js';
import type { Pumps } from '../streams/pumps.js';
import type { Attachment, SseStreams } from '../streams/sse-streams.js';
import type { AnswerOptions } from '../routing/answers.js';
import type { RequestLog } from '../routing/request-log.js';
import { discard, isEventStream, isRefused, UpstreamAbort, type UpstreamResponse } from '../upstream/index.js';
import { decide, type Decision, type ResumptionFacts } from './decide.js';
import { continueFromJournal, JOURNAL_READ_EVENTS, journaledResponses, unanswered } from './from-journal.js';
import { gatherFacts, type FactsContext, type FactsReader } from './facts.js';
import { notResumed, outcomeUnknownError, REASON_HEADER, RESUMPTION_HEADER, streamResetNotification } from './signal.js';

/** What the resumption needs from the proxy around it. */
export interface ResumeKit {
  config: () => Config;
  store: Store;
  fleet: Fleet;
  keys: CursorKeys;
  streams: SseStreams;
  pumps: Pumps;
  metrics: Metrics;
  logger: Logger;
  requests: RequestLog;
  /** Sends the client's request to `replica`, minus its Last-Event-ID, plus `extra` headers. */
  send(request: FastifyRequest, replica: ReplicaConfig, extra: Record<string, string>, signal: UpstreamAbort): Promise<UpstreamResponse>;
  /** One of the gateway's own answers (routing/answers.ts), counted; also on a hijacked reply. */
  answer(request: FastifyRequest, reply: FastifyReply, code: AnswerCode, options?: Omit<AnswerOptions, 'retryAfterSeconds'>): unknown;
  loseSession(record: SessionRecord, why: string): void;
  /** Answers a request to `replica` that failed, as its fault says; `gone` for a refused connection. */
  sendFailed(request: FastifyRequest, reply: FastifyReply, replica: string, err: unknown, gone: () => unknown): Promise<void>;
  /** J6: who may be served a session from the gateway's own state. */
  principals: Principals;
}

type Continue = Extract<Decision, { kind: 'continue' }>;
type NewStream = Extract<Decision, { kind: 'new_stream' }>;
type FromJournal = Extract<Decision, { kind: 'journal' }>;

export function createResumption(kit: ResumeKit) {
  const { store, fleet, keys, streams, logger, requests, metrics } = kit;

  /** A resumption reads the store with a touch: it is the session's activity. */
  const reader =
    (sessionId: string): FactsReader =>
    (at) =>
      store.touchAndRead(sessionId, kit.config().sessions.idleTtlMs, at);
  const factsContext = (): FactsContext => ({
    journal: kit.config().resumption.journal.enabled,
    now: Date.now(),
    endedHere: (record) => kit.pumps.endedHere(record),
  });

  async function resume(request: FastifyRequest, reply: FastifyReply, sessionId: string | undefined, lastEventId: string) {
    if (sessionId === undefined) {
      requests.resumption(request, 'rejected', 'session_unknown');
      return kit.answer(request, reply, 'GW_SESSION_NOT_FOUND');
    }
    let facts: ResumptionFacts;
    try {
      const cursor = (await keys.codec()).decode(lastEventId, sessionId);
      // Tells an operator when a retired key is no longer used (docs/security.md#cursor-keys).
      if (cursor.kind !== 'foreign' && cursor.previous !== undefined) metrics.cursorPreviousKey.inc();
      facts = await gatherFacts(cursor, reader(sessionId), fleet, factsContext());
      const { session } = facts;
      if (session && facts.ownerGone && session.state === 'active') kit.loseSession(session, 'owner gone');
    } catch (err) {
      if (!isStoreError(err)) throw err;
      return kit.answer(request, reply, 'GW_STORE_UNAVAILABLE');
    }
    const decision = decide(facts);
    if (servesOwnState(decision) && facts.session && (await refused(request, reply, facts.session, facts.ownerGone))) return reply;
    return settle(request, reply, facts, decision, lastEventId);
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

  /** Carries a decision out. */
  function settle(request: FastifyRequest, reply: FastifyReply, facts: ResumptionFacts, decision: Decision, lastEventId: string): unknown {
    switch (decision.kind) {
      case 'not_found':
        requests.resumption(request, 'rejected', decision.reason);
        return kit.answer(request, reply, 'GW_SESSION_NOT_FOUND');
      case 'unavailable':
        return kit.answer(request, reply, 'GW_REPLICA_SUSPECT', { detail: decision.owner });
      case 'complete':
        // After a journal continuation on the same response: it simply ends.
        if (reply.raw.headersSent) return endBegun(request, reply, 'gateway_end');
        // Everything of that stream was delivered and nothing will follow: an empty answer, on
        // which the SDK client settles instead of reconnecting again.
        requests.resumption(request, 'continued', NO_REASON);
        requests.answered(request, { status: 204, replica: NO_REPLICA });
        void reply.code(204).header(RESUMPTION_HEADER, 'continued').send();
        requests.ended(request, reply, 'answered');
        return reply;
      case 'new_stream':
        return newStream(request, reply, facts, decision, lastEventId);
      case 'continue':
        return continuation(request, reply, facts, decision, lastEventId);
      case 'journal':
        return fromJournal(request, reply, facts, decision, lastEventId);
    }
  }

  /**
   * A plain GET that takes its session's held GET stream over (streams/held-get.ts): the journal's
   * events after the last position written to the client that left, then the live stream, as a
   * continuation from the journal (J3) is, but answered as the fresh stream the client asked for.
   * Decided as a resumption from that position where it cannot go on (the window moved past it:
   * a gap, signalled; the pump gone: what follows is decided anew).
   */
  async function takeOver(request: FastifyRequest, reply: FastifyReply, session: SessionRecord, record: IncarnationRecord): Promise<unknown> {
    if (await refused(request, reply, session, false)) return reply;
    const seq = record.clientSeq;
    const facts: ResumptionFacts = {
      session,
      ownerGone: false,
      ownerHealth: fleet.health(session.owner),
      cursor: { kind: 'ok', fields: { incarnation: record.id, seq } },
      view: { record, currentGet: record.id, after: [], at: undefined },
      journal: true,
      now: Date.now(),
    };
    return fromJournal(request, reply, facts, { kind: 'journal', session, record, seq, live: true }, '', 'take_over');
  }

  /** J3, J4: the journal's events after the cursor, then the live stream while the pump lives. */
  async function fromJournal(
    request: FastifyRequest,
    reply: FastifyReply,
    facts: ResumptionFacts,
    decision: FromJournal,
    lastEventId: string,
    as: 'resumption' | 'take_over' = 'resumption',
  ): Promise<unknown> {
    const { session, record, seq } = decision;
    let codec;
    let first;
    try {
      codec = await keys.codec();
      first = await store.readJournal(session.sessionId, record.id, seq, JOURNAL_READ_EVENTS);
    } catch (err) {
      if (!isStoreError(err)) throw err;
      return kit.answer(request, reply, 'GW_STORE_UNAVAILABLE');
    }
    // The window moved past the cursor since the decision read it (or the stream is gone): decided
    // again on what the journal says now.
    if (first === null || (seq < first.record.head && first.events[0]?.seq !== seq + 1)) {
      const view = facts.view && first ? { ...facts.view, record: first.record, at: undefined } : null;
      const known = { ...facts, view, now: Date.now() };
      return settle(request, reply, known, decide(known), lastEventId);
    }
    const res = reply.raw;
    if (!res.headersSent) {
      if (as === 'take_over') {
        metrics.heldTakeovers.inc();
      } else {
        metrics.continuations.inc({ source: 'journal' });
        requests.resumption(request, 'continued', NO_REASON);
      }
      requests.answered(request, { status: 200, replica: NO_REPLICA });
      reply.hijack();
      res.writeHead(200, {
        'content-type': 'text/event-stream',
        'cache-control': 'no-cache',
        'x-accel-buffering': 'no',
        [SESSION_HEADER]: session.sessionId,
        ...(as === 'take_over' ? {} : { [RESUMPTION_HEADER]: 'continued' }),
      });
      res.flushHeaders();
    }
    return followJournal(request, reply, facts, decision, lastEventId, codec, first);
  }

  /** The journal continuation on a begun response, then what follows it (decided again). */
  async function followJournal(
    request: FastifyRequest,
    reply: FastifyReply,
    facts: ResumptionFacts,
    decision: FromJournal,
    lastEventId: string,
    codec: CursorCodec,
    first: JournalRead,
  ): Promise<unknown> {
    const config = kit.config();
    const res = reply.raw;
    const { session, record } = decision;
    const { end, last } = await continueFromJournal({
      store,
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
        known = { ...facts, ...(await gatherFacts(cursor, reader(session.sessionId), fleet, factsContext())) };
      } catch (err) {
        if (!isStoreError(err)) throw err;
        return endBegun(request, reply, 'store_failed');
      }
      const next = decide(known);
      // The same journal again only when a pump lives (one took over): never a loop of replays.
      if (next.kind !== 'journal' || next.live) return settle(request, reply, known, next, lastEventId);
    }
    return endBegun(request, reply, end === 'attached' ? 'upstream_end' : end);
  }

  /** Ends a response that began (a continuation): the client reconnects from its last cursor, told when. */
  function endBegun(request: FastifyRequest, reply: FastifyReply, how: string): void {
    const res = reply.raw;
    if (!res.destroyed && !res.writableEnded) res.end(`retry: ${kit.config().shutdown.retryHintMs}\n\n`);
    requests.ended(request, reply, how);
  }

  async function continuation(request: FastifyRequest, reply: FastifyReply, facts: ResumptionFacts, decided: Continue, lastEventId: string): Promise<unknown> {
    const config = kit.config();
    const { session } = decided;
    // What the attempt learns goes back into the facts, and the decision is made again.
    let known = facts;
    const redecide = (learnt: Partial<ResumptionFacts>): unknown => {
      known = { ...known, ...learnt };
      return settle(request, reply, known, decide(known), lastEventId);
    };
    const replica = fleet.get(decided.owner);
    // Removed from the configuration since the decision: gone (R4).
    if (!replica) return redecide({ ownerGone: true });
    let attachment: Attachment;
    let decision: Continue;
    let response: UpstreamResponse;
    const abort = new UpstreamAbort();
    try {
      // The connection this one replaces may have recorded more events since the decision read
      // the incarnation: from the attach on it cannot, so the attach reads again what the replay
      // must contain, in the same step, and the decision is made on that.
      const attached = await store.attachIncarnation(session.sessionId, decided.incarnation, config.sessions.idleTtlMs, decided.seq);
      known = { ...known, view: attached?.view ?? null };
      const again = decide(known);
      if (!attached || again.kind !== 'continue') return settle(request, reply, known, again, lastEventId);
      decision = again;
      attachment = streams.attachment(session.sessionId, decision.incarnation, decision.owner, decision.view.record.kind, attached.attach);
      response = await kit.send(request, replica, { [LAST_EVENT_ID]: decision.upstreamId }, abort);
    } catch (err) {
      if (isStoreError(err)) return kit.answer(request, reply, 'GW_STORE_UNAVAILABLE');
      return kit.sendFailed(request, reply, replica.id, err, () => {
        kit.loseSession(session, 'owner refused the connection');
        return redecide({ ownerGone: true });
      });
    }
    if (response.statusCode !== 200 || !isEventStream(response)) {
      await response.body.dump().catch(() => undefined);
      if (response.statusCode === 404) {
        // R4: the owner no longer knows the session (a restarted replica answers so).
        kit.loseSession(session, 'owner answered 404');
        return redecide({ session: { ...session, state: 'lost' } });
      }
      // The owner cannot replay from that id (its log was trimmed, or it refuses): check 7.
      logger.info({ replica: replica.id, status: response.statusCode }, 'owner did not replay: gap');
      return redecide({ replayFailed: true });
    }
    fleet.reportAnswer(replica.id);

    let cursors;
    try {
      cursors = await streams.cursors(attachment);
    } catch (err) {
      abort.abort();
      discard(response);
      if (!isStoreError(err)) throw err;
      return kit.answer(request, reply, 'GW_STORE_UNAVAILABLE');
    }
    const { view } = decision;
    const rewriter = streams.rewriter(cursors, view.record.head, {
      ...(view.record.kind === 'post' ? { calls: view.record.pending } : {}),
      verify: { expected: decision.expected, fromSeq: decision.seq },
    });
    reply.hijack();
    const res = reply.raw;
    // A journaled stream outlives its client once it began (J2): the pipe decides when it ends.
    if (!attachment.pump) {
      res.once('close', () => {
        if (!res.writableFinished) abort.abort();
      });
    }
    const headers = responseHeadersForClient(response.headers, replicaOnlyHeaders(config));
    headers[RESUMPTION_HEADER] = 'continued';
    headers['x-accel-buffering'] = 'no';
    // A replay that fails hands the request over to the answer decided then, which logs it.
    let handedOver = false;
    const how = await streams.pipe(
      {
        body: response.body,
        res,
        replica: replica.id,
        start: () => {
          metrics.continuations.inc({ source: 'owner' });
          // After a journal continuation, the owner's replay follows on the same response.
          if (res.headersSent) return;
          requests.resumption(request, 'continued', NO_REASON);
          requests.answered(request, { status: 200, replica: replica.id });
          res.writeHead(200, headers);
        },
        verify: {
          timeoutMs: config.resumption.replayTimeoutMs,
          maxBytes: config.resumption.replayBufferBytes,
          onFailed: (why) => {
            abort.abort();
            if (why === 'client_gone' || res.destroyed) return;
            logger.info({ replica: replica.id, why }, 'replay not verified: gap');
            handedOver = true;
            Promise.resolve(redecide({ replayFailed: true })).catch((err: unknown) => {
              logger.error({ err, replica: replica.id }, 'request failed in the gateway');
              kit.answer(request, reply, 'GW_INTERNAL');
            });
          },
        },
      },
      rewriter,
      attachment,
    );
    if (!handedOver) requests.ended(request, reply, how);
  }

  /** The answer when the stream cannot continue: the signal (a new stream) or 410 (reject mode). */
  async function newStream(request: FastifyRequest, reply: FastifyReply, facts: ResumptionFacts, decision: NewStream, lastEventId: string) {
    const { session, reason, pending, freshGet } = decision;
    const config = kit.config();
    if (config.resumption.mode === 'reject') {
      requests.resumption(request, 'rejected', reason);
      return kit.answer(request, reply, 'GW_NOT_RESUMABLE', {
        data: notResumed(reason),
        headers: { 'cache-control': 'no-store', [RESUMPTION_HEADER]: 'rejected', [REASON_HEADER]: reason },
      });
    }
    const res = reply.raw;
    const owner = fleet.get(session.owner);
    const wantsFresh = freshGet && owner !== undefined && fleet.health(owner.id) === 'up';
    // The owner is asked first: only a fresh stream that really opened supersedes the session's
    // GET stream (E4). A refused one must leave a live stream resumable.
    const fresh = wantsFresh ? await openFreshStream(request, session, owner, res) : undefined;
    let attachment: Attachment | undefined;
    let rewriter;
    let first;
    try {
      attachment = await streams.openIncarnation(session.sessionId, session.owner, 'get', { supersede: fresh !== undefined });
      rewriter = streams.rewriter(await streams.cursors(attachment), 0, {});
      first = await rewriter.synthetic(streamResetNotification(reason, lastEventId));
    } catch (err) {
      if (!isStoreError(err)) throw err;
      first = { end: 'store_failed' as const, out: Buffer.alloc(0) };
    }
    if (first.end || !attachment || !rewriter) {
      fresh?.abort.abort();
      if (fresh) discard(fresh.response);
      return kit.answer(request, reply, 'GW_STORE_UNAVAILABLE');
    }
    requests.resumption(request, 'new_stream', reason);
    // After a journal continuation whose headers already said `continued`, the notification is
    // the signal: the stream's next event.
    if (!res.headersSent) {
      requests.answered(request, { status: 200, replica: NO_REPLICA });
      if (!reply.sent) reply.hijack();
      res.writeHead(200, {
        'content-type': 'text/event-stream',
        'cache-control': 'no-cache',
        'x-accel-buffering': 'no',
        [RESUMPTION_HEADER]: 'new-stream',
        [REASON_HEADER]: reason,
      });
    }
    res.write(first.out);
    // Responses that reached the gateway go, from the journal (J4): the calls settle with them.
    let responses = { text: '', ids: [] as readonly JsonRpcId[] };
    if (decision.responses) {
      const { incarnation, after } = decision.responses;
      try {
        responses = await journaledResponses(store, await keys.codec(), session.sessionId, incarnation, after);
      } catch (err) {
        if (!isStoreError(err)) throw err;
        logger.warn({ err: err.message }, 'cannot read the journaled responses after a gap');
      }
    }
    // Calls whose answers never reached the client fail at once instead of hanging or rerunning.
    for (const id of unanswered(pending, responses.ids)) res.write(serializeEvent({ event: 'message', data: outcomeUnknownError(id, reason) }));
    if (responses.text !== '') res.write(responses.text);
    if (decision.follow) {
      await closeSignal(attachment);
      return followAfterSignal(request, reply, facts, decision, decision.follow, lastEventId);
    }
    if (!fresh || !owner) {
      await endSignal(res, attachment);
      return requests.ended(request, reply, 'gateway_end');
    }
    if (!attachment.pump) {
      res.once('close', () => {
        if (!res.writableFinished) fresh.abort.abort();
      });
    }
    const how = await streams.pipe({ body: fresh.response.body, res, replica: owner.id, start: () => undefined }, rewriter, attachment);
    requests.ended(request, reply, how);
  }

  /**
   * A GET stream from the owner without Last-Event-ID, to follow a signal. Undefined when none
   * opens: the owner's 409 while the session's GET stream has a client (held-get.ts), or any other
   * refusal; the signal then ends after its notification.
   */
  async function openFreshStream(request: FastifyRequest, session: SessionRecord, owner: ReplicaConfig, res: ServerResponse) {
    const ask = async (abort: UpstreamAbort) => {
      try {
        return await kit.send(request, owner, {}, abort);
      } catch (err) {
        if (isRefused(err)) {
          await fleet.reportRefused(owner.id);
          kit.loseSession(session, 'owner refused the connection');
        }
        return undefined;
      }
    };
    const asked = await askOwner({ store, sessionId: session.sessionId, ask, retry: () => !res.destroyed });
    if (asked === undefined || 'takeOver' in asked) return undefined;
    const { response } = asked;
    if (response.statusCode === 200 && isEventStream(response)) return asked;
    await response.body.dump().catch(() => undefined);
    // R4: the owner no longer knows the session (a restarted replica answers so).
    if (response.statusCode === 404) kit.loseSession(session, 'owner answered 404');
    return undefined;
  }

  /**
   * Ends a signal stream on purpose. Its incarnation is closed first, so that the client's
   * reconnection with its last cursor settles instead of drawing the signal again.
   */
  async function endSignal(res: ServerResponse, attachment: Attachment) {
    await closeSignal(attachment);
    res.end();
  }

  async function closeSignal(attachment: Attachment) {
    await store.closeIncarnation(attachment.sessionId, attachment.incarnation).catch((err: unknown) => {
      logger.warn({ err: (err as Error).message }, 'cannot close the signal stream in the store');
    });
  }

  /**
   * After a gap's signal, a call still running followed from the journal's window on (its first
   * event then, if the window moved since the decision), and live to its response (J4, J5).
   */
  async function followAfterSignal(
    request: FastifyRequest,
    reply: FastifyReply,
    facts: ResumptionFacts,
    decision: NewStream,
    follow: NonNullable<NewStream['follow']>,
    lastEventId: string,
  ): Promise<unknown> {
    const { sessionId } = decision.session;
    let seq = follow.seq;
    let codec;
    let first;
    try {
      codec = await keys.codec();
      first = await store.readJournal(sessionId, follow.record.id, seq, JOURNAL_READ_EVENTS);
      if (first !== null && first.events.length === 0 && first.record.head > seq) {
        seq = Math.max(first.record.base, 1) - 1;
        first = await store.readJournal(sessionId, follow.record.id, seq, JOURNAL_READ_EVENTS);
      }
    } catch (err) {
      if (!isStoreError(err)) throw err;
      return endBegun(request, reply, 'store_failed');
    }
    if (first === null) return endBegun(request, reply, 'gateway_end');
    const journal: FromJournal = { kind: 'journal', session: decision.session, record: first.record, seq, live: true };
    return followJournal(request, reply, facts, journal, lastEventId, codec, first);
  }

  return { resume, takeOver };
}

/** The decisions that serve the session from the gateway's own state (J6): all but the owner's replay and the refusals. */
function servesOwnState(decision: Decision): boolean {
  return decision.kind === 'journal' || decision.kind === 'new_stream' || decision.kind === 'complete';
}
