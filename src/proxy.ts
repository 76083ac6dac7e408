/**
 * The MCP endpoint: routing of CONTRACT.md §3. A request without a session goes to a replica the
 * balancer picks and binds the session it creates (R1); every later request of the session goes
 * to its owner (R2); sessions the store does not hold as active get 404 (R3); owners that are gone
 * or misbehave are handled as R4 says; statuses pass as they are (R7).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Config, ReplicaConfig } from './config/schema.js';
import { describe, isStoreError } from './errors.js';
import type { Fleet } from './fleet/index.js';
import { headerValue, LAST_EVENT_ID, replicaOnlyHeaders, requestHeadersForReplica, responseHeadersForClient, SESSION_HEADER } from './headers.js';
import { parsedRequestIds, requestIds } from './jsonrpc.js';
import type { Logger } from './logger.js';
import type { Metrics } from './metrics.js';
import { RecentIds } from './recent-ids.js';
import { relay } from './streams/relay.js';
import type { CursorTarget } from './sse/rewriter.js';
import type { Attachment, SseStreams } from './streams/sse-streams.js';
import type { CursorKeys } from './cursor/keys.js';
import { createResumption } from './resumption/resume.js';
import type { Answering } from './routing/answers.js';
import { shortId, type RequestLog } from './routing/request-log.js';
import { classify, methodLabel } from './eras/classify.js';
import type { SessionRecord, Store } from './store/types.js';
import { describeUpstreamError, discard, isAbort, isConnectFailure, isEventStream, isRefused, replicaPath, UpstreamAbort, type UpstreamResponse, type Upstreams } from './upstream.js';

/** Sessions whose loss was logged, remembered so as not to log it again (a few hundred KB at most). */
const LOST_SESSIONS_REMEMBERED = 4096;

export interface ProxyDeps {
  config: () => Config;
  store: Store;
  fleet: Fleet;
  upstreams: Upstreams;
  metrics: Metrics;
  logger: Logger;
  streams: SseStreams;
  keys: CursorKeys;
  /** Counts each answer and writes its one log line. */
  requests: RequestLog;
  /** The gateway's own answers. */
  answer: Answering;
}

/** What the gateway adds to a forwarded request and its response. */
interface Forwarding {
  replica: ReplicaConfig;
  dropRequestHeaders: readonly string[];
  addRequestHeaders?: Record<string, string>;
  responseHeaders: Record<string, string>;
  sessionId: string | undefined;
  /** The request body, when era classification already parsed it: never parsed twice. */
  parsedBody?: unknown;
}

export function createProxy(deps: ProxyDeps) {
  const { store, fleet, upstreams, metrics, logger, streams, requests, answer } = deps;

  // Requests of a session in flight when its owner went each find it lost: one line says so.
  const lostLogged = new RecentIds(LOST_SESSIONS_REMEMBERED);

  /** Marks a session lost in the store; the answer to the client does not wait on it. */
  function loseSession(record: SessionRecord, why: string): void {
    fleet.sessionEnded(record.owner, record.sessionId);
    if (lostLogged.firstTime(record.sessionId)) logger.info({ session: shortId(record.sessionId), replica: record.owner, why }, 'session lost');
    store.endSession(record.sessionId, 'lost', deps.config().sessions.tombstoneTtlMs).catch((err: unknown) => {
      logger.warn({ err: describe(err), session: shortId(record.sessionId) }, 'cannot record the session as lost');
    });
  }

  /**
   * 502, 503 and 504 say the replica is overloaded or broken (R4: suspected). A 500 is one
   * request's failure, and any other answer shows the replica is there.
   */
  function reportStatus(replicaId: string, status: number): void {
    if (status >= 502 && status <= 504) fleet.reportSuspect(replicaId, `answered ${status}`);
    else fleet.reportAnswer(replicaId);
  }

  async function send(request: FastifyRequest, forwarding: Forwarding, signal: UpstreamAbort): Promise<UpstreamResponse> {
    const headers = requestHeadersForReplica(
      request.headers,
      { ip: request.ip, protocol: request.protocol, host: request.headers.host },
      forwarding.dropRequestHeaders,
    );
    Object.assign(headers, forwarding.addRequestHeaders);
    const end = metrics.upstreamTimer(forwarding.replica.id);
    const response = await upstreams.send(forwarding.replica, {
      method: request.method,
      path: replicaPath(forwarding.replica, request.url),
      headers,
      body: request.body as Buffer | undefined,
      signal,
    });
    end();
    return response;
  }

  /** Streams the replica's answer to the client, with the gateway's own headers added. */
  async function respond(request: FastifyRequest, reply: FastifyReply, forwarding: Forwarding, response: UpstreamResponse, abort: UpstreamAbort) {
    const { replica, sessionId } = forwarding;
    const res = reply.raw;
    const sse = isEventStream(response);
    const headers = responseHeadersForClient(response.headers, replicaOnlyHeaders(deps.config()));
    Object.assign(headers, forwarding.responseHeaders);
    // Counted where the marked answer leaves: a request never forwarded (404, 503) is not stripped.
    if (forwarding.responseHeaders['mcp-resumption'] === 'stripped') requests.resumption(request, 'stripped', 'post_request');
    if (!sse) {
      requests.answered(request, { status: response.statusCode, replica: replica.id, ...(sessionId !== undefined ? { session: sessionId } : {}) });
      reply.hijack();
      res.once('close', () => {
        if (!res.writableFinished) abort.abort();
      });
      res.writeHead(response.statusCode, headers);
      const stream = relay(response.body, res);
      void stream.done.then((how) => requests.ended(request, reply, how));
      return;
    }

    // E1, E5: the stream becomes an incarnation whose events carry cursors recorded in the store.
    const kind = request.method === 'GET' ? 'get' : 'post';
    const calls = kind !== 'post' ? undefined : forwarding.parsedBody !== undefined ? parsedRequestIds(forwarding.parsedBody) : requestIds(request.body);
    let attachment: Attachment | undefined;
    let cursors: CursorTarget | undefined;
    if (sessionId !== undefined) {
      try {
        // A GET supersedes the session's earlier GET streams now (E4); a POST stream is recorded
        // with its first events.
        attachment =
          kind === 'get'
            ? await streams.openIncarnation(sessionId, replica.id, kind, { supersede: true })
            : streams.lazyIncarnation(sessionId, replica.id, calls ?? []);
        cursors = await streams.cursors(attachment);
      } catch (err) {
        if (!isStoreError(err)) throw err;
        if (kind === 'get') {
          // A GET has no effect to lose: the client retries once the store answers.
          abort.abort();
          discard(response);
          return answer(request, reply, 'GW_STORE_UNAVAILABLE');
        }
        // The POST ran on the replica: its answer must reach the client, without cursors. Only when
        // no cursor key can be had (no cursor.secret, and the store never answered to agree one):
        // records themselves wait for the store (streams/unrecorded.ts).
        logger.warn({ replica: replica.id, session: shortId(sessionId) }, 'store unavailable: this POST stream is not resumable');
        attachment = undefined;
        cursors = undefined;
      }
    }
    requests.answered(request, { status: response.statusCode, replica: replica.id, ...(sessionId !== undefined ? { session: sessionId } : {}) });
    reply.hijack();
    res.once('close', () => {
      if (!res.writableFinished) abort.abort();
    });
    const rewriter = streams.rewriter(cursors, 0, calls ? { calls } : {});
    // Proxies in front of the gateway must not buffer the stream either.
    headers['x-accel-buffering'] = 'no';
    const start = () => {
      res.writeHead(response.statusCode, headers);
    };
    const how = await streams.pipe({ body: response.body, res, replica: replica.id, start }, rewriter, attachment);
    requests.ended(request, reply, how);
  }

  /**
   * The replica created a session that the gateway could not record: no client will ever use it,
   * so ask the replica to drop it rather than let it hold the session's memory forever.
   */
  function discardSession(replica: ReplicaConfig, sessionId: string): void {
    upstreams
      .send(replica, { method: 'DELETE', path: replicaPath(replica, ''), headers: { [SESSION_HEADER]: sessionId } })
      .then((response) => response.body.dump())
      .catch((err: unknown) => logger.warn({ replica: replica.id, err: describeUpstreamError(err) }, 'cannot discard an unrecorded session'));
  }

  /** R1: a request without a session, to a replica chosen by the balancer. */
  async function newSession(request: FastifyRequest, reply: FastifyReply, forwarding: Omit<Forwarding, 'replica' | 'sessionId'>) {
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
        if (isAbort(err)) return;
        if (isConnectFailure(err)) {
          // Nothing reached this replica: the request may go to another one (R1).
          logger.warn({ replica: replica.id, err: describeUpstreamError(err) }, 'replica unreachable for a new session; trying another');
          if (isRefused(err)) await fleet.reportRefused(replica.id);
          else fleet.reportSuspect(replica.id, describeUpstreamError(err));
          continue;
        }
        fleet.reportSuspect(replica.id, describeUpstreamError(err));
        return answer(request, reply, 'GW_UPSTREAM_FAILED', { detail: replica.id });
      }
      reportStatus(replica.id, response.statusCode);
      const sessionId = headerValue(response.headers, SESSION_HEADER);
      if (sessionId !== undefined) {
        // The binding reaches the store before the response reaches the client (R1).
        let bound: boolean;
        try {
          const ownerEpoch = await fleet.bindingEpoch(replica.id);
          bound = await store.bindSession({ sessionId, owner: replica.id, ownerEpoch }, config.sessions.idleTtlMs);
        } catch (err) {
          abort.abort();
          discard(response);
          discardSession(replica, sessionId);
          if (!isStoreError(err)) throw err;
          return answer(request, reply, 'GW_STORE_UNAVAILABLE');
        }
        if (!bound) {
          discard(response);
          logger.error({ replica: replica.id, session: shortId(sessionId) }, 'replica issued a session id that is already recorded');
          return answer(request, reply, 'GW_SESSION_ID_CONFLICT');
        }
        fleet.sessionSeen(replica.id, sessionId);
        attempt.sessionId = sessionId;
      }
      return respond(request, reply, attempt, response, abort);
    }
    return answer(request, reply, 'GW_NO_REPLICA');
  }

  /** R2 to R4: a request of an existing session, to its owner and nowhere else. */
  async function existingSession(request: FastifyRequest, reply: FastifyReply, sessionId: string, forwarding: Omit<Forwarding, 'replica' | 'sessionId'>) {
    const config = deps.config();
    let record: SessionRecord | null;
    try {
      record = await store.touchSession(sessionId, config.sessions.idleTtlMs);
    } catch (err) {
      if (!isStoreError(err)) throw err;
      return answer(request, reply, 'GW_STORE_UNAVAILABLE');
    }
    if (!record || record.state !== 'active') return answer(request, reply, 'GW_SESSION_NOT_FOUND');
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
    const attempt: Forwarding = { ...forwarding, replica, sessionId };
    const abort = new UpstreamAbort();
    let response: UpstreamResponse;
    try {
      response = await send(request, attempt, abort);
    } catch (err) {
      if (isAbort(err)) return;
      if (isRefused(err)) {
        // R4: nothing listens where the owner was; its sessions are gone with it.
        await fleet.reportRefused(record.owner);
        loseSession(record, 'owner refused the connection');
        return answer(request, reply, 'GW_SESSION_NOT_FOUND');
      }
      // Never retried elsewhere: the session lives on its owner only (R1, R2).
      fleet.reportSuspect(record.owner, describeUpstreamError(err));
      return answer(request, reply, isConnectFailure(err) ? 'GW_UPSTREAM_UNREACHABLE' : 'GW_UPSTREAM_FAILED', { detail: record.owner });
    }
    reportStatus(record.owner, response.statusCode);
    fleet.sessionSeen(record.owner, sessionId);
    if (response.statusCode === 404) {
      // R4: the owner no longer knows the session (a restarted replica answers so).
      loseSession(record, 'owner answered 404');
    } else if (request.method === 'DELETE' && response.statusCode >= 200 && response.statusCode < 300) {
      fleet.sessionEnded(record.owner, sessionId);
      try {
        await store.endSession(sessionId, 'terminated', config.sessions.tombstoneTtlMs);
      } catch (err) {
        // The replica ended the session; if the store missed it, the owner's 404 ends it later.
        logger.warn({ err: describe(err), session: shortId(sessionId) }, 'cannot record the session as terminated');
      }
    }
    return respond(request, reply, attempt, response, abort);
  }

  const resume = createResumption({
    config: deps.config,
    store,
    fleet,
    keys: deps.keys,
    streams,
    metrics,
    logger,
    requests,
    send: (request, replica, extra, signal) =>
      send(request, { replica, dropRequestHeaders: [LAST_EVENT_ID], addRequestHeaders: extra, responseHeaders: {}, sessionId: undefined }, signal),
    answer,
    loseSession,
  });

  return async function proxy(request: FastifyRequest, reply: FastifyReply) {
    const forwarding: Omit<Forwarding, 'replica' | 'sessionId'> = { dropRequestHeaders: [], responseHeaders: {} };
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
      metrics.modernRequests.inc({ mcp_method: methodLabel(era.message.method), outcome: era.kind === 'mismatch' ? 'header_mismatch' : 'forwarded' });
      if (era.kind === 'mismatch') {
        const data = { mismatch: { header: era.header, body: era.why } };
        return answer(request, reply, 'GW_HEADER_MISMATCH', { detail: era.why, data, id: era.message.id });
      }
      // M1: no session, whatever Mcp-Session-Id says; M3: sessionless, the answer is never an
      // incarnation, so never held open or journaled.
      return newSession(request, reply, forwarding);
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
  };
}
