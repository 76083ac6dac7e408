#!/usr/bin/env node
/**
 * `npm run demo`: the demo replicas and one gateway in this process, then a short scripted session
 * through the gateway with the real SDK client, told in plain text. Nothing else needs to run. With
 * the journal on, the replicas keep no event log, a second gateway instance shares the first one's
 * store, and the script goes on to cut a tool call and a GET stream and continue each through the
 * other instance (journal.ts).
 */
import { parseArgs } from 'node:util';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { LATEST_PROTOCOL_VERSION, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { Registry } from 'prom-client';
// The gateway as this repository builds it (npm run build): demo/dist/ and dist/ sit side by side.
import { ConfigError, DEFAULT_CONFIG_FILE, loadConfig } from '../../dist/config/load.js';
import type { Config } from '../../dist/config/schema.js';
import { createLogger } from '../../dist/logger.js';
import { buildServer, type Gateway } from '../../dist/server.js';
import { createStore } from '../../dist/store/index.js';
import type { Store } from '../../dist/store/types.js';
import { journalScript } from './journal.js';
import { startReplica, type Replica } from './replica.js';
import { CALL_TIMEOUT_MS, callText, connectSession, rawPost, say, textOf, within, type Session } from './session.js';

const USAGE = `usage: npm run demo -- [options]        (or: node demo/dist/run.js [options])
  --config FILE       gateway configuration (default: ${DEFAULT_CONFIG_FILE}); a demo replica is
                      started in this process for each replica it lists, at that replica's URL
  --port-base N       put the replicas on ports N+1, N+2, ... instead of the ports in their URLs
  --listen-port N     port of the MCP endpoint instead of listen.port (0: any free port)
  --admin-port N      port of the admin listener instead of admin.port (0: any free port)
  --exit              run the scripted session, then stop everything and exit (for CI)
  --verbose           gateway logs at the configured level (default: warnings only)
  -h, --help          this text`;

/** Bounds of the script's waits for streams, beside CALL_TIMEOUT_MS for calls. */
const GET_STREAM_TIMEOUT_MS = 5_000;
const NOTIFICATIONS_TIMEOUT_MS = 5_000;

/** A problem the user can fix: printed as one line, without a stack. */
class DemoError extends Error {}

interface Options {
  config: string;
  portBase: number | undefined;
  listenPort: number | undefined;
  adminPort: number | undefined;
  exit: boolean;
  verbose: boolean;
}

interface Demo {
  replicas: Replica[];
  gateway: Gateway;
  mcpUrl: string;
  adminUrl: string;
  /** With the journal on: a second gateway instance on the same store, and the replicas keep no log. */
  second: { gateway: Gateway; mcpUrl: string; adminUrl: string } | undefined;
  path: string;
  close(): Promise<void>;
}

// `npm run demo | head` closes the pipe early: that is the reader's choice, not a failure.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(0);
  throw err;
});

async function main(argv: string[]): Promise<number> {
  const options = parseOptions(argv);
  if (options === 'help') {
    say(USAGE);
    return 0;
  }
  const config = demoConfig(loadConfig(options.config), options);
  const demo = await start(config, options.config);
  process.once('SIGINT', () => stop(demo));
  process.once('SIGTERM', () => stop(demo));

  printWhere(demo);
  try {
    await script(demo.mcpUrl, demo.adminUrl);
    if (demo.second) {
      await journalScript({ name: 'A', mcpUrl: demo.mcpUrl, adminUrl: demo.adminUrl }, { name: 'B', ...demo.second }, demo.replicas, demo.path);
    }
  } catch (err) {
    process.stderr.write(`demo: the scripted session failed: ${err instanceof Error ? err.message : String(err)}\n`);
    await demo.close();
    return 1;
  }
  if (options.exit) {
    await demo.close();
    return 0;
  }
  printTryIt(demo.mcpUrl);
  return new Promise<number>(() => undefined);
}

function parseOptions(argv: string[]): Options | 'help' {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        config: { type: 'string', short: 'c', default: DEFAULT_CONFIG_FILE },
        'port-base': { type: 'string' },
        'listen-port': { type: 'string' },
        'admin-port': { type: 'string' },
        exit: { type: 'boolean', default: false },
        verbose: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }));
  } catch (err) {
    throw new DemoError(`${(err as Error).message}\n${USAGE}`);
  }
  if (values.help) return 'help';
  const port = (flag: string, value: string | undefined, max = 65535) => {
    if (value === undefined) return undefined;
    const n = Number(value);
    if (!/^\d+$/.test(value) || n > max) throw new DemoError(`--${flag} ${value}: expected a port number (0-${max})`);
    return n;
  };
  return {
    config: values.config,
    portBase: port('port-base', values['port-base'], 65535 - 9),
    listenPort: port('listen-port', values['listen-port']),
    adminPort: port('admin-port', values['admin-port']),
    exit: values.exit,
    verbose: values.verbose,
  };
}

/** The loaded configuration with the flags applied (the loaded one is frozen). */
function demoConfig(loaded: Config, options: Options): Config {
  const { portBase } = options;
  return {
    ...loaded,
    listen: { ...loaded.listen, port: options.listenPort ?? loaded.listen.port },
    admin: { ...loaded.admin, port: options.adminPort ?? loaded.admin.port },
    replicas:
      portBase === undefined
        ? loaded.replicas
        : loaded.replicas.map((r, i) => {
            const url = new URL(r.url);
            url.port = String(portBase + i + 1);
            return { id: r.id, url: url.toString() };
          }),
    // The gateway's JSON lines would drown the story told here.
    log: options.verbose ? loaded.log : { level: 'warn', requests: false },
  };
}

/**
 * Replicas first, so that the gateway finds them up; whatever started is closed on failure. With the
 * journal on, the replicas keep no event log, and a second gateway instance shares the first one's
 * store (one store object in this process: the memory store too), on ports of its own.
 */
async function start(config: Config, file: string): Promise<Demo> {
  const replicas: Replica[] = [];
  const journal = config.resumption.journal.enabled;
  const logger = createLogger(config.log.level);
  const stores = sharedStore(createStore(config.store, logger), journal ? 2 : 1);
  const gateway = buildServer(config, { store: stores[0]!, registry: new Registry(), logger });
  const secondConfig = { ...config, listen: { ...config.listen, port: 0 }, admin: { ...config.admin, port: 0 } };
  const second = journal ? buildServer(secondConfig, { store: stores[1]!, registry: new Registry(), logger }) : undefined;
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      await Promise.all([gateway.close(), second?.close()]);
      await Promise.all(replicas.map((r) => r.close()));
    })());
  try {
    for (const [i, r] of config.replicas.entries()) {
      const url = new URL(r.url);
      if (url.protocol !== 'http:' || url.pathname !== '/mcp') {
        throw new DemoError(`replica ${r.id}: the demo serves its replicas at http://HOST:PORT/mcp, not at ${r.url}`);
      }
      const port = Number(url.port || 80);
      const fix = `--port-base N (replicas on N+1..N+${config.replicas.length}), or the replica URLs in ${file}`;
      const host = url.hostname.replace(/^\[|\]$/g, '');
      replicas[i] = await startReplica({ id: r.id, host, port, eventStore: !journal }).catch((err: unknown) => {
        throw listenProblem(err, port, `replica ${r.id}`, fix);
      });
    }
    const { mcpUrl, adminUrl } = await gateway.listen().catch((err: unknown) => {
      const admin = (err as { port?: number }).port === config.admin.port && config.admin.port !== config.listen.port;
      throw admin
        ? listenProblem(err, config.admin.port, 'the admin listener', `--admin-port N, or admin.port in ${file}`)
        : listenProblem(err, config.listen.port, 'the MCP endpoint', `--listen-port N, or listen.port in ${file}`);
    });
    const secondUrls = await second?.listen();
    return {
      replicas,
      gateway,
      mcpUrl: `${mcpUrl}${config.path}`,
      adminUrl,
      second: second && secondUrls && { gateway: second, mcpUrl: `${secondUrls.mcpUrl}${config.path}`, adminUrl: secondUrls.adminUrl },
      path: config.path,
      close,
    };
  } catch (err) {
    await close().catch(() => undefined);
    throw err;
  }
}

/** `users` views of one store; each closes it only once every view has been closed. */
function sharedStore(store: Store, users: number): Store[] {
  let open = users;
  const close = async () => {
    if (--open === 0) await store.close();
  };
  return Array.from({ length: users }, () => {
    let closed = false;
    const closeOnce = () => (closed ? Promise.resolve() : ((closed = true), close()));
    return new Proxy(store, { get: (target, key) => (key === 'close' ? closeOnce : Reflect.get(target, key)) });
  });
}

function listenProblem(err: unknown, port: number, what: string, fix: string): unknown {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'EADDRINUSE') {
    return new DemoError(`port ${port} (${what}) is already in use: stop whatever holds it (ss -ltnp 'sport = :${port}' names it) or use ${fix}`);
  }
  if (code === 'EACCES' || code === 'EADDRNOTAVAIL') {
    return new DemoError(`cannot listen on port ${port} (${what}): ${code}; use ${fix}`);
  }
  return err;
}

function stop(demo: Demo): void {
  say('\nstopping the gateway and the replicas ...');
  demo.close().then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`demo: error while stopping: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exit(1);
    },
  );
}

function printWhere(demo: Demo): void {
  say('mcp-resume-gateway demo');
  say();
  say(`  MCP endpoint   ${demo.mcpUrl}`);
  say(`  metrics        ${demo.adminUrl}/metrics`);
  say(`  health         ${demo.adminUrl}/healthz`);
  say(`  readiness      ${demo.adminUrl}/readyz`);
  for (const [i, r] of demo.replicas.entries()) say(`  ${i === 0 ? 'replicas ' : '         '}      ${r.id}  ${r.url}`);
  if (demo.second) {
    say(`  journal        on (resumption.journal.enabled); the replicas keep no event log (--no-event-store)`);
    say(`  instance B     ${demo.second.mcpUrl}, metrics ${demo.second.adminUrl}/metrics: a second gateway on the same store`);
  } else {
    say(`  journal        off (resumption.journal.enabled: false): the replicas keep an event log and replay`);
  }
  say();
}

/** The scripted session: each step prints what a user of the gateway would see. */
async function script(mcpUrl: string, adminUrl: string): Promise<void> {
  say('Scripted session through the gateway (MCP SDK client):');
  const session = await initialize(mcpUrl);
  try {
    await counterTwice(session.client);
    await progress(session.client);
    await emitOnGetStream(session);
    await staleLastEventId(mcpUrl, session);
    await showMetrics(adminUrl);
    await endSession(mcpUrl, session);
  } finally {
    await session.client.close();
  }
}

async function initialize(mcpUrl: string): Promise<Session> {
  const session = await connectSession(mcpUrl);
  say(`  1. initialize       session ${session.sessionId}, owned by replica ${session.owner} (tool whoami)`);
  return session;
}

async function counterTwice(client: Client): Promise<void> {
  const first = await callText(client, 'counter');
  const second = await callText(client, 'counter');
  say(`  2. counter, twice   ${first}, then ${second} (a side effect on the owner)`);
}

async function progress(client: Client): Promise<void> {
  say('  3. progress {steps: 3, intervalMs: 200}, notifications on the POST stream:');
  const started = performance.now();
  const result = await client.callTool({ name: 'progress', arguments: { steps: 3, intervalMs: 200 } }, undefined, {
    timeout: CALL_TIMEOUT_MS,
    onprogress: (p) => say(`       progress ${p.progress}/${p.total}   +${Math.round(performance.now() - started)} ms`),
  });
  say(`       result: ${textOf(result)}`);
}

async function emitOnGetStream(session: Session): Promise<void> {
  // A notification for a GET stream that is not attached yet is stored, not delivered: wait for it.
  const status = await within(GET_STREAM_TIMEOUT_MS, () => 'the standalone GET stream was not answered', session.getStream);
  if (status !== 200) throw new Error(`the standalone GET stream got status ${status}`);
  say('  4. emit {count: 3, intervalMs: 100}, logging notifications on the standalone GET stream:');
  const started = performance.now();
  let received = 0;
  const all = new Promise<void>((resolve) => {
    session.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
      const data = n.params.data as { seq?: number; replica?: string };
      say(`       notifications/message seq ${data.seq} from ${data.replica}   +${Math.round(performance.now() - started)} ms`);
      if (++received === 3) resolve();
    });
  });
  const result = await session.client.callTool({ name: 'emit', arguments: { count: 3, intervalMs: 100 } }, undefined, {
    timeout: CALL_TIMEOUT_MS,
  });
  await within(NOTIFICATIONS_TIMEOUT_MS, () => `only ${received} of 3 logging notifications arrived`, all);
  say(`       result: ${textOf(result)}`);
}

async function staleLastEventId(mcpUrl: string, session: Session): Promise<void> {
  // Resumption is only ever a GET (CONTRACT.md §5): on a POST the header is dropped, the call runs.
  const stale = 'stale-event-42';
  const res = await rawPost(mcpUrl, session, { 'last-event-id': stale }, callWhoami(7));
  const answer = await res.text();
  const resumption = res.headers.get('mcp-resumption');
  const reason = res.headers.get('mcp-resumption-reason');
  say(`  5. POST tools/call whoami with a stale Last-Event-ID: ${stale}`);
  say(`       HTTP ${res.status}, Mcp-Resumption: ${resumption}, Mcp-Resumption-Reason: ${reason}`);
  if (resumption !== 'stripped') throw new Error(`expected Mcp-Resumption: stripped, got ${resumption}`);
  const replica = responseOf(answer, 7)?.result?.structuredContent?.replica;
  if (replica !== session.owner) throw new Error(`the call did not run on ${session.owner}: ${answer}`);
  say(`       the call still ran: whoami answered ${replica}`);
}

async function showMetrics(adminUrl: string): Promise<void> {
  const text = await (await fetch(`${adminUrl}/metrics`, { signal: AbortSignal.timeout(CALL_TIMEOUT_MS) })).text();
  say(`  6. ${adminUrl}/metrics (excerpt):`);
  for (const line of text.split('\n')) {
    if (/^mcp_gateway_(requests|resumptions)_total\{/.test(line)) say(`       ${line}`);
  }
}

async function endSession(mcpUrl: string, session: Session): Promise<void> {
  await session.transport.terminateSession();
  // Closed at once, so that the client does not try to resume the GET stream the DELETE ended.
  await session.client.close();
  say(`  7. DELETE (transport.terminateSession())   session ${session.sessionId} ended`);
  const res = await rawPost(mcpUrl, session, {}, callWhoami(8));
  const body = await res.text();
  say(`       a further POST with that session id: HTTP ${res.status} ${body}`);
  if (res.status !== 404) throw new Error(`expected 404 after DELETE, got ${res.status}`);
}

function printTryIt(mcpUrl: string): void {
  const initialize = JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: LATEST_PROTOCOL_VERSION, capabilities: {}, clientInfo: { name: 'curl', version: '0' } },
  });
  say();
  say('The gateway and the replicas are still running; Ctrl-C stops them. Try it:');
  say(`  curl -sS -D - ${mcpUrl} \\`);
  say(`    -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \\`);
  say(`    -d '${initialize}'`);
  say('  then send the Mcp-Session-Id header it returns with every further request.');
}

function callWhoami(id: number) {
  return { jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'whoami', arguments: {} } };
}

type RpcResponse = { id?: unknown; result?: { structuredContent?: { replica?: string } } };

/** The JSON-RPC response with this id in an SSE body (or a plain JSON one). */
function responseOf(body: string, id: number): RpcResponse | undefined {
  const payloads = body.trimStart().startsWith('{')
    ? [body]
    : body.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5));
  for (const payload of payloads) {
    try {
      const message = JSON.parse(payload) as RpcResponse;
      if (message.id === id) return message;
    } catch {
      // Not JSON: not the response looked for.
    }
  }
  return undefined;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
    // Everything is closed by now; exit does not wait for stray keep-alive sockets.
    setImmediate(() => process.exit(code)).unref();
  },
  (err: unknown) => {
    if (err instanceof ConfigError) for (const problem of err.problems) process.stderr.write(`${problem}\n`);
    else if (err instanceof DemoError) process.stderr.write(`demo: ${err.message}\n`);
    else process.stderr.write(`demo: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
