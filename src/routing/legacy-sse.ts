/**
 * The 2024-11-05 HTTP+SSE transport (CONTRACT.md §9), served when `legacySse` is set. A client
 * opens `legacySse.path` (GET): the gateway opens the SSE endpoint of a replica the balancer picks
 * (`replicas[].sseUrl`, or `/sse` on the origin of its url) and relays the stream. The replica's
 * first `endpoint` event names where its messages are posted and the session id; the gateway
 * binds that session to the replica in the store (as R1) before the client sees the event, and
 * rewrites it to name `legacySse.messagesPath?sessionId=<the replica's id>`. Each POST there goes
 * to the session's owner from any instance (R2, session-requests.ts); an unknown or lost session
 * gets 404 (R3). The stream is relayed as it is: no cursors, no journal (the transport has no
 * resumption); when it ends, the session ends with it, as it does on the replica.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Transform, pipeline, type Readable } from 'node:stream';
import type { ReplicaConfig } from '../config/schema.js';
import { describe, isStoreError } from '../errors.js';
import type { ForwardingPlan, ProxyDeps } from './forward.js';
import { SseParser, type SseItem } from '../sse/parser.js';
import { serializeComment, serializeEvent } from '../sse/serializer.js';
import type { SessionRecord } from '../store/types.js';
import { isEventStream, type UpstreamResponse } from '../upstream/index.js';

/** The query parameter of messagesPath that names the session, as the SDKs' servers name it. */
const SESSION_PARAM = 'sessionId';
/** Other spellings a replica's endpoint event may use (the Python SDK's server writes session_id). */
const SESSION_PARAMS = [SESSION_PARAM, 'session_id'];

type Route = (request: FastifyRequest, reply: FastifyReply, forwarding: ForwardingPlan) => Promise<unknown>;
type SessionRoute = (request: FastifyRequest, reply: FastifyReply, sessionId: string, forwarding: ForwardingPlan) => Promise<unknown>;

/** A replica's HTTP+SSE endpoint: replicas[].sseUrl, or /sse on the origin of its url. */
export function sseUrl(replica: ReplicaConfig): string {
  return replica.sseUrl ?? new URL('/sse', replica.url).href;
}

/** The replica, aimed at `url` (see Forwarding.via). */
function aimedAt(replica: ReplicaConfig, url: string): ReplicaConfig {
  return { ...replica, url };
}

/**
 * Where a request of the session goes on its owner: a session of this transport posts to the
 * endpoint its replica named, resolved against the replica's SSE endpoint; any other session to
 * the replica's MCP endpoint.
 */
export function sessionTarget(record: SessionRecord): Pick<ForwardingPlan, 'via'> {
  const { endpoint } = record;
  return endpoint === undefined ? {} : { via: (replica) => aimedAt(replica, new URL(endpoint, sseUrl(replica)).href) };
}

export function createLegacySse(deps: ProxyDeps, balanced: Route, existingSession: SessionRoute) {
  const { store, fleet, logger, answer } = deps;

  /** GET legacySse.path: a replica's SSE stream, its session bound and announced at the gateway. */
  function open(request: FastifyRequest, reply: FastifyReply) {
    return balanced(request, reply, {
      dropRequestHeaders: [],
      responseHeaders: {},
      via: (replica) => aimedAt(replica, sseUrl(replica)),
      watch: (response, replica) => announced(response, replica),
    });
  }

  /** POST legacySse.messagesPath?sessionId=: to the session's owner (R2), or 404 (R3). */
  function message(request: FastifyRequest, reply: FastifyReply) {
    const sessionId = (request.query as Record<string, unknown> | undefined)?.[SESSION_PARAM];
    if (typeof sessionId !== 'string' || sessionId === '') return answer(request, reply, 'GW_SESSION_NOT_FOUND');
    return existingSession(request, reply, sessionId, { dropRequestHeaders: [], responseHeaders: {}, legacySse: true });
  }

  /** The stream with its endpoint event rewritten once its session is bound; the session ends with it. */
  function announced(response: UpstreamResponse, replica: ReplicaConfig): UpstreamResponse {
    if (response.statusCode !== 200 || !isEventStream(response)) return response;
    const config = deps.config();
    const { messagesPath } = config.legacySse!;
    const items: SseItem[] = [];
    const parser = new SseParser((item) => items.push(item), { maxEventBytes: config.limits.sseEventBytes });
    let sessionId: string | undefined;
    let keepAlive: NodeJS.Timeout | undefined;

    /** Binds the session the endpoint event names (R1); resolves with the event the client gets. */
    async function bind(data: string): Promise<string> {
      const url = new URL(data, sseUrl(replica));
      const id = SESSION_PARAMS.map((name) => url.searchParams.get(name) ?? '').find((v) => v !== '');
      if (id === undefined) throw new Error('the endpoint event names no session id');
      const ownerEpoch = await fleet.bindingEpoch(replica.id);
      const bound = await store.bindSession({ sessionId: id, owner: replica.id, ownerEpoch, endpoint: url.pathname + url.search }, config.sessions.idleTtlMs);
      if (!bound) throw new Error('the replica issued a session id that is already recorded');
      sessionId = id;
      fleet.sessionSeen(replica.id, id);
      // An open stream is activity: its session must not expire under it.
      const ttl = config.sessions.idleTtlMs;
      keepAlive = setInterval(() => void store.touchSession(id, ttl).catch(() => undefined), Math.max(1000, Math.floor(ttl / 3)));
      keepAlive.unref();
      return `${messagesPath}?${SESSION_PARAM}=${encodeURIComponent(id)}`;
    }

    async function rewrite(item: SseItem): Promise<Buffer | undefined> {
      if (item.kind === 'comment') return serializeComment(item.text);
      if (item.kind !== 'event') {
        if (item.kind === 'error') throw new Error(item.message);
        return undefined;
      }
      const { id, event, data, retry } = item;
      if (sessionId === undefined && event === 'endpoint' && data !== undefined) return serializeEvent({ id, event, data: await bind(data), retry });
      return serializeEvent({ id, event, data, retry });
    }

    const watcher = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        parser.push(chunk);
        const pending = items.splice(0);
        void (async () => {
          for (const item of pending) {
            const bytes = await rewrite(item);
            if (bytes) this.push(bytes);
          }
        })().then(
          () => done(),
          (err: unknown) => {
            logger[isStoreError(err) ? 'warn' : 'error']({ replica: replica.id, err: describe(err) }, 'HTTP+SSE stream ended: its session cannot be bound');
            done(err as Error);
          },
        );
      },
    });
    watcher.once('close', () => {
      clearInterval(keepAlive);
      if (sessionId === undefined) return;
      // The replica's transport ends the session with its stream: so does the gateway.
      fleet.sessionEnded(replica.id, sessionId);
      const id = sessionId;
      store.endSession(id, 'terminated', config.sessions.tombstoneTtlMs).catch((err: unknown) => {
        logger.warn({ err: describe(err), session: deps.keys.sessionFingerprint(id) }, 'cannot record the HTTP+SSE session as ended');
      });
    });
    const body = pipeline(response.body, watcher, () => undefined) as Readable;
    return { ...response, body } as UpstreamResponse;
  }


  return { open, message };
}
