/**
 * R2 to R4: a request of an existing session goes to its owner and nowhere else; a session the
 * store does not hold as active gets 404 (R3; bindings.ts caches what it holds, one health tick at
 * most behind it); an owner that is gone ends its sessions as lost, one that only misbehaves gets
 * 503 (R4); a 2xx to DELETE ends the session.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { describe, isStoreError } from '../errors.js';
import { sessionTarget } from './legacy-sse.js';
import type { IncarnationRecord, SessionRecord } from '../store/types.js';
import { askOwner, planFromStore } from '../streams/held-get.js';
import type { UpstreamAbort } from '../upstream/index.js';
import type { Forwarder, Forwarding, ForwardingPlan, ProxyDeps } from './forward.js';
import type { Respond } from './respond.js';

/** A plain GET taking its session's held GET stream over (resumption/resume.ts). */
export type TakeOver = (request: FastifyRequest, reply: FastifyReply, session: SessionRecord, record: IncarnationRecord) => Promise<unknown>;

export function createSessionRequests(deps: ProxyDeps, forwarder: Forwarder, respond: Respond, takeOver: TakeOver) {
  const { store, fleet, bindings, logger, answer } = deps;
  const { sendToOwner, reportStatus, loseSession } = forwarder;

  /** R2 to R4: a request of an existing session, to its owner and nowhere else. */
  async function existingSession(request: FastifyRequest, reply: FastifyReply, sessionId: string, forwarding: ForwardingPlan) {
    const config = deps.config();
    let record: SessionRecord | null;
    try {
      record = await bindings.lookup(sessionId);
    } catch (err) {
      if (!isStoreError(err)) throw err;
      return answer(request, reply, 'GW_STORE_UNAVAILABLE');
    }
    if (!record || record.state !== 'active') return answer(request, reply, 'GW_SESSION_NOT_FOUND');
    // A session answers on its own transport's endpoint only (§9): on another it is unknown there.
    if ((record.endpoint !== undefined) !== (forwarding.legacySse === true)) return answer(request, reply, 'GW_SESSION_NOT_FOUND');
    const replica = fleet.get(record.owner);
    let gone: boolean;
    try {
      gone = await fleet.ownerGone(record);
    } catch (err) {
      if (!isStoreError(err)) throw err;
      return answer(request, reply, 'GW_STORE_UNAVAILABLE');
    }
    if (!replica || gone) {
      loseSession(record, replica ? 'owner gone' : 'owner removed from the configuration');
      return answer(request, reply, 'GW_SESSION_NOT_FOUND');
    }
    if (fleet.health(record.owner) === 'suspect') {
      // R4: a misbehaving owner keeps its sessions; the client retries once it answers again.
      return answer(request, reply, 'GW_REPLICA_SUSPECT', { detail: record.owner });
    }
    const attempt: Forwarding = { ...forwarding, replica, sessionId, ...sessionTarget(record) };
    // R4: nothing listens where the owner was; its sessions are gone with it.
    const refused = () => {
      loseSession(record, 'owner refused the connection');
      return answer(request, reply, 'GW_SESSION_NOT_FOUND');
    };
    // Never retried elsewhere: the session lives on its owner only (R1, R2).
    const ask = (abort: UpstreamAbort) => sendToOwner(request, reply, attempt, abort, refused);
    // E4 with the journal: the session's GET stream may be held open with no client (J2), and the
    // replica has one GET stream per session (the SDK's server answers a second one 409). A held
    // one is taken over by this GET (held-get.ts); otherwise the owner is asked, and only a stream
    // that opened supersedes the session's GET stream (respond.ts): a refused one leaves a live
    // one resumable.
    const journaledGet = request.method === 'GET' && config.resumption.journal.enabled && forwarding.legacySse !== true;
    const plan = journaledGet ? () => planFromStore(store, sessionId, record.owner) : undefined;
    const asked = await askOwner({ store, sessionId, ask, retry: () => journaledGet && !reply.raw.destroyed, ...(plan ? { plan } : {}) });
    if (asked === undefined) return;
    if ('takeOver' in asked) return takeOver(request, reply, record, asked.takeOver);
    const { response, abort } = asked;
    reportStatus(record.owner, response.statusCode);
    fleet.sessionSeen(record.owner, sessionId);
    if (response.statusCode === 404) {
      // R4: the owner no longer knows the session (a restarted replica answers so).
      loseSession(record, 'owner answered 404');
    } else if (request.method === 'DELETE' && response.statusCode >= 200 && response.statusCode < 300) {
      fleet.sessionEnded(record.owner, sessionId);
      bindings.forget(sessionId);
      try {
        await store.endSession(sessionId, 'terminated', config.sessions.tombstoneTtlMs);
      } catch (err) {
        // The replica ended the session; if the store missed it, the owner's 404 ends it later.
        logger.warn({ err: describe(err), session: deps.keys.sessionFingerprint(sessionId) }, 'cannot record the session as terminated');
      }
    }
    return respond(request, reply, attempt, response, abort);
  }


  return existingSession;
}
