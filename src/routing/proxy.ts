/**
 * The MCP endpoint: routing of CONTRACT.md §3, composed from its parts in this folder. A request
 * without a session goes to a replica the balancer picks and binds the session it creates (R1,
 * new-session.ts); every later request of the session goes to its owner (R2 to R4,
 * session-requests.ts); a GET with Last-Event-ID is a resumption (§5, ../resumption/); the
 * replica's answer reaches the client through respond.ts, the gateway's own through answers.ts.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { CACHE_HEADER, CACHEABLE_METHODS, cacheKey, createResultCache, watchForCache } from '../eras/cache.js';
import { classify, methodLabel, type ModernMessage } from '../eras/classify.js';
import { createLegacySse } from './legacy-sse.js';
import { createTaskRequests } from './task-requests.js';
import { requestedTask } from '../eras/tasks.js';
import { headerValue, LAST_EVENT_ID, SESSION_HEADER } from '../headers.js';
import { NO_REPLICA } from '../metrics.js';
import { createResumption } from '../resumption/resume.js';
import { createForwarder, type ForwardingPlan, type ProxyDeps } from './forward.js';
import { createNewSession } from './new-session.js';
import { createRespond } from './respond.js';
import { createSessionRequests } from './session-requests.js';

export type { ProxyDeps } from './forward.js';

export function createProxy(deps: ProxyDeps) {
  const { store, fleet, metrics, logger, streams, requests, answer } = deps;
  const forwarder = createForwarder(deps);
  const { send, sendFailed, loseSession } = forwarder;
  const respond = createRespond(deps);
  const newSession = createNewSession(deps, forwarder, respond);
  const { resume, takeOver } = createResumption({
    config: deps.config,
    store,
    fleet,
    keys: deps.keys,
    streams,
    pumps: deps.pumps,
    metrics,
    logger,
    requests,
    send: (request, replica, extra, signal) =>
      send(request, { replica, dropRequestHeaders: [LAST_EVENT_ID], addRequestHeaders: extra, responseHeaders: {}, sessionId: undefined }, signal),
    answer,
    loseSession,
    sendFailed,
    principals: deps.principals,
    tracing: deps.tracing,
  });
  const existingSession = createSessionRequests(deps, forwarder, respond, takeOver);
  const tasks = createTaskRequests(deps, forwarder, respond, newSession);
  const legacySse = createLegacySse(deps, newSession, existingSession);


  const cache = createResultCache(() => deps.config().cache);

  /**
   * A cacheable modern request answered from the cache (true), or marked so that its answer is
   * offered to the cache on its way to the client.
   */
  function fromCache(request: FastifyRequest, reply: FastifyReply, message: ModernMessage, forwarding: ForwardingPlan): boolean {
    if (!CACHEABLE_METHODS.has(message.method) || !cache.enabled()) return false;
    const key = cacheKey(message);
    const body = key === undefined ? undefined : cache.answer(key, message.id);
    metrics.cacheRequests.inc({ mcp_method: message.method, result: key === undefined ? 'bypass' : body === undefined ? 'miss' : 'hit' });
    if (key === undefined) return false;
    if (body === undefined) {
      forwarding.watch = (response) =>
        watchForCache(response, deps.config().cache.maxBytes, (answer) => {
          cache.offer(key, answer);
          const { entries, bytes } = cache.size();
          metrics.cacheEntries.set(entries);
          metrics.cacheBytes.set(bytes);
        });
      return false;
    }
    requests.answered(request, { status: 200, replica: NO_REPLICA });
    reply.hijack();
    reply.raw.writeHead(200, { 'content-type': 'application/json', [CACHE_HEADER]: 'hit' });
    reply.raw.end(body);
    requests.ended(request, reply, 'cache_hit');
    return true;
  }

  async function proxy(request: FastifyRequest, reply: FastifyReply) {
    const forwarding: ForwardingPlan = { dropRequestHeaders: [], responseHeaders: {} };
    const lastEventId = headerValue(request.headers, LAST_EVENT_ID);
    if (request.method === 'POST' && lastEventId !== undefined) {
      // §5: resumption is only ever a GET. A cursor on a POST (a client carrying one over from
      // the legacy SSE transport) is removed, never treated as a resumption of anything.
      forwarding.dropRequestHeaders = [LAST_EVENT_ID];
      if (lastEventId !== '') {
        forwarding.responseHeaders = { 'mcp-resumption': 'stripped', 'mcp-resumption-reason': 'post_request' };
      }
    }
    const era = classify(request.method, request.headers, request.body);
    if (era.kind !== 'legacy') {
      const mcpMethod = methodLabel(era.message.method);
      if (era.kind === 'mismatch') {
        metrics.modernRequests.inc({ mcp_method: mcpMethod, outcome: 'header_mismatch' });
        const data = { mismatch: { header: era.header, body: era.why } };
        return answer(request, reply, 'GW_HEADER_MISMATCH', { detail: era.why, data, id: era.message.id });
      }
      const cached = fromCache(request, reply, era.message, forwarding);
      metrics.modernRequests.inc({ mcp_method: mcpMethod, outcome: cached ? 'cache_hit' : 'forwarded' });
      if (cached) return reply;
      // M2: a task lives on the replica that created it.
      const taskId = requestedTask(era.message);
      if (taskId !== undefined) return tasks.taskRequest(request, reply, forwarding, era.message, taskId);
      // M1: no session, whatever Mcp-Session-Id says; M3: sessionless, the answer is never an
      // incarnation, so never held open or journaled.
      return newSession(request, reply, era.message.method === 'tools/call' ? tasks.toolCall(era.message, forwarding) : forwarding);
    }
    forwarding.parsedBody = era.parsed;
    const sessionId = headerValue(request.headers, SESSION_HEADER);
    if (request.method === 'GET' && lastEventId) return resume(request, reply, sessionId, lastEventId);
    if (request.method === 'GET' && lastEventId === '') {
      // §5: an empty Last-Event-ID counts as none: a plain GET, and the replica never sees it.
      forwarding.dropRequestHeaders = [LAST_EVENT_ID];
    }
    if (sessionId === undefined) return newSession(request, reply, forwarding);
    return existingSession(request, reply, sessionId, forwarding);
  }


  /** The MCP endpoint, and the endpoints of the HTTP+SSE transport (legacySse). */
  return { proxy, legacySse };
}
