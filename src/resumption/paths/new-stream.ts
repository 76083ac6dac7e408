/**
 * The answer when a stream cannot continue (checks 1-7 and J5): 410 in reject mode, or the
 * signal, a new stream whose first event is the stream_reset notification (signal.ts), then
 * -32010 for the calls whose responses never reached the client and the responses the journal
 * holds (J4); then a fresh GET stream from the owner, the follow of a POST stream's journal, or
 * the end.
 */
import type { ServerResponse } from 'node:http';
import type { ReplicaConfig } from '../../config/schema.js';
import { isStoreError } from '../../errors.js';
import { NO_REPLICA } from '../../metrics.js';
import { serializeEvent } from '../../sse/serializer.js';
import type { JsonRpcId, SessionRecord } from '../../store/types.js';
import { askOwner } from '../../streams/held-get.js';
import type { Attachment } from '../../streams/sse-streams.js';
import { discard, isEventStream, isRefused, type UpstreamAbort } from '../../upstream/index.js';
import type { Decision, ResumptionFacts } from '../decide.js';
import { journaledResponses, JOURNAL_READ_EVENTS, unanswered } from '../from-journal.js';
import { notResumed, outcomeUnknownError, REASON_HEADER, RESUMPTION_HEADER, streamResetNotification } from '../signal.js';
import { followJournal, type FromJournal, type JournalKit } from './journal.js';
import { endBegun, gatewayStreamHead, type Exchange, type ResumeKit } from './kit.js';

type NewStream = Extract<Decision, { kind: 'new_stream' }>;
export type NewStreamKit = JournalKit & Pick<ResumeKit, 'fleet' | 'streams' | 'logger' | 'send' | 'loseSession'>;

/** The signal (a new stream) or 410 (reject mode), and what follows the signal. */
export async function newStream(kit: NewStreamKit, ex: Exchange, facts: ResumptionFacts, decision: NewStream): Promise<unknown> {
  const { request, reply } = ex;
  const { session, reason, freshGet } = decision;
  if (kit.config().resumption.mode === 'reject') {
    kit.requests.resumption(request, 'rejected', reason);
    return kit.answer(request, reply, 'GW_NOT_RESUMABLE', {
      data: notResumed(reason),
      headers: { 'cache-control': 'no-store', [RESUMPTION_HEADER]: 'rejected', [REASON_HEADER]: reason },
    });
  }
  const res = reply.raw;
  const owner = kit.fleet.get(session.owner);
  const wantsFresh = freshGet && owner !== undefined && kit.fleet.health(owner.id) === 'up';
  // The owner is asked first: only a fresh stream that really opened supersedes the session's
  // GET stream (E4). A refused one must leave a live stream resumable.
  const fresh = wantsFresh ? await openFreshStream(kit, ex, session, owner, res) : undefined;
  let attachment: Attachment | undefined;
  let rewriter;
  let first;
  try {
    attachment = await kit.streams.openIncarnation(session.sessionId, session.owner, 'get', { supersede: fresh !== undefined });
    rewriter = kit.streams.rewriter(await kit.streams.cursors(attachment), 0, {});
    first = await rewriter.synthetic(streamResetNotification(reason, ex.lastEventId));
  } catch (err) {
    if (!isStoreError(err)) throw err;
    first = { end: 'store_failed' as const, out: Buffer.alloc(0) };
  }
  if (first.end || !attachment || !rewriter) {
    fresh?.abort.abort();
    if (fresh) discard(fresh.response);
    return kit.answer(request, reply, 'GW_STORE_UNAVAILABLE');
  }
  kit.requests.resumption(request, 'new_stream', reason);
  // After a journal continuation whose headers already said `continued`, the notification is
  // the signal: the stream's next event.
  if (!res.headersSent) {
    kit.requests.answered(request, { status: 200, replica: NO_REPLICA });
    if (!reply.sent) reply.hijack();
    res.writeHead(200, gatewayStreamHead({ [RESUMPTION_HEADER]: 'new-stream', [REASON_HEADER]: reason }));
  }
  res.write(first.out);
  await settleCalls(kit, res, decision);
  if (decision.follow) {
    await closeSignal(kit, attachment);
    return followAfterSignal(kit, ex, facts, decision, decision.follow);
  }
  if (!fresh || !owner) {
    await closeSignal(kit, attachment);
    res.end();
    return kit.requests.ended(request, reply, 'gateway_end');
  }
  if (!attachment.pump) {
    res.once('close', () => {
      if (!res.writableFinished) fresh.abort.abort();
    });
  }
  const how = await kit.streams.pipe({ body: fresh.response.body, res, replica: owner.id, start: () => undefined }, rewriter, attachment);
  kit.requests.ended(request, reply, how);
}

/**
 * After the notification: the responses that reached the gateway, from the journal (J4), with
 * which their calls settle, and -32010 for the calls whose answers never reached the client, so
 * that they fail at once instead of hanging or rerunning.
 */
async function settleCalls(kit: NewStreamKit, res: ServerResponse, decision: NewStream): Promise<void> {
  let responses = { text: '', ids: [] as readonly JsonRpcId[] };
  if (decision.responses) {
    const { incarnation, after } = decision.responses;
    try {
      responses = await journaledResponses(kit.store, await kit.keys.codec(), decision.session.sessionId, incarnation, after);
    } catch (err) {
      if (!isStoreError(err)) throw err;
      kit.logger.warn({ err: err.message }, 'cannot read the journaled responses after a gap');
    }
  }
  for (const id of unanswered(decision.pending, responses.ids)) {
    res.write(serializeEvent({ event: 'message', data: outcomeUnknownError(id, decision.reason) }));
  }
  if (responses.text !== '') res.write(responses.text);
}

/**
 * A GET stream from the owner without Last-Event-ID, to follow a signal. Undefined when none
 * opens: the owner's 409 while the session's GET stream has a client (held-get.ts), or any other
 * refusal; the signal then ends after its notification.
 */
async function openFreshStream(kit: NewStreamKit, ex: Exchange, session: SessionRecord, owner: ReplicaConfig, res: ServerResponse) {
  const ask = async (abort: UpstreamAbort) => {
    try {
      return await kit.send(ex.request, owner, {}, abort);
    } catch (err) {
      if (isRefused(err)) {
        await kit.fleet.reportRefused(owner.id);
        kit.loseSession(session, 'owner refused the connection');
      }
      return undefined;
    }
  };
  const asked = await askOwner({ store: kit.store, sessionId: session.sessionId, ask, retry: () => !res.destroyed });
  if (asked === undefined || 'takeOver' in asked) return undefined;
  const { response } = asked;
  if (response.statusCode === 200 && isEventStream(response)) return asked;
  await response.body.dump().catch(() => undefined);
  // R4: the owner no longer knows the session (a restarted replica answers so).
  if (response.statusCode === 404) kit.loseSession(session, 'owner answered 404');
  return undefined;
}

/**
 * Closes a signal stream's incarnation before its end, so that the client's reconnection with its
 * last cursor settles instead of drawing the signal again.
 */
async function closeSignal(kit: Pick<ResumeKit, 'store' | 'logger'>, attachment: Attachment): Promise<void> {
  await kit.store.closeIncarnation(attachment.sessionId, attachment.incarnation).catch((err: unknown) => {
    kit.logger.warn({ err: (err as Error).message }, 'cannot close the signal stream in the store');
  });
}

/**
 * After a gap's signal, a call still running followed from the journal's window on (its first
 * event then, if the window moved since the decision), and live to its response (J4, J5).
 */
async function followAfterSignal(
  kit: NewStreamKit,
  ex: Exchange,
  facts: ResumptionFacts,
  decision: NewStream,
  follow: NonNullable<NewStream['follow']>,
): Promise<unknown> {
  const { sessionId } = decision.session;
  let seq = follow.seq;
  let codec;
  let first;
  try {
    codec = await kit.keys.codec();
    first = await kit.store.readJournal(sessionId, follow.record.id, seq, JOURNAL_READ_EVENTS);
    if (first !== null && first.events.length === 0 && first.record.head > seq) {
      seq = Math.max(first.record.base, 1) - 1;
      first = await kit.store.readJournal(sessionId, follow.record.id, seq, JOURNAL_READ_EVENTS);
    }
  } catch (err) {
    if (!isStoreError(err)) throw err;
    return endBegun(kit, ex, 'store_failed');
  }
  if (first === null) return endBegun(kit, ex, 'gateway_end');
  const journal: FromJournal = { kind: 'journal', session: decision.session, record: first.record, seq, live: true };
  return followJournal(kit, ex, facts, journal, codec, first);
}
