/**
 * R1: a request without a session goes to a replica the balancer picks; the session it creates is
 * bound to that replica in the store before the answer reaches the client. A connection that
 * failed before any byte reached a replica is tried on the next; nothing else is retried.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { isStoreError } from '../errors.js';
import { headerValue, SESSION_HEADER } from '../headers.js';
import { faultOf } from '../upstream/faults.js';
import { describeUpstreamError, discard, UpstreamAbort, type UpstreamResponse } from '../upstream/index.js';
import type { Forwarder, Forwarding, ForwardingPlan, ProxyDeps } from './forward.js';
import type { Respond } from './respond.js';

export function createNewSession(deps: ProxyDeps, forwarder: Forwarder, respond: Respond) {
  const { store, fleet, logger, answer } = deps;
  const { send, sendFailed, reportStatus, discardSession } = forwarder;

  /** R1: a request without a session, to a replica chosen by the balancer. */
  async function newSession(request: FastifyRequest, reply: FastifyReply, forwarding: ForwardingPlan) {
    const config = deps.config();
    const tried = new Set<string>();
    for (let replica = fleet.pick(tried); replica; replica = fleet.pick(tried)) {
      tried.add(replica.id);
      const abort = new UpstreamAbort();
      const attempt: Forwarding = { ...forwarding, replica, sessionId: undefined };
      let response: UpstreamResponse;
      try {
        response = await send(request, attempt, abort);
      } catch (err) {
        const fault = faultOf(err);
        if (fault === 'refused' || fault === 'unreachable') {
          // Nothing reached this replica: the request may go to another one (R1).
          logger.warn({ replica: replica.id, err: describeUpstreamError(err) }, 'replica unreachable for a new session; trying another');
          if (fault === 'refused') await fleet.reportRefused(replica.id);
          else fleet.reportSuspect(replica.id, describeUpstreamError(err));
          continue;
        }
        // Anything else may have reached the replica (R1: never tried on another), or is the
        // gateway's own, which another replica would not change.
        return sendFailed(request, reply, replica.id, err, () => undefined);
      }
      reportStatus(replica.id, response.statusCode);
      const sessionId = headerValue(response.headers, SESSION_HEADER);
      if (sessionId !== undefined) {
        // The binding reaches the store before the response reaches the client (R1).
        let bound: boolean;
        try {
          const ownerEpoch = await fleet.bindingEpoch(replica.id);
          const principal = await deps.principals.of(request.headers);
          bound = await store.bindSession({ sessionId, owner: replica.id, ownerEpoch, principal }, config.sessions.idleTtlMs);
        } catch (err) {
          abort.abort();
          discard(response);
          discardSession(replica, sessionId);
          if (!isStoreError(err)) throw err;
          return answer(request, reply, 'GW_STORE_UNAVAILABLE');
        }
        if (!bound) {
          discard(response);
          logger.error({ replica: replica.id, session: deps.keys.sessionFingerprint(sessionId) }, 'replica issued a session id that is already recorded');
          return answer(request, reply, 'GW_SESSION_ID_CONFLICT');
        }
        fleet.sessionSeen(replica.id, sessionId);
        attempt.sessionId = sessionId;
      }
      return respond(request, reply, attempt, response, abort);
    }
    return answer(request, reply, 'GW_NO_REPLICA');
  }


  return newSession;
}
