/**
 * Forwarding a client's request to a replica, and what a replica's answer tells the fleet and the
 * store about it: shared by new sessions (R1), session requests (R2 to R4) and resumptions.
 */
import type { Principals } from '../trust/principal.js';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Config, ReplicaConfig } from '../config/schema.js';
import type { CursorKeys } from '../cursor/keys.js';
import { describe } from '../errors.js';
import type { Fleet } from '../fleet/index.js';
import { requestHeadersForReplica, SESSION_HEADER } from '../headers.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import { RecentIds } from '../recent-ids.js';
import type { SessionRecord, Store } from '../store/types.js';
import type { Pumps } from '../streams/pumps.js';
import type { SseStreams } from '../streams/sse-streams.js';
import type { Tracing } from '../tracing/index.js';
import { faultOf, isKnownFault } from '../upstream/faults.js';
import {
  ClientGone,
  describeUpstreamError,
  replicaPath,
  type UpstreamAbort,
  type UpstreamResponse,
  type Upstreams,
} from '../upstream/index.js';
import type { Answering } from '../answers.js';
import type { BindingCache } from './bindings.js';
import type { RequestLog } from '../request-log.js';

/** Sessions whose loss was logged, remembered so as not to log it again (a few hundred KB at most). */
const LOST_SESSIONS_REMEMBERED = 4096;

export interface ProxyDeps {
  config: () => Config;
  store: Store;
  fleet: Fleet;
  /** The bindings of sessions, cached (R3). */
  bindings: BindingCache;
  upstreams: Upstreams;
  metrics: Metrics;
  logger: Logger;
  streams: SseStreams;
  /** The journaled streams this instance pumps (J2, J3). */
  pumps: Pumps;
  keys: CursorKeys;
  /** The sessions' principals and their check (J6). */
  principals: Principals;
  /** Counts each answer and writes its one log line. */
  requests: RequestLog;
  /** The gateway's own answers. */
  answer: Answering;
  /** The process's traces; unset: off. */
  tracing?: Tracing | undefined;
}

/** What the gateway adds to a forwarded request and its response. */
export interface Forwarding {
  replica: ReplicaConfig;
  dropRequestHeaders: readonly string[];
  addRequestHeaders?: Record<string, string>;
  responseHeaders: Record<string, string>;
  sessionId: string | undefined;
  /** The request body, when era classification already parsed it: never parsed twice. */
  parsedBody?: unknown;
  /** A request of the HTTP+SSE transport (its messagesPath): only that transport's sessions take it. */
  legacySse?: true;
  /**
   * Aims the request at another URL of the replica than its MCP endpoint (the HTTP+SSE transport's
   * endpoints, legacy-sse.ts): the replica as it is configured, with `url` the exact target.
   */
  via?: (replica: ReplicaConfig) => ReplicaConfig;
  /**
   * Reads the replica's answer on its way to the client (eras/tasks.ts: a task it creates;
   * legacy-sse.ts: the session an SSE stream announces).
   */
  watch?: (response: UpstreamResponse, replica: ReplicaConfig) => UpstreamResponse;
}

/** A forwarding before its replica is chosen. */
export type ForwardingPlan = Omit<Forwarding, 'replica' | 'sessionId'>;

export type Forwarder = ReturnType<typeof createForwarder>;

export function createForwarder(deps: ProxyDeps) {
  const { store, fleet, upstreams, metrics, logger } = deps;

  // Requests of a session in flight when its owner went each find it lost: one line says so.
  const lostLogged = new RecentIds(LOST_SESSIONS_REMEMBERED);

  /** Marks a session lost in the store; the answer to the client does not wait on it. */
  function loseSession(record: SessionRecord, why: string): void {
    deps.bindings.forget(record.sessionId);
    fleet.sessionEnded(record.owner, record.sessionId);
    if (lostLogged.firstTime(record.sessionId)) logger.info({ session: deps.keys.sessionFingerprint(record.sessionId), replica: record.owner, why }, 'session lost');
    store.endSession(record.sessionId, 'lost', deps.config().sessions.tombstoneTtlMs).catch((err: unknown) => {
      logger.warn({ err: describe(err), session: deps.keys.sessionFingerprint(record.sessionId) }, 'cannot record the session as lost');
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
    // A request whose client has left is never sent (CONTRACT.md §7).
    const socket = request.raw.socket;
    if (socket.destroyed) throw new ClientGone();
    // Nor is a GET whose client leaves before the replica answers kept: it has no effect to lose,
    // and a stream that never had a client is not held (J2).
    const cancel = request.method === 'GET' ? () => signal.abort() : undefined;
    if (cancel) socket.once('close', cancel);
    const end = metrics.upstreamTimer(forwarding.replica.id);
    // A request aimed elsewhere than the replica's MCP endpoint goes to exactly that URL.
    const target = forwarding.via?.(forwarding.replica);
    try {
      const response = await upstreams.send(target ?? forwarding.replica, {
        method: request.method,
        path: target ? replicaPath(target, '') : replicaPath(forwarding.replica, request.url),
        headers,
        body: request.body as Buffer | undefined,
        signal,
      });
      end();
      return response;
    } finally {
      if (cancel) socket.off('close', cancel);
    }
  }


  /**
   * A request to `replica` that failed, answered as its fault says (upstream/faults.ts): the replica's
   * health changes only for what the replica did. `gone` answers a refused connection (R4: the
   * process is gone); the client went away: nothing to answer.
   */
  async function sendFailed(request: FastifyRequest, reply: FastifyReply, replica: string, err: unknown, gone: () => unknown): Promise<void> {
    switch (faultOf(err)) {
      case 'aborted':
        return;
      case 'budget':
        // The replica is fine and busy: this stream waits for room, the rest of its traffic does not.
        await deps.answer(request, reply, 'GW_STREAM_BUDGET', { detail: replica });
        return;
      case 'refused':
        await fleet.reportRefused(replica);
        await gone();
        return;
      case 'gateway':
        logger[isKnownFault(err) ? 'warn' : 'error']({ replica, err: describeUpstreamError(err), method: request.method }, 'the upstream client refused the request');
        await deps.answer(request, reply, 'GW_REQUEST_NOT_SENT', { detail: describeUpstreamError(err) });
        return;
      case 'unreachable':
        fleet.reportSuspect(replica, describeUpstreamError(err));
        await deps.answer(request, reply, 'GW_UPSTREAM_UNREACHABLE', { detail: replica });
        return;
      case 'replica':
        fleet.reportSuspect(replica, describeUpstreamError(err));
        await deps.answer(request, reply, 'GW_UPSTREAM_FAILED', { detail: replica });
    }
  }


  /**
   * Sends a request to the replica that holds its state (a session's, a task's), and nowhere else:
   * never retried on another. A failure is answered by sendFailed, `gone` for a refused connection.
   * Resolves with the response, or undefined once the client has been answered (or went away).
   */
  async function sendToOwner(
    request: FastifyRequest,
    reply: FastifyReply,
    attempt: Forwarding,
    abort: UpstreamAbort,
    gone: () => unknown,
  ): Promise<UpstreamResponse | undefined> {
    try {
      return await send(request, attempt, abort);
    } catch (err) {
      await sendFailed(request, reply, attempt.replica.id, err, gone);
      return undefined;
    }
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


  return { loseSession, reportStatus, send, sendFailed, sendToOwner, discardSession };
}
