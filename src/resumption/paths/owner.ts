/**
 * The continuation from the owner's replay (check 7): the incarnation attached for this client,
 * the owner asked for what follows the cursor's upstream id, and its replay verified against what
 * the gateway recorded before anything of it reaches the client (sse/rewriter.ts, sse/event-tag.ts:
 * the same id and the same bytes), and its live stream checked for ids it reuses (E6). What the
 * attempt learns (the owner gone, refusing, no longer knowing the session, not replaying exactly)
 * goes back into the facts, and the decision is made again.
 */
import type { ReplicaConfig } from '../../config/schema.js';
import { isStoreError } from '../../errors.js';
import { LAST_EVENT_ID, replicaOnlyHeaders, responseHeadersForClient } from '../../headers.js';
import { NO_REASON } from '../../metrics.js';
import type { Attachment } from '../../streams/sse-streams.js';
import { discard, isEventStream, UpstreamAbort, type UpstreamResponse } from '../../upstream/index.js';
import { decide, type Decision, type ResumptionFacts } from '../decide.js';
import { tagId } from '../../sse/event-tag.js';
import { RESUMPTION_HEADER } from '../signal.js';
import { decideAgain, type Exchange, type ResumeKit } from './kit.js';

type Continue = Extract<Decision, { kind: 'continue' }>;
export type OwnerKit = Pick<
  ResumeKit,
  'config' | 'store' | 'fleet' | 'streams' | 'metrics' | 'logger' | 'requests' | 'send' | 'answer' | 'loseSession' | 'sendFailed' | 'tracing'
>;

/** The owner's replay, asked for and answered as a stream: what the pipe needs of it. */
interface Replay {
  readonly decision: Continue;
  readonly replica: ReplicaConfig;
  readonly attachment: Attachment;
  readonly response: UpstreamResponse;
  readonly abort: UpstreamAbort;
}

/** The continuation from the owner, or the answer decided again when it cannot be. */
export async function fromOwner(kit: OwnerKit, ex: Exchange, facts: ResumptionFacts, decided: Continue): Promise<unknown> {
  const asked = await askReplay(kit, ex, facts, decided);
  return 'answered' in asked ? asked.answered : pipeReplay(kit, ex, asked.known, asked.replay);
}

/** The attach and the owner's answer: a replay to pipe, or what was answered instead. */
async function askReplay(
  kit: OwnerKit,
  ex: Exchange,
  facts: ResumptionFacts,
  decided: Continue,
): Promise<{ answered: unknown } | { known: ResumptionFacts; replay: Replay }> {
  const { request, reply } = ex;
  const { session } = decided;
  let known = facts;
  const redecide = (learnt: Partial<ResumptionFacts>) => ({ answered: decideAgain(ex, { ...known, ...learnt }) });
  const replica = kit.fleet.get(decided.owner);
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
    const ttl = kit.config().sessions.idleTtlMs;
    const attached = await kit.store.attachIncarnation(session.sessionId, decided.incarnation, ttl, decided.seq);
    known = { ...known, view: attached?.view ?? null };
    const again = decide(known);
    if (!attached || again.kind !== 'continue') return { answered: ex.settle(known, again) };
    decision = again;
    attachment = kit.streams.attachment(session.sessionId, decision.incarnation, decision.owner, decision.view.record.kind, attached.attach);
    response = await kit.send(request, replica, { [LAST_EVENT_ID]: decision.upstreamId }, abort);
  } catch (err) {
    if (isStoreError(err)) return { answered: kit.answer(request, reply, 'GW_STORE_UNAVAILABLE') };
    const answered = kit.sendFailed(request, reply, replica.id, err, () => {
      kit.loseSession(session, 'owner refused the connection');
      return redecide({ ownerGone: true }).answered;
    });
    return { answered: await answered };
  }
  if (response.statusCode !== 200 || !isEventStream(response)) {
    await response.body.dump().catch(() => undefined);
    if (response.statusCode === 404) {
      // R4: the owner no longer knows the session (a restarted replica answers so).
      kit.loseSession(session, 'owner answered 404');
      return redecide({ session: { ...session, state: 'lost' } });
    }
    // The owner cannot replay from that id (its log was trimmed, or it refuses): check 7.
    kit.logger.info({ replica: replica.id, status: response.statusCode }, 'owner did not replay: gap');
    return redecide({ replayFailed: true });
  }
  kit.fleet.reportAnswer(replica.id);
  return { known, replay: { decision, replica, attachment, response, abort } };
}

/**
 * E6: the upstream ids recorded for the incarnation (its window, base..head), which the owner's
 * events must not reuse except as their faithful replay.
 */
async function recordedIds(kit: OwnerKit, decision: Continue): Promise<Set<string>> {
  const { record } = decision.view;
  const view = await kit.store.readIncarnation(record.sessionId, record.id, record.base);
  const ids = new Set<string>();
  if (!view) return ids;
  for (const tag of [view.at, ...view.after]) if (tag) ids.add(tagId(tag));
  return ids;
}

/** The owner's replay through the verifying rewriter to the client, then its live stream. */
async function pipeReplay(kit: OwnerKit, ex: Exchange, known: ResumptionFacts, replay: Replay): Promise<unknown> {
  const { request, reply } = ex;
  const { decision, replica, attachment, response, abort } = replay;
  const config = kit.config();
  let cursors;
  let recorded;
  try {
    [cursors, recorded] = await Promise.all([kit.streams.cursors(attachment), recordedIds(kit, decision)]);
  } catch (err) {
    abort.abort();
    discard(response);
    if (!isStoreError(err)) throw err;
    return kit.answer(request, reply, 'GW_STORE_UNAVAILABLE');
  }
  const { view } = decision;
  const rewriter = kit.streams.rewriter(cursors, view.record.head, {
    ...(view.record.kind === 'post' ? { calls: view.record.pending } : {}),
    verify: { expected: decision.expected, fromSeq: decision.seq, recorded, limit: Math.max(config.resumption.recordedEvents, recorded.size) },
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
  const replayed = awaitReplay(kit.tracing);
  // A replay that fails hands the request over to the answer decided then, which logs it.
  let handedOver = false;
  const how = await kit.streams.pipe(
    {
      body: response.body,
      res,
      replica: replica.id,
      start: () => {
        replayed('verified');
        kit.metrics.continuations.inc({ source: 'owner' });
        // After a journal continuation, the owner's replay follows on the same response.
        if (res.headersSent) return;
        kit.requests.resumption(request, 'continued', NO_REASON);
        kit.requests.answered(request, { status: 200, replica: replica.id });
        res.writeHead(200, headers);
      },
      verify: {
        timeoutMs: config.resumption.replayTimeoutMs,
        maxBytes: config.resumption.replayBufferBytes,
        onFailed: (why) => {
          replayed(why);
          abort.abort();
          if (why === 'client_gone' || res.destroyed) return;
          kit.logger.info({ replica: replica.id, why }, 'replay not verified: gap');
          handedOver = true;
          Promise.resolve(decideAgain(ex, { ...known, replayFailed: true })).catch((err: unknown) => {
            kit.logger.error({ err, replica: replica.id }, 'request failed in the gateway');
            kit.answer(request, reply, 'GW_INTERNAL');
          });
        },
      },
    },
    rewriter,
    attachment,
  );
  replayed(how);
  if (!handedOver) kit.requests.ended(request, reply, how);
}

/**
 * Traces on: the wait for the owner's replay to be verified (check 7, at most
 * resumption.replayTimeoutMs) as a span of its own, from the owner's answer until the returned
 * function says how it ended: `verified`, or why not (`timeout`, `too_large`, a mismatch, ...).
 */
function awaitReplay(tracing: OwnerKit['tracing']): (outcome: string) => void {
  if (tracing === undefined) return () => undefined;
  let settle: (outcome: string) => void = () => undefined;
  const settled = new Promise<string>((resolve) => (settle = resolve));
  void tracing.span('resumption await_replay', () => settled, (outcome) => ({ 'resumption.replay': outcome }));
  return settle;
}
