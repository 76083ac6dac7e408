/**
 * The admin listener (CONTRACT.md §6), apart from the MCP listener so that metrics, probes and
 * what the gateway knows of a session are never exposed where clients connect.
 */
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply } from 'fastify';
import type { Registry } from 'prom-client';
import { clientErrorHandler } from './clients/errors.js';
import type { Config } from './config/schema.js';
import { isStoreError } from './errors.js';
import type { Logger, LogSecrets } from './logger.js';
import { answerUnrouted, createAnswering } from './answers.js';
import { createRequestLog } from './request-log.js';
import type { Explanation, SessionView } from './resumption/explain.js';

export interface AdminDeps {
  config: () => Config;
  logger: Logger;
  /** The secrets the request lines are scrubbed of, as the MCP listener's. */
  secrets?: LogSecrets | undefined;
  registry: Registry;
  /** Why the gateway is not ready; empty when it is. */
  ready: () => Promise<string[]>;
  /** What an operator should know that does not make the gateway unready. */
  warnings: () => string[];
  /** Why a resumption gets what it gets (resumption/explain.ts); reject with a StoreError. */
  debug: {
    explain: (cursor: string, sessionId: string | undefined) => Promise<Explanation>;
    session: (sessionId: string) => Promise<SessionView>;
  };
}

/** How long an operator is asked to wait when the store does not answer. */
const STORE_RETRY_AFTER_S = 1;

/** An admin listener without its routes (the primary of workers adds its own: workers/admin.ts). */
export function adminServer(deps: Pick<AdminDeps, 'config' | 'logger' | 'secrets'>): FastifyInstance {
  const logger = deps.logger.child({ listener: 'admin' });
  // Its own answers (404, 503, a request Node's parser refused) get their request lines
  // (log.requests); only the MCP listener's answers are counted.
  const requests = createRequestLog({ config: deps.config, logger, secrets: deps.secrets });
  const admin = Fastify({
    loggerInstance: logger as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    clientErrorHandler: clientErrorHandler({ logger, requests }),
    // Its 503 while closing comes from the answer registry (answerUnrouted).
    return503OnClosing: false,
  });
  answerUnrouted(admin, createAnswering({ config: deps.config, requests }));
  return admin;
}

export function buildAdmin(deps: AdminDeps): FastifyInstance {
  const admin = adminServer(deps);

  admin.get('/metrics', async (_request, reply) => {
    const body = await deps.registry.metrics();
    return reply.header('content-type', deps.registry.contentType).send(body);
  });

  admin.get('/healthz', async () => ({ status: 'ok' }));

  admin.get('/readyz', async (_request, reply) => {
    const reasons = await deps.ready();
    const warnings = deps.warnings();
    const also = warnings.length > 0 ? { warnings } : {};
    if (reasons.length > 0) return reply.code(503).send({ ready: false, reasons, ...also });
    return { ready: true, ...also };
  });

  // What a resumption with a cursor would get now, and why (docs/operations.md).
  admin.get<{ Querystring: { cursor?: string; session?: string } }>('/debug/explain', async (request, reply) => {
    const { cursor, session } = request.query;
    if (typeof cursor !== 'string' || (session !== undefined && typeof session !== 'string')) {
      return reply.code(400).send({ error: 'give the cursor as ?cursor=, and the session as &session= (once each)' });
    }
    return storeAnswer(reply, () => deps.debug.explain(cursor, session));
  });

  admin.get<{ Params: { id: string } }>('/debug/sessions/:id', async (request, reply) => {
    return storeAnswer(reply, async () => {
      const view = await deps.debug.session(request.params.id);
      if (!view.session && view.incarnations.length === 0) reply.code(404);
      return view;
    });
  });

  return admin;
}

/** The view, or 503 when the store does not answer: nothing is guessed. */
async function storeAnswer(reply: FastifyReply, view: () => Promise<unknown>): Promise<unknown> {
  try {
    return await view();
  } catch (err) {
    if (!isStoreError(err)) throw err;
    return reply.code(503).header('retry-after', String(STORE_RETRY_AFTER_S)).send({ error: 'the store does not answer' });
  }
}
