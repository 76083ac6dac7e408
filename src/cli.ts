#!/usr/bin/env node
/**
 * Command line (CONTRACT.md §1):
 *   mcp-resume-gateway [--config FILE]               run the gateway
 *   mcp-resume-gateway check-config [--config FILE]  validate, exit 0 or 1 with one line per problem
 *   mcp-resume-gateway explain CURSOR [--session ID] [--json] [--config FILE]
 *                                                    why a resumption with CURSOR gets what it gets
 *   mcp-resume-gateway --version | --help
 * The file defaults to $MCP_GATEWAY_CONFIG, else config/gateway.yaml.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import cluster from 'node:cluster';
import { parseArgs } from 'node:util';
import { ConfigError, configFileFrom, loadConfig } from './config/load.js';
import type { Config } from './config/schema.js';
import { workerCount } from './workers/count.js';
import { packageVersion } from './version.js';

// The gateway itself (fastify, the store clients, metrics) and explain are loaded by the commands
// that use them: --version, --help, usage errors and check-config do not wait for them.

const USAGE = `usage: mcp-resume-gateway [check-config] [--config FILE]
       mcp-resume-gateway explain CURSOR [--session ID] [--json] [--config FILE]
  -c, --config FILE   configuration file (default: $MCP_GATEWAY_CONFIG, else config/gateway.yaml)
  -s, --session ID    explain: the session the cursor is resumed in (its Mcp-Session-Id)
      --json          explain: one JSON document instead of text
  -v, --version       print the version and exit
  -h, --help          print this and exit`;

async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: {
        config: { type: 'string', short: 'c' },
        session: { type: 'string', short: 's' },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean', short: 'v' },
      },
      allowPositionals: true,
    });
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }
  const [command, ...extra] = parsed.positionals;
  if (parsed.values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (parsed.values.version) {
    process.stdout.write(`${packageVersion()}\n`);
    return 0;
  }
  const explaining = command === 'explain';
  if ((command !== undefined && command !== 'check-config' && !explaining) || extra.length > (explaining ? 1 : 0)) {
    process.stderr.write(`unknown command: ${parsed.positionals.join(' ')}\n${USAGE}\n`);
    return 2;
  }
  const explainer = explaining ? await import('./explain-command.js') : undefined;
  if (explainer !== undefined && extra.length !== 1) {
    process.stderr.write(`explain needs the cursor (a Last-Event-ID value)\n${USAGE}\n`);
    return explainer.EXPLAIN_EXIT.usage;
  }
  if (!explaining && (parsed.values.session !== undefined || parsed.values.json)) {
    process.stderr.write(`--session and --json belong to explain\n${USAGE}\n`);
    return 2;
  }
  const file = configFileFrom(parsed.values.config, process.env);
  let config: Config;
  try {
    config = loadConfig(file);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    const unnamed = parsed.values.config === undefined && !process.env['MCP_GATEWAY_CONFIG'];
    const problems = unnamed && !existsSync(file) ? [noDefaultFile(file)] : err.problems;
    for (const problem of problems) process.stderr.write(`${problem}\n`);
    return explainer !== undefined ? explainer.EXPLAIN_EXIT.usage : 1;
  }
  if (explainer !== undefined) return explainer.explainCommand(config, extra[0]!, parsed.values.session, parsed.values.json === true);
  if (command === 'check-config') {
    const workers = workerCount(config);
    const said = config.workers === 1 ? '' : `, workers ${workers.count}${workers.note ? `: ${workers.note}` : ''}`;
    process.stdout.write(`${file}: ok (${config.replicas.length} replicas, store ${config.store.type}${said})\n`);
    return 0;
  }
  return run(config, file);
}

/** Nobody named a file and the default is not there: say where it was looked for and how to name one. */
function noDefaultFile(file: string): string {
  return `no configuration file: ${resolve(file)} does not exist (the default, ${file} in the working directory); name one with --config FILE or MCP_GATEWAY_CONFIG=FILE`;
}

async function run(config: Config, file: string): Promise<number> {
  const [{ Registry }, { logReload, logStartFailure, processLog, readForReload, startServices, stopOnSignals }, { flushLog, redactUrl }, { buildServer }, { stopTracing }] =
    await Promise.all([import('prom-client'), import('./lifecycle.js'), import('./logger.js'), import('./server.js'), import('./tracing/index.js')]);
  const log = processLog(config);
  const { logger, destination, secrets } = log;
  const workers = workerCount(config);
  if (workers.note) logger.info({ workers: config.workers, running: workers.count }, workers.note);
  if (workers.count > 1) {
    const { runPrimary } = await import('./workers/primary.js');
    return runPrimary({ config, file, count: workers.count, logger, destination, secrets });
  }
  const services = await startServices(config, log);
  if (services === undefined) return 1;
  const { store, tracing } = services;
  const gateway = buildServer(config, { store, registry: new Registry(), logger, secrets, tracing });
  logger.info({ file, store: config.store.type, storeUrl: config.store.type === 'redis' ? redactUrl(config.store.url) : undefined }, 'configuration loaded');

  process.on('SIGHUP', () => {
    const next = readForReload(file, logger, gateway.metrics.configReloads);
    if (next === undefined) return;
    secrets.addConfig(next);
    const plan = gateway.reconfigure(next);
    gateway.metrics.configReloads.inc({ result: plan.result });
    logReload(logger, file, plan);
  });
  const stopped = stopOnSignals(['SIGTERM', 'SIGINT'], logger, () => gateway.close().then(() => stopTracing(tracing, logger)));

  try {
    await gateway.listen();
  } catch (err) {
    logStartFailure(logger, err);
    await gateway.close().catch(() => undefined);
    await flushLog(destination);
    return 1;
  }
  const code = await stopped;
  await flushLog(destination);
  return code;
}

// A worker (workers > 1) is this program forked by its primary, which sends it its configuration.
(cluster.isWorker ? import('./workers/worker.js').then(({ runWorker }) => runWorker()) : main(process.argv.slice(2))).then(
  (code) => {
    process.exitCode = code;
    // Listeners and timers are closed by now; exit does not wait for stray keep-alive sockets.
    setImmediate(() => process.exit(code)).unref();
  },
  (err: unknown) => {
    process.stderr.write(`fatal: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
