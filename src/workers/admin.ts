/**
 * The admin listener of a primary (workers > 1): the same routes as a gateway's own (admin.ts),
 * answering for the whole group of workers.
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import { adminServer } from '../admin.js';
import type { Config } from '../config/schema.js';
import type { Logger, LogSecrets } from '../logger.js';
import type { AdminAnswer } from './messages.js';

export interface PrimaryAdminDeps {
  config: () => Config;
  logger: Logger;
  secrets: LogSecrets;
  /** Every worker's metrics and the primary's, aggregated. */
  metrics: () => Promise<{ contentType: string; body: string }>;
  /** Ready when every running worker is; `body` says why not, worker by worker. */
  readiness: () => Promise<{ ready: boolean; body: Record<string, unknown> }>;
  workers: () => number;
  /** A GET on /debug/..., answered by the workers. */
  debug: (url: string) => Promise<AdminAnswer>;
}

export function buildPrimaryAdmin(deps: PrimaryAdminDeps): FastifyInstance {
  const admin = adminServer(deps);
  admin.get('/metrics', async (_request, reply) => {
    const { contentType, body } = await deps.metrics();
    return reply.header('content-type', contentType).send(body);
  });
  admin.get('/healthz', async () => ({ status: 'ok', workers: deps.workers() }));
  admin.get('/readyz', async (_request, reply) => {
    const { ready, body } = await deps.readiness();
    return reply.code(ready ? 200 : 503).send(body);
  });
  const relay = async (url: string, reply: FastifyReply) => {
    const answer = await deps.debug(url);
    if (answer.contentType !== undefined) reply.header('content-type', answer.contentType);
    return reply.code(answer.status).send(answer.body);
  };
  admin.get('/debug/explain', (request, reply) => relay(request.url, reply));
  admin.get('/debug/sessions/:id', (request, reply) => relay(request.url, reply));
  return admin;
}
