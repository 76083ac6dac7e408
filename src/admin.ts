/**
 * The admin listener (CONTRACT.md §6), apart from the MCP listener so that metrics and probes
 * are never exposed where clients connect.
 */
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';
import { clientErrorHandler } from './clients/errors.js';
import type { Logger } from './logger.js';

export interface AdminDeps {
  logger: Logger;
  registry: Registry;
  /** Why the gateway is not ready; empty when it is. */
  ready: () => Promise<string[]>;
  /** What an operator should know that does not make the gateway unready. */
  warnings: () => string[];
}

export function buildAdmin(deps: AdminDeps): FastifyInstance {
  const logger = deps.logger.child({ listener: 'admin' });
  const admin = Fastify({
    loggerInstance: logger as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    clientErrorHandler: clientErrorHandler({ logger }),
  });

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

  return admin;
}
