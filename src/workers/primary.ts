/**
 * The primary of `workers: N` (N > 1): forks N workers (workers/worker.ts), each a full gateway
 * instance on the shared store with its own instance id, all accepting on listen.port
 * (node:cluster). The primary serves no client itself. It
 * - serves the admin listener for the group: /metrics aggregates every worker's and its own
 *   (counters and histograms summed, so a scraper's sums stay right), /readyz is ready when every
 *   running worker is, /healthz, /debug answered by the workers;
 * - reloads every worker on SIGHUP (it reads and validates the file once) and logs the result;
 * - drains every worker on SIGTERM or SIGINT (each within shutdown.graceMs) and exits 0 when all
 *   of them stopped cleanly;
 * - replaces a worker that dies, after a backoff that doubles while they keep dying young;
 * - writes the workers' log lines to its stdout whole, never interleaved with another's.
 */
import cluster, { type Worker } from 'node:cluster';
import type { Readable } from 'node:stream';
import { AggregatorRegistry, Counter, Gauge, Registry } from 'prom-client';
import { planReload } from '../config/reload.js';
import type { Config } from '../config/schema.js';
import { logReload, readForReload, stopOnSignals, type ProcessLog } from '../lifecycle.js';
import { flushLog, redactUrl, type LogDestination } from '../logger.js';
import { createMetrics } from '../metrics.js';
import { buildPrimaryAdmin } from './admin.js';
import { isMessage, type AdminAnswer, type FromWorker, type ReloadAnswer, type ToWorker, type WorkerMetrics } from './messages.js';

/** How long a worker may take to answer the primary (a scrape, a readiness check, a reload). */
const ANSWER_MS = 5000;
/** The first restart of a worker that died waits this long; each death soon after doubles it. */
const RESTART_FIRST_MS = 250;
const RESTART_MAX_MS = 30_000;
/** A worker that ran this long before dying starts the backoff over. */
const STABLE_MS = 60_000;
/** Beyond shutdown.graceMs, how long a stopping worker may take before it is killed. */
const STOP_MARGIN_MS = 10_000;

export interface PrimaryOptions extends ProcessLog {
  readonly config: Config;
  readonly file: string;
  readonly count: number;
}

interface Slot {
  /** 1..N, kept by the worker that replaces one. */
  readonly n: number;
  worker?: Worker;
  instance?: string;
  mcpUrl?: string;
  listening: boolean;
  startedAt: number;
  /** Deaths in a row, each soon after its start. */
  failures: number;
  restart?: NodeJS.Timeout;
  /** Resolves with the worker's exit code once it exited and its log lines are all written. */
  gone: Promise<number>;
}

type Request = ToWorker extends infer M ? (M extends { id: number } ? Omit<M, 'id'> : never) : never;

export async function runPrimary(options: PrimaryOptions): Promise<number> {
  const { file, count, logger, destination, secrets } = options;
  let running = options.config;
  let stopping = false;
  const registry = new Registry();
  // The gateway's metrics, so that what the primary counts (reloads) and its process metrics
  // add up with the workers' under the same names.
  const gatewayMetrics = createMetrics(registry);
  const restarts = new Counter({
    name: 'mcp_gateway_worker_restarts_total',
    help: 'Workers (workers > 1) that died without being asked to stop, each replaced after a backoff.',
    registers: [registry],
  });
  const slots: Slot[] = Array.from({ length: count }, (_, i) => ({ n: i + 1, listening: false, startedAt: 0, failures: 0, gone: Promise.resolve(0) }));
  new Gauge({
    name: 'mcp_gateway_workers',
    help: 'Workers (workers > 1) running and listening; the rest are starting or waiting to be replaced.',
    registers: [registry],
    collect() {
      this.set(slots.filter((slot) => slot.listening).length);
    },
  });

  const pending = new Map<number, { worker: Worker; resolve: (value: unknown) => void; reject: (err: Error) => void; timer: NodeJS.Timeout }>();
  let nextId = 1;
  const ask = <T>(slot: Slot, request: Request): Promise<T> => {
    const worker = slot.worker;
    if (worker === undefined || !worker.isConnected()) return Promise.reject(new Error(`worker ${slot.n} is not running`));
    const id = nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        pending.delete(id);
        reject(new Error(`worker ${slot.n} did not answer within ${ANSWER_MS} ms`));
      }, ANSWER_MS);
      pending.set(id, { worker, resolve: resolve as (value: unknown) => void, reject, timer });
      worker.send({ ...request, id } as ToWorker);
    });
  };
  const settle = (id: number, outcome: { value: unknown } | { error: Error }) => {
    const waiting = pending.get(id);
    if (waiting === undefined) return;
    pending.delete(id);
    clearTimeout(waiting.timer);
    if ('error' in outcome) waiting.reject(outcome.error);
    else waiting.resolve(outcome.value);
  };

  let startup: (ok: boolean) => void = () => undefined;
  const started = new Promise<boolean>((resolve) => {
    startup = resolve;
  });
  let up = false;

  // Workers write their lines into a pipe; they reach stdout whole, through the primary's own
  // destination, so that two processes' lines never interleave on a shared stdout.
  cluster.setupPrimary({ silent: true });
  const fork = (slot: Slot) => {
    slot.restart = undefined;
    const worker = cluster.fork();
    slot.worker = worker;
    slot.listening = false;
    slot.instance = undefined;
    slot.startedAt = performance.now();
    const stdout = forwardLines(worker.process.stdout!, destination);
    worker.process.stderr!.pipe(process.stderr, { end: false });
    const exited = new Promise<number>((resolve) => {
      worker.once('exit', (code, signal) => {
        onExit(slot, worker, code, signal);
        resolve(code ?? 1);
      });
    });
    slot.gone = Promise.all([exited, stdout]).then(([code]) => code);
    worker.on('message', (message: FromWorker) => {
      if (isMessage(message, 'reply')) settle(message.id, { value: message.value });
      else if (isMessage(message, 'failed')) settle(message.id, { error: new Error(message.error) });
      else if (isMessage(message, 'listening')) onListening(slot, message);
      // The configuration as it runs now (reloads included), and never read from the file again.
      else if (isMessage(message, 'hello')) worker.send({ kind: 'start', config: running, file, slot: slot.n } satisfies ToWorker);
    });
  };

  const onListening = (slot: Slot, message: Extract<FromWorker, { kind: 'listening' }>) => {
    slot.listening = true;
    slot.instance = message.instance;
    slot.mcpUrl = message.mcpUrl;
    if (up) logger.info({ worker: slot.n, instance: message.instance, pid: slot.worker?.process.pid }, 'worker replaced');
    else if (slots.every((s) => s.listening)) startup(true);
  };

  const onExit = (slot: Slot, worker: Worker, code: number | null, signal: string | null) => {
    for (const [id, waiting] of pending) if (waiting.worker === worker) settle(id, { error: new Error(`worker ${slot.n} exited`) });
    if (slot.worker !== worker) return;
    const said = { worker: slot.n, instance: slot.instance, pid: worker.process.pid, code, signal };
    slot.worker = undefined;
    slot.listening = false;
    if (stopping) return;
    if (!up) {
      logger.fatal(said, 'a worker exited while starting: stopping');
      startup(false);
      return;
    }
    const lived = performance.now() - slot.startedAt;
    slot.failures = lived >= STABLE_MS ? 1 : slot.failures + 1;
    const delayMs = Math.min(RESTART_MAX_MS, RESTART_FIRST_MS * 2 ** (slot.failures - 1));
    restarts.inc();
    logger.error({ ...said, livedMs: Math.round(lived), restartInMs: delayMs }, 'worker died: replacing it');
    slot.restart = setTimeout(() => fork(slot), delayMs);
  };

  const stopWorkers = async (): Promise<number[]> => {
    stopping = true;
    for (const slot of slots) clearTimeout(slot.restart);
    const live = slots.filter((slot) => slot.worker !== undefined);
    for (const slot of live) slot.worker!.process.kill('SIGTERM');
    const killer = setTimeout(() => {
      const left = slots.filter((slot) => slot.worker !== undefined);
      logger.error({ workers: left.map((slot) => slot.n), graceMs: running.shutdown.graceMs }, 'workers still running long after the grace period: killing them');
      for (const slot of left) slot.worker!.process.kill('SIGKILL');
    }, running.shutdown.graceMs + STOP_MARGIN_MS);
    const codes = await Promise.all(live.map((slot) => slot.gone));
    clearTimeout(killer);
    return codes;
  };

  const readiness = async () => {
    const reasons: string[] = stopping ? ['shutting down'] : [];
    const warnings = new Set<string>();
    const workers = await Promise.all(
      slots.map(async (slot) => {
        const said = { worker: slot.n, instance: slot.instance, pid: slot.worker?.process.pid };
        if (!slot.listening) {
          warnings.add(`worker ${slot.n} is ${slot.worker ? 'starting' : 'being replaced'}`);
          return { ...said, ready: false, reasons: ['not running'] };
        }
        try {
          const answer = await ask<AdminAnswer>(slot, { kind: 'admin', url: '/readyz' });
          const body = JSON.parse(answer.body) as { ready: boolean; reasons?: string[]; warnings?: string[] };
          for (const warning of body.warnings ?? []) warnings.add(warning);
          for (const reason of body.reasons ?? []) reasons.push(`worker ${slot.n}: ${reason}`);
          return { ...said, ready: body.ready, ...(body.reasons ? { reasons: body.reasons } : {}) };
        } catch (err) {
          reasons.push(`worker ${slot.n} does not answer`);
          return { ...said, ready: false, reasons: [(err as Error).message] };
        }
      }),
    );
    if (!slots.some((slot) => slot.listening)) reasons.push('no worker is running');
    const ready = reasons.length === 0;
    const also = warnings.size > 0 ? { warnings: [...warnings] } : {};
    return { ready, body: { ready, ...(ready ? {} : { reasons }), ...also, workers } };
  };

  const scrape = async () => {
    const live = slots.filter((slot) => slot.worker !== undefined);
    const answers = await Promise.allSettled(live.map((slot) => ask<WorkerMetrics>(slot, { kind: 'metrics' })));
    const missing = answers.flatMap((answer, i) => (answer.status === 'rejected' ? [live[i]!.n] : []));
    if (missing.length > 0) logger.warn({ workers: missing }, 'metrics scraped without the workers that did not answer');
    const all = answers.flatMap((answer) => (answer.status === 'fulfilled' ? [answer.value] : []));
    // Workers first: a metric is aggregated as its first holder says (replica_up: min).
    const merged = AggregatorRegistry.aggregate([...all, await registry.getMetricsAsJSON()]);
    return { contentType: merged.contentType, body: await merged.metrics() };
  };

  const debug = async (url: string): Promise<AdminAnswer> => {
    const live = slots.filter((slot) => slot.listening);
    if (live.length === 0) return { status: 503, contentType: 'application/json; charset=utf-8', body: JSON.stringify({ error: 'no worker is running' }) };
    if (!url.startsWith('/debug/sessions/')) return ask<AdminAnswer>(live[0]!, { kind: 'admin', url });
    // What the store holds is the same from any worker; the streams relayed are each worker's own.
    const answers = await Promise.all(live.map(async (slot) => ({ slot, answer: await ask<AdminAnswer>(slot, { kind: 'admin', url }) })));
    const views = answers.filter(({ answer }) => answer.status === 200 || answer.status === 404);
    if (views.length === 0) return answers[0]!.answer;
    type View = { openStreams?: { here?: Record<string, unknown>[] } };
    const first = JSON.parse(views[0]!.answer.body) as View;
    const here = views.flatMap(({ slot, answer }) => ((JSON.parse(answer.body) as View).openStreams?.here ?? []).map((stream) => ({ ...stream, worker: slot.n })));
    const status = views.some(({ answer }) => answer.status === 200) ? 200 : 404;
    return { status, contentType: views[0]!.answer.contentType, body: JSON.stringify({ ...first, openStreams: { ...first.openStreams, here } }) };
  };

  const admin = buildPrimaryAdmin({ config: () => running, logger, secrets, metrics: scrape, readiness, workers: () => slots.filter((slot) => slot.listening).length, debug });

  const reload = async () => {
    const next = readForReload(file, logger, gatewayMetrics.configReloads);
    if (next === undefined) return;
    secrets.addConfig(next);
    const plan = planReload(running, next);
    running = plan.config;
    logger.level = running.log.level;
    const live = slots.filter((slot) => slot.worker !== undefined);
    const workers = await Promise.all(
      live.map(async (slot) => {
        try {
          const answer = await ask<ReloadAnswer>(slot, { kind: 'reload', config: next });
          return { worker: slot.n, instance: slot.instance, result: answer.result };
        } catch (err) {
          return { worker: slot.n, instance: slot.instance, result: 'failed', error: (err as Error).message };
        }
      }),
    );
    gatewayMetrics.configReloads.inc({ result: plan.result });
    logReload(logger, file, plan, { workers });
    const failed = workers.filter((worker) => worker.result === 'failed');
    // One that was starting gets the new configuration with its start; one that died, when replaced.
    if (failed.length > 0) logger.error({ workers: failed }, 'the reload did not reach every worker');
  };
  process.on('SIGHUP', () => void reload());

  const stopped = stopOnSignals(
    ['SIGTERM', 'SIGINT'],
    logger,
    async () => {
      const codes = await stopWorkers();
      await admin.close();
      if (codes.some((code) => code !== 0)) throw new Error(`workers exited with codes ${codes.join(', ')}`);
    },
    // A second signal ends each worker at once, as it would a gateway alone.
    () => {
      for (const slot of slots) slot.worker?.process.kill('SIGTERM');
    },
  );

  logger.info({ file, store: running.store.type, storeUrl: running.store.type === 'redis' ? redactUrl(running.store.url) : undefined, workers: count }, 'configuration loaded');
  for (const slot of slots) fork(slot);
  const outcome = await Promise.race([started, stopped.then((code) => ({ code }))]);
  if (typeof outcome === 'object') {
    await flushLog(destination);
    return outcome.code;
  }
  if (!outcome) {
    await stopWorkers();
    await flushLog(destination);
    return 1;
  }
  up = true;
  let adminUrl: string;
  try {
    adminUrl = await admin.listen({ host: running.admin.host, port: running.admin.port });
  } catch (err) {
    logger.fatal({ err }, 'cannot listen');
    await stopWorkers();
    await flushLog(destination);
    return 1;
  }
  const pids = slots.map((slot) => slot.worker?.process.pid);
  logger.info({ mcp: `${slots[0]!.mcpUrl}${running.path}`, admin: adminUrl, store: running.store.type, replicas: running.replicas.length, workers: count, pids }, 'gateway listening');
  const code = await stopped;
  await flushLog(destination);
  return code;
}

/** Copies a worker's log lines to `destination`, whole lines only; resolves once its output ended. */
function forwardLines(stream: Readable, destination: LogDestination): Promise<void> {
  let rest = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    const end = chunk.lastIndexOf('\n');
    if (end === -1) {
      rest += chunk;
      return;
    }
    destination.write(rest + chunk.slice(0, end + 1));
    rest = chunk.slice(end + 1);
  });
  return new Promise((resolve) => {
    stream.once('close', () => {
      if (rest !== '') destination.write(`${rest}\n`);
      resolve();
    });
  });
}
