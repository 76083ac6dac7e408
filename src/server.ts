/**
 * Builds a gateway without listening: the MCP listener, the admin listener, the fleet, and the
 * connections to the replicas, around an injected store, metrics registry and logger. The CLI
 * listens and handles signals; tests build several gateways in one process.
 */
import type { Socket } from 'node:net';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';
import { buildAdmin } from './admin.js';
import { planReload, type ReloadPlan } from './config/reload.js';
import type { Config } from './config/schema.js';
import { Fleet } from './fleet/index.js';
import { endToEndNamedInConnection } from './headers.js';
import { clientErrorHandler } from './clients/errors.js';
import { bodyLimitHook } from './clients/body-limit.js';
import { applyClientLimits, countDroppedConnections, HEADERS_CHECK_INTERVAL_MS, refusalReason } from './clients/limits.js';
import type { Logger, LogSecrets } from './logger.js';
import { createMetrics, type Metrics } from './metrics.js';
import { answerUnrouted, createAnswering } from './answers.js';
import { createRequestLog } from './request-log.js';
import { createOriginPolicy } from './cors.js';
import { BindingCache } from './routing/bindings.js';
import { createProxy } from './routing/proxy.js';
import { createPrincipals } from './trust/principal.js';
import { CursorKeys } from './cursor/keys.js';
import { KeyAgreement } from './cursor/key-agreement.js';
import { OpenStreams } from './streams/open.js';
import { Pumps } from './streams/pumps.js';
import { explainCursor, viewSession, type ExplainDeps } from './resumption/explain.js';
import { isStoreError } from './errors.js';
import { SseStreams } from './streams/sse-streams.js';
import { UnrecordedRecords } from './streams/unrecorded.js';
import { instrumentStore } from './store/instrument.js';
import type { InstanceLiveness, Store } from './store/types.js';
import { keepAlive } from './streams/liveness.js';
import type { Tracing } from './tracing/index.js';
import { Upstreams } from './upstream/index.js';

export interface GatewayDeps {
  store: Store;
  registry: Registry;
  logger: Logger;
  /** Where a cursor secret agreed through the store is registered, to be scrubbed from the log. */
  secrets?: LogSecrets;
  /** This instance's name among those sharing the store (logged by a worker on every line); unset: a new one. */
  instanceId?: string;
  /** The process's traces (tracing/index.ts startTracing); unset: off, nothing traced. */
  tracing?: Tracing | undefined;
}

export interface ListenOptions {
  /**
   * false: the MCP listener only. A worker (workers/worker.ts) serves no admin listener of its own:
   * its primary serves one for all workers and asks each through `admin.inject`.
   */
  admin?: boolean;
}

export interface Gateway {
  readonly mcp: FastifyInstance;
  readonly admin: FastifyInstance;
  readonly fleet: Fleet;
  readonly store: Store;
  readonly metrics: Metrics;
  /** Listens on both listeners; resolves with their base URLs (adminUrl '' with `admin: false`). */
  listen(options?: ListenOptions): Promise<{ mcpUrl: string; adminUrl: string }>;
  /**
   * Applies `config` live, except what needs a restart (see config/reload.ts), which keeps its
   * running value and is named in the returned plan.
   */
  reconfigure(config: Config): ReloadPlan;
  /**
   * Graceful stop: not ready, no new connections, GET streams ended, requests in flight (POST
   * streams until their responses have passed) given up to shutdown.graceMs.
   */
  close(): Promise<void>;
}

export function buildServer(initial: Config, deps: GatewayDeps): Gateway {
  let config = initial;
  const { logger } = deps;
  const metrics = createMetrics(deps.registry);
  const store = instrumentStore(deps.store, metrics, deps.tracing);
  const fleet = new Fleet({ config, store, metrics, logger });
  const bindings = new BindingCache({ config: () => config, store, fleet, metrics, logger });
  const upstreams = new Upstreams(config.upstream, {
    changed: (replica, open) => metrics.upstreamStreams.set({ replica }, open),
    exceeded: (replica) => metrics.streamBudgetExceeded.inc({ replica }),
  });
  metrics.upstreamStreamBudget.set(config.upstream.maxStreams);
  const openStreams = new OpenStreams();
  const keys = new CursorKeys(config.cursor, store, logger, (secret) => deps.secrets?.add(secret));
  const unrecorded = new UnrecordedRecords({ config: () => config, store, metrics, logger });
  const agreement = new KeyAgreement({ keys, store, logger, metrics, instanceId: deps.instanceId });
  const pumps = new Pumps({ config: () => config, store, metrics, logger, instanceId: agreement.instanceId, holderSpan: deps.tracing?.holderSpan });
  upstreams.budgets.onMakeRoom((replica) => pumps.makeRoom(replica));
  const streams = new SseStreams({ config: () => config, store, keys, metrics, logger, openStreams, unrecorded, pumps, fleet, instanceId: agreement.instanceId });
  const requests = createRequestLog({ config: () => config, logger, metrics, secrets: deps.secrets, session: keys.sessionFingerprint, tracing: deps.tracing });
  const answer = createAnswering({ config: () => config, requests });
  // What the admin listener's /debug endpoints read: the store as it stands, this instance's key
  // and its view of the fleet.
  const explainDeps = (): ExplainDeps => ({
    store,
    mode: config.resumption.mode,
    journal: config.resumption.journal.enabled,
    key: async () => ({ codec: await keys.codec(), source: config.cursor.secret ? 'configured' : 'agreed' }),
    fleet,
    health: (replica) => fleet.health(replica),
  });
  let draining = false;
  let secretRefresh: NodeJS.Timeout | undefined;
  let liveness: InstanceLiveness | undefined;

  const mcp = Fastify({
    loggerInstance: logger as FastifyBaseLogger,
    // One line per request comes from request-log.ts (log.requests), with the replica and session.
    logController: new LogController({ disableRequestLogging: true }),
    // Nothing logs through request.log: no child logger per request.
    childLoggerFactory: (parent) => parent,
    // limits.bodyBytes is enforced by bodyLimitHook, which reads it per request (reloadable).
    bodyLimit: Number.MAX_SAFE_INTEGER,
    http: { maxHeaderSize: config.limits.headerBytes, connectionsCheckingInterval: HEADERS_CHECK_INTERVAL_MS },
    routerOptions: { ignoreTrailingSlash: true },
    // Once its headers are in (limits.headersTimeoutMs bounds those), no timeout cuts a request or
    // an open stream (R5); replicas are bounded by upstream timeouts.
    requestTimeout: 0,
    connectionTimeout: 0,
    // Its 503 while closing comes from the answer registry (answerUnrouted).
    return503OnClosing: false,
    clientErrorHandler: clientErrorHandler({ logger, requests, onRefused: (status) => metrics.clientsRefused.inc({ reason: refusalReason(status) }) }),
  });
  applyClientLimits(mcp.server, config.limits);
  deps.tracing?.instrument(mcp, { instanceId: agreement.instanceId, replicas: () => config.replicas, session: keys.sessionFingerprint });
  countDroppedConnections(mcp.server, metrics);
  mcp.addHook('preParsing', bodyLimitHook(() => config.limits.bodyBytes));
  mcp.removeAllContentTypeParsers();
  // Bodies are forwarded as the client sent them: read as bytes, never re-serialized.
  mcp.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
  mcp.setErrorHandler((error: FastifyError, request, reply) => {
    const status = error.statusCode && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 500;
    if (status === 500) logger.error({ err: error, method: request.method }, 'request failed in the gateway');
    const code = status === 500 ? 'GW_INTERNAL' : status === 413 ? 'GW_BODY_TOO_LARGE' : 'GW_BAD_REQUEST';
    return answer(request, reply, code, { detail: error.message, status });
  });
  const sockets = new Set<Socket>();
  mcp.server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  answerUnrouted(mcp, answer);
  // RFC 9110 §7.6.1: a header named in Connection is not forwarded; one the replica needs is refused.
  mcp.addHook('onRequest', async (request, reply) => {
    const named = endToEndNamedInConnection(request.headers);
    if (named !== undefined) return answer(request, reply, 'GW_CONNECTION_NAMES_END_TO_END', { detail: named });
  });
  // R6 and CORS come first: a refused origin or a preflight never reaches the proxy.
  const originPolicy = createOriginPolicy({ config: () => config, requests, answer });
  const principals = createPrincipals({ config: () => config, keys, store, upstreams, replica: (id) => fleet.get(id), metrics, logger });
  const routes = createProxy({ config: () => config, store, fleet, bindings, upstreams, metrics, logger, streams, pumps, keys, principals, requests, answer, tracing: deps.tracing });
  mcp.all(config.path, { onRequest: originPolicy }, routes.proxy);
  if (config.legacySse) {
    // §9: the 2024-11-05 HTTP+SSE transport, under the same origin policy.
    mcp.route({ method: ['GET', 'OPTIONS'], url: config.legacySse.path, onRequest: originPolicy, handler: routes.legacySse.open });
    mcp.route({ method: ['POST', 'OPTIONS'], url: config.legacySse.messagesPath, onRequest: originPolicy, handler: routes.legacySse.message });
  }

  const admin = buildAdmin({
    config: () => config,
    logger,
    secrets: deps.secrets,
    registry: deps.registry,
    ready: async () => {
      const reasons: string[] = [];
      if (draining) reasons.push('shutting down');
      try {
        await store.ping();
      } catch {
        reasons.push('the store does not answer');
      }
      if (!fleet.anyUp()) reasons.push('no replica is up');
      return reasons;
    },
    warnings: () => [
      ...agreement.warnings(),
      ...upstreams.budgets
        .full()
        .map(([replica, open]) => `replica ${replica} at its stream budget: ${open} GET streams open (upstream.maxStreams ${upstreams.budgets.budget}); new ones take held streams' places or get 503`),
    ],
    debug: {
      explain: (cursor, sessionId) => explainCursor(explainDeps(), cursor, sessionId),
      session: (sessionId) => viewSession(explainDeps(), sessionId, openStreams.ofSession(sessionId)),
    },
  });

  return {
    mcp,
    admin,
    fleet,
    store,
    metrics,
    async listen(options = {}) {
      await waitForStore(store, config.store.connectTimeoutMs, logger);
      const mcpUrl = await mcp.listen({ host: config.listen.host, port: config.listen.port });
      const adminUrl = options.admin === false ? '' : await admin.listen({ host: config.admin.host, port: config.admin.port });
      fleet.start();
      bindings.start();
      liveness = keepAlive(store, agreement.instanceId, config.resumption.journal.leaseMs, metrics);
      // A store that lost its data lost the agreed cursor secret with it: re-agree regularly, and
      // compare keys with the other instances (key-agreement.ts). A failure is logged once until
      // the store answers again: a store outage is reported where it is noticed (/readyz, metrics).
      let failing = false;
      const keyTick = () =>
        keys
          .refresh()
          .then(() => agreement.check(config.health.intervalMs))
          .then(
            () => {
              failing = false;
            },
            (err: unknown) => {
              if (!failing) logger.warn({ err }, 'cannot refresh or compare the cursor key');
              failing = true;
            },
          );
      void keyTick();
      secretRefresh = setInterval(keyTick, config.health.intervalMs);
      secretRefresh.unref();
      if (options.admin === false) logger.info({ mcp: `${mcpUrl}${config.path}`, store: store.kind, replicas: config.replicas.length }, 'worker listening');
      else logger.info({ mcp: `${mcpUrl}${config.path}`, admin: adminUrl, store: store.kind, replicas: config.replicas.length }, 'gateway listening');
      return { mcpUrl, adminUrl };
    },
    reconfigure(file) {
      const plan = planReload(config, file);
      const next = plan.config;
      const kept = new Set(next.replicas.map((r) => r.id));
      const removed = new Set(config.replicas.map((r) => r.id).filter((id) => !kept.has(id)));
      config = next;
      logger.level = next.log.level;
      applyClientLimits(mcp.server, next.limits);
      upstreams.reconfigure(next.upstream);
      metrics.upstreamStreamBudget.set(next.upstream.maxStreams);
      keys.reconfigure(next.cursor);
      fleet.reconfigure(next);
      // Streams of removed replicas end now; their sessions are lost (R4) and get 404 from here on.
      openStreams.end(removed);
      void upstreams.retain(kept);
      if (removed.size > 0) logger.info({ removed: [...removed] }, 'replicas removed: their streams ended, their sessions lost');
      return plan;
    },
    async close() {
      draining = true;
      clearInterval(secretRefresh);
      const graceMs = config.shutdown.graceMs;
      const startedAt = performance.now();
      // GET streams would hold the listener open forever: they end now and their clients
      // reconnect. A POST stream is a call in flight: it ends once its response has passed, held
      // ones (J2, no client) too; held GET streams end at once.
      openStreams.drain();
      const closing = mcp.close();
      // A keep-alive connection goes idle when its in-flight request ends; close it then. Node
      // does not count a connection that never sent a byte as idle: close those too.
      const idle = setInterval(() => {
        mcp.server.closeIdleConnections();
        for (const socket of sockets) if (socket.bytesRead === 0) socket.destroy();
      }, 50);
      let timer: NodeJS.Timeout | undefined;
      const grace = new Promise<'timeout'>((resolve) => {
        timer = setTimeout(() => resolve('timeout'), graceMs);
      });
      const finished = Promise.all([closing, openStreams.idle()]).then(() => 'closed' as const);
      if ((await Promise.race([finished, grace])) === 'timeout') {
        logger.warn({ graceMs, streams: openStreams.size }, 'grace period over: closing the remaining connections');
        // Calls still running: their streams end with the retry hint, the clients resume elsewhere.
        openStreams.end();
        mcp.server.closeAllConnections();
        await closing;
      }
      clearInterval(idle);
      clearTimeout(timer);
      await fleet.close();
      await bindings.close();
      await upstreams.close();
      // Records of events that left while the store was down: written now if it answers, within
      // what is left of the grace period; what is not becomes unknown_stream (§7).
      await unrecorded.settle(graceMs - (performance.now() - startedAt));
      await agreement.withdraw();
      // Its streams are over: none is left for another instance to wait for.
      await liveness?.stop();
      await admin.close();
      await store.close();
    },
  };
}

/**
 * Gives the store its first connection before taking requests, so that a gateway starting beside
 * a healthy Redis does not answer 503 for its first milliseconds, and checks that the store lets
 * the gateway do what it does. A store still down after the connect timeout does not stop the
 * gateway: it starts unready (/readyz says why) and recovers. A store that refuses it (an untrusted
 * certificate, wrong credentials, a missing permission) stops the start: nothing would fix itself.
 */
async function waitForStore(store: Store, timeoutMs: number, logger: Logger): Promise<void> {
  await store.checkAccess(timeoutMs).catch((err: unknown) => {
    if (!isStoreError(err)) throw err;
    logger.warn({ err: err.message }, 'the store does not answer yet; starting unready');
  });
}
