/**
 * `npm run demo -- --exit` as CI runs it: the real command, in a child process, on free ports.
 * What is checked is what the user reads on the terminal.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { parse, stringify } from 'yaml';
import { spawnProcess } from '../helpers/processes.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
/** What `npm run demo` runs: the demo package's build, beside the gateway's dist/ (npm run build makes both). */
const RUN_JS = fileURLToPath(new URL('../../../demo/dist/run.js', import.meta.url));
const CONFIG = fileURLToPath(new URL('../../../config/gateway.yaml', import.meta.url));
/** A bound for a loaded machine: three replicas and two gateways start, then about 10 s of script. */
const DEMO_TIMEOUT_MS = 120_000;
t.setTimeout(4 * DEMO_TIMEOUT_MS);

interface Finished {
  code: number | null;
  stdout: string;
  stderr: string;
}

function runDemo(t: Test, args: string[], config = CONFIG): Promise<Finished> {
  const { child } = spawnProcess(process.execPath, [RUN_JS, '--config', config, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], t });
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

function listen(port: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
}

const close = (server: Server) => new Promise<void>((resolve) => server.close(() => resolve()));

async function freePort(): Promise<number> {
  const server = await listen(0);
  const { port } = server.address() as { port: number };
  await close(server);
  return port;
}

/** A base N with N+1..N+3 free: a free port from the kernel, then its two neighbours checked. */
async function freePortBase(): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const first = await freePort();
    if (first + 2 > 65535) continue;
    const held: Server[] = [];
    try {
      for (const port of [first, first + 1, first + 2]) held.push(await listen(port));
      return first - 1;
    } catch {
      // A neighbour is taken: try another.
    } finally {
      await Promise.all(held.map(close));
    }
  }
  throw new Error('no three consecutive free ports');
}

t.test('the demo runs its scripted session through the gateway and exits 0', { timeout: DEMO_TIMEOUT_MS }, async (t) => {
  const [portBase, listenPort, adminPort] = [await freePortBase(), await freePort(), await freePort()];
  const run = await runDemo(t, ['--exit', '--port-base', String(portBase), '--listen-port', String(listenPort), '--admin-port', String(adminPort)]);
  t.equal(run.code, 0, `exit code 0 (stderr: ${run.stderr})`);
  const out = run.stdout;
  t.match(out, `http://127.0.0.1:${listenPort}/mcp`, 'names the MCP endpoint');
  t.match(out, `http://127.0.0.1:${adminPort}/metrics`, 'names the metrics URL');
  for (const [i, id] of ['r1', 'r2', 'r3'].entries()) t.match(out, `${id}  http://127.0.0.1:${portBase + i + 1}/mcp`, `names replica ${id}`);
  t.equal(out.match(/progress [1-3]\/3 /g)?.length, 3, '3 progress notifications');
  t.equal(out.match(/notifications\/message seq [1-3] from r[1-3]/g)?.length, 3, '3 logging notifications');
  t.match(out, 'Mcp-Resumption: stripped', 'the stale Last-Event-ID on a POST was stripped');
  t.match(out, /mcp_gateway_resumptions_total\{outcome="stripped",reason="post_request"\} 1/, 'and counted');
  t.match(out, /HTTP 404 .*Session not found/, 'the session is gone after DELETE');
  t.notMatch(out, /"level":/, 'no gateway log line at the default level');

  // The journal at work (on by default): replicas without a log, the cut continued on instance B.
  t.match(out, 'the replicas keep no event log (--no-event-store)', 'says the replicas keep no log');
  t.match(out, /instance B +http:\/\/127\.0\.0\.1:\d+\/mcp/, 'names the second instance');
  const cutCall = out.slice(out.indexOf('  8. a cut tool call'), out.indexOf('  9. a cut GET stream'));
  t.equal(cutCall.match(/progress (\d+)\/10 /g)?.length, 10, 'the cut call: 10 progress notifications, each once');
  t.match(cutCall, /reconnects \(GET, Last-Event-ID\) through the relay to B: HTTP 200, Mcp-Resumption: continued/, 'continued through B');
  t.match(cutCall, 'result: done after 10 steps', 'with the result');
  t.match(cutCall, /ran the tool once \(1 call started, 1 answered\)/, 'the tool ran once');
  const cutGet = out.slice(out.indexOf('  9. a cut GET stream'));
  t.equal(cutGet.match(/notifications\/message seq [1-8] /g)?.length, 8, 'the cut GET stream: 8 events, each once');
  t.match(cutGet, /through the relay to B: HTTP 200, Mcp-Resumption: continued/, 'continued through B');
  t.match(cutGet, /mcp_gateway_continuations_total\{source="journal"\} [1-9]/, 'B counted continuations from the journal');
});

t.test('with the journal off: the replicas keep a log, one instance, no journal part', { timeout: DEMO_TIMEOUT_MS }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'gw-demo-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const config = join(dir, 'gateway.yaml');
  const loaded = parse(await readFile(CONFIG, 'utf8')) as { resumption: Record<string, unknown> };
  await writeFile(config, stringify({ ...loaded, resumption: { ...loaded.resumption, journal: { enabled: false } } }));
  const [portBase, listenPort, adminPort] = [await freePortBase(), await freePort(), await freePort()];
  const run = await runDemo(t, ['--exit', '--port-base', String(portBase), '--listen-port', String(listenPort), '--admin-port', String(adminPort)], config);
  t.equal(run.code, 0, `exit code 0 (stderr: ${run.stderr})`);
  t.match(run.stdout, 'journal        off (resumption.journal.enabled: false)', 'says the journal is off');
  t.notMatch(run.stdout, 'instance B', 'no second instance');
  t.notMatch(run.stdout, 'The journal at work', 'no journal part');
  t.equal(run.stdout.match(/progress [1-3]\/3 /g)?.length, 3, 'the scripted session as before');
});

t.test('a port in use: one line naming the port and the flag to change, exit 1', { timeout: DEMO_TIMEOUT_MS }, async (t) => {
  const [portBase, adminPort] = [await freePortBase(), await freePort()];
  const taken = await listen(0);
  t.teardown(() => close(taken));
  const listenPort = (taken.address() as { port: number }).port;
  const run = await runDemo(t, ['--exit', '--port-base', String(portBase), '--listen-port', String(listenPort), '--admin-port', String(adminPort)]);
  t.equal(run.code, 1, 'exit code 1');
  t.equal(run.stdout, '', 'nothing on stdout');
  const lines = run.stderr.trimEnd().split('\n');
  t.equal(lines.length, 1, `one line on stderr: ${run.stderr}`);
  t.match(lines[0], `port ${listenPort}`, 'it names the port');
  t.match(lines[0], '--listen-port', 'and the flag that changes it');
});
