/**
 * What every gateway process does the same way, whether it runs alone, as a worker or as the
 * workers' primary (workers/): its logger on stdout, reading the file again on SIGHUP and saying
 * what became of it, and stopping on a signal.
 */
import { format } from 'node:util';
import type { Counter } from 'prom-client';
import { ConfigError, loadConfig } from './config/load.js';
import { RESTART_ONLY, type ReloadPlan } from './config/reload.js';
import type { Config } from './config/schema.js';
import { GatewayError } from './errors.js';
import { createLogger, flushLog, LogSecrets, stdoutDestination, type LogDestination, type Logger } from './logger.js';
import type { Store } from './store/types.js';
import type { Tracing } from './tracing/index.js';

export interface ProcessLog {
  readonly logger: Logger;
  readonly destination: LogDestination;
  readonly secrets: LogSecrets;
}

/** The process's logger on stdout, knowing the configuration's secrets; `bindings` go on every line. */
export function processLog(config: Config, bindings?: Record<string, unknown>): ProcessLog {
  const secrets = new LogSecrets();
  secrets.addConfig(config);
  const destination = stdoutDestination();
  const root = createLogger(config.log.level, { secrets, destination });
  const logger = bindings ? root.child(bindings) : root;
  routeConsole(logger);
  return { logger, destination, secrets };
}

/**
 * Libraries that write to the console (ioredis warns there that a password was given to a Redis
 * that needs none) would put plain text among the JSON lines: their lines go through the logger.
 */
function routeConsole(logger: Logger): void {
  const library = logger.child({ from: 'library' });
  const say = (level: 'info' | 'warn' | 'error') => (...args: unknown[]) => {
    library[level](format(...args).replace(/^\[(WARN|ERROR|INFO)\]\s*/, ''));
  };
  console.log = say('info');
  console.info = say('info');
  console.debug = say('info');
  console.warn = say('warn');
  console.error = say('error');
}

/**
 * The file read again for a reload (SIGHUP), or undefined when it does not validate: then the
 * refusal is logged and counted, and the running configuration stays (R4).
 */
export function readForReload(file: string, logger: Logger, reloads: Counter<'result'>): Config | undefined {
  try {
    return loadConfig(file);
  } catch (err) {
    const problems = err instanceof ConfigError ? err.problems : [String(err)];
    reloads.inc({ result: 'invalid' });
    logger.error({ file, result: 'invalid', problems }, 'configuration reload refused; the running configuration stays');
    return undefined;
  }
}

/** Says what a reload applied, and names what needs a restart (never reported as reloaded). */
export function logReload(logger: Logger, file: string, plan: ReloadPlan, more: Record<string, unknown> = {}): void {
  const said = { file, result: plan.result, applied: plan.applied, replicas: plan.config.replicas.map((r) => r.id), ...more };
  if (plan.result === 'applied') {
    logger.info(said, 'configuration reloaded');
    return;
  }
  const notApplied = Object.fromEntries(plan.notApplied.map((path) => [path, RESTART_ONLY[path]]));
  logger.warn({ ...said, notApplied }, `configuration reloaded in part: ${plan.notApplied.join(', ')} not applied (restart to apply)`);
}

/**
 * Resolves with the exit code once `close` finished after the first of `signals` (0, or 1 when it
 * failed); a second signal resolves with 1 at once.
 */
export function stopOnSignals(
  signals: readonly NodeJS.Signals[],
  logger: Logger,
  close: () => Promise<void>,
  again?: (signal: NodeJS.Signals) => void,
): Promise<number> {
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: NodeJS.Signals) => {
      if (stopping) {
        logger.warn({ signal }, 'second signal: exiting at once');
        again?.(signal);
        resolve(1);
        return;
      }
      stopping = true;
      logger.info({ signal }, 'stopping');
      close().then(
        () => resolve(0),
        (err: unknown) => {
          logger.error({ err }, 'error while stopping');
          resolve(1);
        },
      );
    };
    for (const signal of signals) process.on(signal, stop);
  });
}

/**
 * Says why the gateway could not start, in one line: a GatewayError (the store refused the
 * gateway, a TLS file unreadable) by its code and message alone, as nothing in its stack would
 * help an operator; anything else with its stack, as the fault it is.
 */
export function logStartFailure(logger: Logger, err: unknown): void {
  if (err instanceof GatewayError) logger.fatal({ code: err.code }, err.message);
  else logger.fatal({ err }, 'cannot listen');
}

/**
 * The store and the tracing a gateway process serves with, or undefined when either cannot start:
 * logged as a start failure, the store closed again if it was made, the log flushed (the process
 * then exits 1).
 */
export async function startServices(config: Config, log: ProcessLog): Promise<{ store: Store; tracing: Tracing | undefined } | undefined> {
  const [{ createStore }, { startTracing }] = await Promise.all([import('./store/index.js'), import('./tracing/index.js')]);
  let store: Store | undefined;
  try {
    store = createStore(config.store, log.logger);
    return { store, tracing: await startTracing(config.tracing) };
  } catch (err) {
    logStartFailure(log.logger, err);
    await store?.close().catch(() => undefined);
    await flushLog(log.destination);
    return undefined;
  }
}
