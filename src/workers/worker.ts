/**
 * One worker (workers > 1): a full gateway instance on the shared store, forked by the primary,
 * serving the MCP listener's port with the other workers. It has no admin listener of its own:
 * the primary's asks it over IPC (metrics, readiness, /debug). SIGTERM drains it as it would a
 * gateway alone; reloads come from the primary, which read the file; SIGINT and SIGHUP sent to
 * the whole process group (a terminal's Ctrl-C) are the primary's to act on.
 */
import { Registry } from 'prom-client';
import type { Config } from '../config/schema.js';
import { newInstanceId } from '../cursor/key-agreement.js';
import { logStartFailure, processLog, startServices, stopOnSignals } from '../lifecycle.js';
import { flushLog } from '../logger.js';
import { buildServer, type Gateway } from '../server.js';
import { stopTracing } from '../tracing/index.js';
import { isMessage, type AdminAnswer, type FromWorker, type ReloadAnswer, type ToWorker } from './messages.js';

export async function runWorker(): Promise<number> {
  // Until the configuration comes, the signals the primary coordinates must not end this process.
  const ignore = () => undefined;
  process.on('SIGINT', ignore);
  process.on('SIGHUP', ignore);
  const start = await new Promise<Extract<ToWorker, { kind: 'start' }>>((resolve) => {
    const first = (message: unknown) => {
      if (!isMessage(message, 'start')) return;
      process.off('message', first);
      resolve(message as Extract<ToWorker, { kind: 'start' }>);
    };
    process.on('message', first);
    send({ kind: 'hello' });
  });
  const { config, slot } = start;
  const instanceId = newInstanceId();
  const log = processLog(config, { role: 'worker', worker: slot, instance: instanceId });
  const { logger, destination, secrets } = log;
  // A start that cannot make its store or tracing is logged as a start failure; the worker exits 1.
  const services = await startServices(config, log);
  if (services === undefined) return 1;
  const { store, tracing } = services;
  const registry = new Registry();
  const gateway = buildServer(config, { store, registry, logger, secrets, instanceId, tracing });
  process.on('message', (message: ToWorker) => {
    if (!('id' in message)) return;
    answer(gateway, message, (next) => secrets.addConfig(next)).then(
      (value) => send({ kind: 'reply', id: message.id, value }),
      (err: unknown) => send({ kind: 'failed', id: message.id, error: err instanceof Error ? err.message : String(err) }),
    );
  });
  const stopped = stopOnSignals(['SIGTERM'], logger, () => gateway.close().then(() => stopTracing(tracing, logger)));
  let mcpUrl: string;
  try {
    ({ mcpUrl } = await gateway.listen({ admin: false }));
  } catch (err) {
    logStartFailure(logger, err);
    await gateway.close().catch(() => undefined);
    await flushLog(destination);
    return 1;
  }
  send({ kind: 'listening', instance: instanceId, mcpUrl });
  const code = await stopped;
  await flushLog(destination);
  return code;
}

async function answer(gateway: Gateway, message: ToWorker, learn: (config: Config) => void): Promise<unknown> {
  switch (message.kind) {
    case 'metrics':
      return gateway.metrics.registry.getMetricsAsJSON();
    case 'admin': {
      const response = await gateway.admin.inject({ method: 'GET', url: message.url });
      const contentType = response.headers['content-type'];
      return { status: response.statusCode, contentType: typeof contentType === 'string' ? contentType : undefined, body: response.body } satisfies AdminAnswer;
    }
    case 'reload': {
      learn(message.config);
      const plan = gateway.reconfigure(message.config);
      return { result: plan.result, applied: plan.applied, notApplied: plan.notApplied } satisfies ReloadAnswer;
    }
    default:
      return undefined;
  }
}

function send(message: FromWorker): void {
  // The primary gone, the channel is closed: the cluster module ends this worker then.
  if (process.connected) process.send!(message);
}
