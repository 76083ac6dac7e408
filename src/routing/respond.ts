/**
 * Respond: a replica's answer on its way to the client, with the gateway's own headers added. An
 * SSE answer becomes an incarnation whose events carry cursors recorded in the store (E1, E5).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { isStoreError } from '../errors.js';
import { replicaOnlyHeaders, responseHeadersForClient } from '../headers.js';
import { parsedRequestIds, requestIds } from '../jsonrpc.js';
import type { CursorTarget } from '../sse/rewriter.js';
import { relay } from '../streams/relay.js';
import type { Attachment } from '../streams/sse-streams.js';
import { discard, isEventStream, type UpstreamAbort, type UpstreamResponse } from '../upstream/index.js';
import type { Forwarding, ProxyDeps } from './forward.js';

export type Respond = ReturnType<typeof createRespond>;

export function createRespond(deps: ProxyDeps) {
  const { logger, streams, requests, answer } = deps;

  /** Streams the replica's answer to the client, with the gateway's own headers added. */
  async function respond(request: FastifyRequest, reply: FastifyReply, forwarding: Forwarding, answered: UpstreamResponse, abort: UpstreamAbort) {
    const { replica, sessionId } = forwarding;
    const response = forwarding.watch ? forwarding.watch(answered, replica) : answered;
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
    // The client left before its GET stream began (before the incarnation is opened, which would
    // supersede the session's GET stream, and after): a GET has no effect to lose, and one that
    // never had a client is not held (CONTRACT.md §7). Its replica's stream and connection go now.
    const leftBeforeStart = () => {
      if (kind !== 'get' || !res.destroyed) return false;
      abort.abort();
      discard(response);
      requests.answered(request, { status: response.statusCode, replica: replica.id, ...(sessionId !== undefined ? { session: sessionId } : {}) });
      requests.ended(request, reply, 'client_gone');
      return true;
    };
    if (leftBeforeStart()) return;
    if (sessionId !== undefined) {
      try {
        // A GET stream that opened supersedes the session's earlier GET streams now, before any
        // of its events leaves (E4, E5); a POST stream is recorded with its first events.
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
        logger.warn({ replica: replica.id, session: deps.keys.sessionFingerprint(sessionId) }, 'store unavailable: this POST stream is not resumable');
        attachment = undefined;
        cursors = undefined;
      }
    }
    if (leftBeforeStart()) return;
    requests.answered(request, { status: response.statusCode, replica: replica.id, ...(sessionId !== undefined ? { session: sessionId } : {}) });
    reply.hijack();
    // A journaled stream outlives its client (J2, held): the pipe decides when it ends.
    if (!attachment?.pump) {
      res.once('close', () => {
        if (!res.writableFinished) abort.abort();
      });
    }
    const rewriter = streams.rewriter(cursors, 0, calls ? { calls } : {});
    // Proxies in front of the gateway must not buffer the stream either.
    headers['x-accel-buffering'] = 'no';
    const start = () => {
      res.writeHead(response.statusCode, headers);
    };
    const how = await streams.pipe({ body: response.body, res, replica: replica.id, start }, rewriter, attachment);
    requests.ended(request, reply, how);
  }


  return respond;
}
