/**
 * The command line as an operator runs it (CONTRACT.md §1): a real `node build/src/cli.js` process,
 * its exit code, its stderr for problems and its JSON log lines on stdout.
 */
import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { startReplica } from '../demo/src/replica.js';
import { freePort, outputOf, READY_DEADLINE_MS, spawnProcess, type Output } from './helpers/processes.js';

const CLI = fileURLToPath(new URL('../src/cli.js', import.meta.url));
/**
 * Bounds the wait for a log line of the gateway (its start: loading the gateway has taken over
 * 10 s on a loaded machine); reaching it is a failure, never a wait.
 */
const START_BOUND_MS = READY_DEADLINE_MS;
/** Bounds for events that come in milliseconds; reaching one is a failure, never a wait. */
const EXIT_BOUND_MS = 10_000;

// About twenty processes that each load the whole gateway: on a loaded machine (seconds per start)
// the default file timeout would cut the run, not a bound of the gateway.
t.setTimeout(300_000);

const CURSOR_SECRET = 'cursor-secret-0123456789-abcdefghijklmnop';
const REDIS_PASSWORD = 's3cretpw';
const AUTH_TOKEN = 'Bearer client-token-must-not-be-logged';

const BROKEN = `listen:
  host: 127.0.0.1
  port: PORT
  bogus: 1
store:
  type: mongo
replicas:
  - id: r1
    url: ftp://x
log: { level: loud }
`;
const BROKEN_PROBLEMS = (file: string) => [
  `${file}:4: listen.bogus: is not a known key`,
  `${file}:6: store.type: expected one of memory, redis`,
  `${file}:9: replicas[0].url: expected a string matching ^https?://`,
  `${file}:10: log.level: expected one of fatal, error, warn, info, debug, trace, silent`,
];

/** The environment of the test without the variables the gateway reads. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env, ...extra };
  if (!('MCP_GATEWAY_CONFIG' in extra)) delete env['MCP_GATEWAY_CONFIG'];
  delete env['MCP_GATEWAY_CURSOR_SECRET'];
  delete env['MCP_GATEWAY_REDIS_URL'];
  return env;
}

function start(args: string[], cwd: string, env: Record<string, string> = {}): ChildProcessWithoutNullStreams {
  // Killed when the run ends, however it ends.
  return spawnProcess(process.execPath, [CLI, ...args], { cwd, env: cleanEnv(env), stdio: 'pipe' }).child as ChildProcessWithoutNullStreams;
}

const run = (args: string[], cwd: string, env: Record<string, string> = {}) => outputOf(start(args, cwd, env));

const lines = (text: string) => text.split('\n').filter((l) => l !== '');


/** Whether the port is bound by some process: binding it ourselves fails. */
function portTaken(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createServer().listen(port, '127.0.0.1');
    socket.once('listening', () => socket.close(() => resolve(false)));
    socket.once('error', () => resolve(true));
  });
}

// Each case runs its own processes on files it only reads: four at a time.
t.test('check-config', { jobs: 4 }, async (t) => {
  const dir = t.testdir({
    'good.yaml': 'replicas:\n  - id: r1\n    url: http://127.0.0.1:3001/mcp\n  - id: r2\n    url: http://127.0.0.1:3002/mcp\n',
    'broken.yaml': BROKEN.replace('PORT', '8080'),
    config: { 'gateway.yaml': 'replicas:\n  - id: d\n    url: http://127.0.0.1:3009/mcp\n' },
  });

  t.test('a valid file: exit 0 and an ok line', async (t) => {
    const r = await run(['check-config', '--config', 'good.yaml'], dir);
    t.equal(r.code, 0, r.stderr);
    t.equal(r.stdout, 'good.yaml: ok (2 replicas, store memory)\n');
    t.equal(r.stderr, '');
  });

  t.test('a file with mistakes: exit 1, one line per problem with its key path and line', async (t) => {
    const r = await run(['check-config', '--config', 'broken.yaml'], dir);
    t.equal(r.code, 1);
    t.strictSame(lines(r.stderr), BROKEN_PROBLEMS('broken.yaml'));
    t.equal(r.stdout, '');
  });

  t.test('MCP_GATEWAY_CONFIG names the file; --config wins over it', async (t) => {
    const fromEnv = await run(['check-config'], dir, { MCP_GATEWAY_CONFIG: 'broken.yaml' });
    t.equal(fromEnv.code, 1);
    t.strictSame(lines(fromEnv.stderr), BROKEN_PROBLEMS('broken.yaml'));

    const flagWins = await run(['check-config', '--config', 'good.yaml'], dir, { MCP_GATEWAY_CONFIG: 'broken.yaml' });
    t.equal(flagWins.code, 0, flagWins.stderr);
  });

  t.test('without either, config/gateway.yaml', async (t) => {
    const r = await run(['check-config'], dir);
    t.equal(r.code, 0, r.stderr);
    t.equal(r.stdout, 'config/gateway.yaml: ok (1 replicas, store memory)\n');
  });

  t.test('a missing file: exit 1, saying so', async (t) => {
    const r = await run(['check-config', '-c', 'nope.yaml'], dir);
    t.equal(r.code, 1);
    t.strictSame(lines(r.stderr), ['nope.yaml: cannot read: no such file']);
  });

  t.test('unknown commands and flags: exit 2 with usage', async (t) => {
    const cases = [['serve'], ['check-config', 'extra'], ['--bogus'], ['--config']];
    const results = await Promise.all(cases.map((args) => run(args, dir)));
    for (const [i, args] of cases.entries()) {
      const r = results[i] as Output;
      t.equal(r.code, 2, args.join(' '));
      t.match(r.stderr, /^usage: mcp-resume-gateway \[check-config\] \[--config FILE\]$/m, args.join(' '));
      t.equal(r.stdout, '', args.join(' '));
    }
  });

  t.test('--help: exit 0 with usage on stdout, naming every option', async (t) => {
    const cases = [['--help'], ['-h'], ['check-config', '--help']];
    const results = await Promise.all(cases.map((args) => run(args, dir)));
    for (const [i, args] of cases.entries()) {
      const r = results[i] as Output;
      t.equal(r.code, 0, args.join(' '));
      t.match(r.stdout, /^usage: mcp-resume-gateway /, args.join(' '));
      for (const option of ['--config FILE', '--version', '--help']) t.match(r.stdout, option, `${args.join(' ')} lists ${option}`);
      t.equal(r.stderr, '', args.join(' '));
    }
  });

  t.test('--version: exit 0 with the package version on stdout', async (t) => {
    const manifest = JSON.parse(readFileSync(fileURLToPath(new URL('../../package.json', import.meta.url)), 'utf8')) as { version: string };
    const cases = [['--version'], ['-v']];
    const results = await Promise.all(cases.map((args) => run(args, dir)));
    for (const [i, args] of cases.entries()) {
      const r = results[i] as Output;
      t.equal(r.code, 0, args.join(' '));
      t.equal(r.stdout, `${manifest.version}\n`, args.join(' '));
      t.equal(r.stderr, '', args.join(' '));
    }
  });
});

t.test('no file named and no config/gateway.yaml: exit 1, naming where it looked and how to name one', async (t) => {
  const dir = t.testdir({});
  const expected = `no configuration file: ${join(dir, 'config', 'gateway.yaml')} does not exist (the default, config/gateway.yaml in the working directory); name one with --config FILE or MCP_GATEWAY_CONFIG=FILE`;
  const cases = [[], ['check-config']];
  // A file that was named and is missing is reported as such, under the name it was given.
  const [named, ...results] = await Promise.all([run([], dir, { MCP_GATEWAY_CONFIG: 'elsewhere.yaml' }), ...cases.map((args) => run(args, dir))]);
  for (const [i, args] of cases.entries()) {
    const r = results[i] as Output;
    t.equal(r.code, 1, args.join(' ') || 'run');
    t.strictSame(lines(r.stderr), [expected], args.join(' ') || 'run');
    t.equal(r.stdout, '', args.join(' ') || 'run');
  }
  t.equal(named.code, 1);
  t.strictSame(lines(named.stderr), ['elsewhere.yaml: cannot read: no such file']);
});

t.test('the gateway does not start on a file with mistakes', async (t) => {
  const port = await freePort();
  const dir = t.testdir({ 'broken.yaml': BROKEN.replace('PORT', String(port)) });
  const child = start(['--config', 'broken.yaml'], dir);
  // Would the process bind its port, the port would be taken while it runs: watch it until exit.
  const done = outputOf(child);
  let taken = false;
  let exited = false;
  void done.then(() => (exited = true));
  while (!exited) {
    taken ||= await portTaken(port);
    // listen and close complete on the next tick: give the child's exit its turn in the event loop.
    await new Promise((resolve) => setImmediate(resolve));
  }

  const r = await done;
  t.equal(r.code, 1);
  t.strictSame(lines(r.stderr), BROKEN_PROBLEMS('broken.yaml'));
  t.equal(r.stdout, '', 'no log line: it never got as far as loading the store or listening');
  t.notOk(taken, 'the listen port was never taken');
});

type LogLine = Record<string, unknown>;

/** stdout of a running gateway as JSON log lines, and a way to await the line that says something. */
function logLines(child: ChildProcessWithoutNullStreams) {
  const raw: string[] = [];
  const parsed: LogLine[] = [];
  /** Lines before this index were consumed by an earlier next(). */
  let cursor = 0;
  let waiter: { msg: string; resolve: () => void } | undefined;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  createInterface({ input: child.stdout }).on('line', (line) => {
    raw.push(line);
    parsed.push(JSON.parse(line) as LogLine);
    waiter?.resolve();
  });
  const says = (l: LogLine, msg: string) => typeof l['msg'] === 'string' && l['msg'].includes(msg);

  return {
    raw,
    exited,
    /** The first line after the ones already consumed whose msg includes `msg`. */
    next(msg: string): Promise<LogLine> {
      return new Promise((resolve, reject) => {
        const check = () => {
          const at = parsed.findIndex((l, i) => i >= cursor && says(l, msg));
          if (at < 0) return false;
          cursor = at + 1;
          waiter = undefined;
          clearTimeout(bound);
          resolve(parsed[at] as LogLine);
          return true;
        };
        const bound = setTimeout(() => reject(new Error(`no log line "${msg}" within ${START_BOUND_MS} ms:\n${raw.join('\n')}`)), START_BOUND_MS);
        if (check()) return;
        waiter = { msg, resolve: () => void check() };
        void exited.then((exit) => {
          if (!check()) reject(new Error(`exited ${JSON.stringify(exit)} before logging "${msg}":\n${raw.join('\n')}`));
        });
      });
    },
  };
}

t.test('a real gateway: listens, serves admin, reloads on SIGHUP, stops on SIGTERM, logs no secret', async (t) => {
  const r1 = await startReplica({ id: 'r1' });
  t.teardown(() => r1.close());
  const r2 = await startReplica({ id: 'r2' });
  t.teardown(() => r2.close());

  const good = (replicas: { id: string; url: string }[]) =>
    [
      'listen: { host: 127.0.0.1, port: 0 }',
      'admin: { host: 127.0.0.1, port: 0 }',
      `store: { type: memory, url: "redis://:${REDIS_PASSWORD}@127.0.0.1:1/" }`,
      'replicas:',
      ...replicas.map((r) => `  - { id: ${r.id}, url: "${r.url}" }`),
      `cursor: { secret: "${CURSOR_SECRET}" }`,
      'log: { level: debug }',
      '',
    ].join('\n');
  const dir = t.testdir({ 'gateway.yaml': good([r1]) });
  const file = join(dir, 'gateway.yaml');

  const child = start(['--config', 'gateway.yaml'], dir);
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const log = logLines(child);

  const listeningLine = await log.next('gateway listening');
  const admin = String(listeningLine['admin']);
  const mcp = String(listeningLine['mcp']);
  t.match(admin, /^http:\/\/127\.0\.0\.1:\d+$/);
  t.match(mcp, /^http:\/\/127\.0\.0\.1:\d+\/mcp$/);

  t.equal((await fetch(`${admin}/healthz`)).status, 200, '/healthz');
  const ready = await fetch(`${admin}/readyz`);
  t.equal(ready.status, 200, '/readyz');
  t.strictSame(await ready.json(), { ready: true });

  // A session through the gateway, with an Authorization header that must not reach the logs.
  const init = await fetch(mcp, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: AUTH_TOKEN },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'cli-test', version: '0' } },
    }),
  });
  t.equal(init.status, 200);
  t.ok(init.headers.get('mcp-session-id'), 'a session was bound');
  t.match(await init.text(), /"serverInfo"/);

  // A file that does not validate leaves the running configuration in place.
  writeFileSync(file, good([r1, r2]).replace('log: { level: debug }', 'log: { level: loud }'));
  child.kill('SIGHUP');
  const refused = await log.next('reload refused');
  t.equal(refused['level'], 50, 'logged as an error');
  t.strictSame(refused['problems'], ['gateway.yaml:8: log.level: expected one of fatal, error, warn, info, debug, trace, silent']);
  t.equal((await fetch(`${admin}/healthz`)).status, 200, 'still serving');
  t.equal((await fetch(`${admin}/readyz`)).status, 200, 'still ready');

  writeFileSync(file, good([r1, r2]));
  child.kill('SIGHUP');
  const reloaded = await log.next('configuration reloaded');
  t.strictSame(reloaded['replicas'], ['r1', 'r2']);

  const stopping = Date.now();
  child.kill('SIGTERM');
  const bound = new Promise<'bound'>((resolve) => setTimeout(resolve, EXIT_BOUND_MS, 'bound').unref());
  const exit = await Promise.race([log.exited, bound]);
  t.not(exit, 'bound', `exits within ${EXIT_BOUND_MS} ms of SIGTERM`);
  t.strictSame(exit, { code: 0, signal: null }, `exit 0 (after ${Date.now() - stopping} ms); stderr: ${stderr}`);
  t.ok(log.raw.some((l) => l.includes('"stopping"')), 'logged that it stops');

  t.ok(log.raw.length >= 5, 'the secrets check had log lines to look at');
  for (const secret of [CURSOR_SECRET, REDIS_PASSWORD, AUTH_TOKEN, 'client-token-must-not-be-logged']) {
    const leaks = log.raw.filter((l) => l.includes(secret));
    t.strictSame(leaks, [], `no log line contains ${secret.slice(0, 12)}...`);
    t.notOk(stderr.includes(secret), `stderr does not contain ${secret.slice(0, 12)}...`);
  }
});
