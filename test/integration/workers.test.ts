/**
 * `workers: 2` on real processes: the CLI as the primary of two workers sharing one port and one
 * real redis-server, in front of demo replicas. Each new connection is accepted by one worker or
 * the other (the request log line names which); a session's requests reach its owner whichever
 * worker accepted them; a cursor issued through one worker continues through the other; the admin
 * listener speaks for both; signals reach both; a killed worker is replaced. A memory store with
 * two workers is refused.
 */
import { spawn } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { parse, stringify } from 'yaml';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { initializeBody, MCP_ACCEPT, PROTOCOL_VERSION, toolCallBody } from '../helpers/http.js';
import { outputOf, READY_DEADLINE_MS } from '../helpers/processes.js';
import { rawStreams } from '../helpers/raw-sse.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { scrapeMetric } from '../helpers/scrape.js';
import { spawnReplicas, type ReplicaProcess } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';

const CLI = fileURLToPath(new URL('../../src/cli.js', import.meta.url));

// Each test starts Redis, replicas and three gateway processes: give a loaded machine room.
t.setTimeout(600_000);

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A POST on a connection of its own, closed after: the cluster gives each connection to one worker. */
function postFresh(url: string, body: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(url, {
      method: 'POST',
      agent: false,
      headers: { 'content-type': 'application/json', accept: MCP_ACCEPT, 'mcp-protocol-version': PROTOCOL_VERSION, ...headers },
    });
    req.once('error', reject);
    req.once('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.once('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
    });
    req.end(body);
  });
}

async function sessionOn(url: string): Promise<string> {
  const init = await postFresh(url, initializeBody());
  const sessionId = init.headers['mcp-session-id'];
  if (init.status !== 200 || typeof sessionId !== 'string') throw new Error(`initialize answered ${init.status}`);
  const done = await postFresh(url, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), { 'mcp-session-id': sessionId });
  if (done.status !== 202) throw new Error(`notifications/initialized answered ${done.status}`);
  return sessionId;
}

/** The replica that answered whoami (its structured result). */
function replicaOf(answer: Answer): string {
  const match = /"structuredContent":\{"replica":"([^"]+)"\}/.exec(answer.body);
  if (answer.status !== 200 || !match) throw new Error(`whoami answered ${answer.status}: ${answer.body.slice(0, 200)}`);
  return match[1]!;
}

/**
 * Workers whose request lines name `session` by the fingerprint the admin listener gives for it:
 * each worker is an instance of its own, and all name a session alike.
 */
async function workersOf(gw: GatewayProcess, sessionId?: string): Promise<Set<unknown>> {
  const named = sessionId === undefined ? undefined : ((await (await fetch(`${gw.adminUrl}/debug/sessions/${sessionId}`)).json()) as { fingerprints: { current: string } }).fingerprints.current;
  const lines = gw.logs.filter((l) => l['msg'] === 'request' && (named === undefined || l['session'] === named));
  return new Set(lines.map((l) => l['worker']));
}

/** The workers relaying the session's open streams now (one entry per stream), from the primary's /debug. */
async function relayedBy(gw: GatewayProcess, sessionId: string): Promise<number[]> {
  const view = (await (await fetch(`${gw.adminUrl}/debug/sessions/${sessionId}`)).json()) as { openStreams: { here: { worker: number }[] } };
  return view.openStreams.here.map((s) => s.worker);
}

const listening = (gw: GatewayProcess) => gw.logs.find((l) => l['msg'] === 'gateway listening')!;

async function twoWorkers(t: Test, more: Record<string, unknown> = {}): Promise<{ gw: GatewayProcess; replicas: ReplicaProcess[] }> {
  const redis = await startRedisServer(t);
  const replicas = await spawnReplicas(t, 2);
  const gw = await startGatewayProcess(t, {
    workers: 2,
    store: { type: 'redis', url: redis.url },
    replicas: replicas.map((r) => ({ id: r.id, url: r.url })),
    log: { requests: true },
    ...more,
  });
  return { gw, replicas };
}

t.test('two workers on one port: every request of a session reaches its owner, whichever worker accepted it', async (t) => {
  const { gw } = await twoWorkers(t);
  const started = listening(gw);
  t.equal(started['workers'], 2, 'the primary says two workers listen');
  // Each worker logs from its own process: its line may reach the output after the primary's.
  await waitFor('both workers logged', bound(0), () => gw.logs.filter((l) => l['msg'] === 'worker listening').length >= 2);
  const instances = new Set(gw.logs.filter((l) => l['msg'] === 'worker listening').map((l) => l['instance']));
  t.equal(instances.size, 2, 'each worker is an instance of its own');

  const owners = new Map<string, string>();
  for (let i = 0; i < 4; i++) {
    const sessionId = await sessionOn(gw.url);
    for (let call = 0; call < 4; call++) {
      const replica = replicaOf(await postFresh(gw.url, toolCallBody('whoami', {}, call + 2), { 'mcp-session-id': sessionId }));
      if (!owners.has(sessionId)) owners.set(sessionId, replica);
      t.equal(replica, owners.get(sessionId), 'the owner answered');
    }
  }
  t.same(new Set(owners.values()), new Set(['r1', 'r2']), 'the sessions were spread over both replicas');
  await waitFor('the request lines', bound(0), () => gw.logs.filter((l) => l['msg'] === 'request').length >= 4 * 6);
  for (const sessionId of owners.keys()) t.same(await workersOf(gw, sessionId), new Set([1, 2]), 'requests of one session were accepted by both workers');
  const lines = gw.logs.filter((l) => l['msg'] === 'request');
  t.ok(lines.every((l) => typeof l['instance'] === 'string' && l['role'] === 'worker'), "every worker's line names its instance");
});

t.test("a cursor issued through one worker continues through the other (the key agreed in the store)", async (t) => {
  // Without the journal, a closed GET stream is let go at once and the owner replays.
  const { gw } = await twoWorkers(t, { resumption: { journal: { enabled: false } } });
  const streams = rawStreams(t);
  const sessionId = await sessionOn(gw.url);
  const heldBy = () => relayedBy(gw, sessionId);
  const first = await streams.open(gw.url, sessionId);
  t.equal(first.status, 200);
  let firstWorker = 0;
  await waitFor('the GET stream relayed by a worker', bound(0), async () => {
    [firstWorker = 0] = await heldBy();
    return firstWorker !== 0;
  });
  const emitted = await postFresh(gw.url, toolCallBody('emit', { count: 3, intervalMs: 0 }), { 'mcp-session-id': sessionId });
  t.equal(emitted.status, 200);
  const events = await first.events.until(3);
  first.close();
  await waitFor('the first stream let go', bound(0), async () => (await heldBy()).length === 0);

  // New connections go to one worker, then the other: a few tries land on the second.
  let other = false;
  for (let attempt = 0; attempt < 6 && !other; attempt++) {
    const resumed = await streams.open(gw.url, sessionId, events[1]!.id);
    t.equal(resumed.headers['mcp-resumption'], 'continued', 'continued');
    const [replayed] = await resumed.events.until(1);
    t.same(replayed, events[2], 'the event after the cursor, with its cursor');
    other = (await heldBy()).some((worker) => worker !== firstWorker);
    resumed.close();
    await waitFor('the continuation let go', bound(0), async () => (await heldBy()).length === 0);
  }
  t.ok(other, 'continued through the other worker');
  t.equal(await scrapeMetric(gw.adminUrl, 'mcp_gateway_resumptions_total', { outcome: 'continued' }) >= 1, true, 'counted in the aggregated metrics');
});

t.test('the admin listener speaks for both workers: metrics summed, readiness of each', async (t) => {
  const { gw } = await twoWorkers(t);
  const sessionId = await sessionOn(gw.url);
  for (let i = 0; i < 6; i++) replicaOf(await postFresh(gw.url, toolCallBody('whoami', {}, i + 2), { 'mcp-session-id': sessionId }));
  t.same(await workersOf(gw, sessionId), new Set([1, 2]), 'both workers answered some');
  // initialize, notifications/initialized, six calls: eight POSTs, each counted by the worker that answered it.
  t.equal(await scrapeMetric(gw.adminUrl, 'mcp_gateway_requests_total', { method: 'POST' }), 8, 'every request counted once');
  t.equal(await scrapeMetric(gw.adminUrl, 'mcp_gateway_replica_up', { replica: 'r1' }), 1, 'replica_up stays 1, not one per worker');
  t.equal(await scrapeMetric(gw.adminUrl, 'mcp_gateway_workers'), 2, 'two workers listening');
  t.equal(await scrapeMetric(gw.adminUrl, 'mcp_gateway_worker_restarts_total'), 0, 'none replaced');
  t.ok((await scrapeMetric(gw.adminUrl, 'process_cpu_seconds_total')) > 0, 'process metrics of the group');

  const ready = await fetch(`${gw.adminUrl}/readyz`);
  const body = (await ready.json()) as { ready: boolean; workers: { worker: number; ready: boolean; instance: string }[] };
  t.equal(ready.status, 200);
  t.same(body.workers.map((w) => [w.worker, w.ready]), [[1, true], [2, true]], 'each worker ready');
  t.ok(body.workers.every((w) => typeof w.instance === 'string'), 'named by instance');
  const health = await fetch(`${gw.adminUrl}/healthz`);
  t.same([health.status, await health.json()], [200, { status: 'ok', workers: 2 }]);
});

t.test('SIGHUP reloads both workers; SIGTERM drains both and exits 0', async (t) => {
  const { gw } = await twoWorkers(t);
  const settings = parse(await readFile(gw.file, 'utf8')) as Record<string, unknown>;
  await writeFile(gw.file, stringify({ ...settings, upstream: { retryAfterSeconds: 3 } }));
  gw.signal('SIGHUP');
  await waitFor('the reload logged by the primary', bound(0), () => gw.logs.some((l) => l['msg'] === 'configuration reloaded'));
  const reloaded = gw.logs.find((l) => l['msg'] === 'configuration reloaded')!;
  t.same(reloaded['applied'], ['upstream'], 'applied');
  t.same((reloaded['workers'] as { worker: number; result: string }[]).map((w) => [w.worker, w.result]), [[1, 'applied'], [2, 'applied']], 'by each worker');
  t.equal(reloaded['role'], undefined, "the primary's line");
  t.equal(await scrapeMetric(gw.adminUrl, 'mcp_gateway_config_reloads_total', { result: 'applied' }), 1, 'one reload counted');

  // Calls in flight on both workers when SIGTERM comes: each finishes within its worker's grace.
  const sessionId = await sessionOn(gw.url);
  const calls = [0, 1, 2, 3].map((i) =>
    postFresh(gw.url, toolCallBody('progress', { steps: 5, intervalMs: 500 }, 10 + i), { 'mcp-session-id': sessionId }),
  );
  let relaying: number[] = [];
  await waitFor('the four calls relayed', bound(0), async () => {
    relaying = await relayedBy(gw, sessionId);
    return relaying.length === 4;
  });
  t.same(new Set(relaying), new Set([1, 2]), 'both workers relay calls when SIGTERM comes');
  const exit = gw.stop('SIGTERM');
  const answers = await Promise.all(calls);
  for (const answer of answers) t.match(answer.body, /done after 5 steps/, 'the call finished');
  t.equal(await exit, 0, 'exit 0');
  const stopping = gw.logs.filter((l) => l['msg'] === 'stopping');
  t.same(new Set(stopping.map((l) => l['worker'])), new Set([undefined, 1, 2]), 'the primary and both workers stopped');
});

t.test('a killed worker is logged at error and replaced', async (t) => {
  const { gw } = await twoWorkers(t);
  const [pid] = listening(gw)['pids'] as number[];
  process.kill(pid!, 'SIGKILL');
  // A new worker is a new Node.js process: it takes as long to start as the gateway did.
  await waitFor('the worker replaced', READY_DEADLINE_MS, () => gw.logs.some((l) => l['msg'] === 'worker replaced'));
  const died = gw.logs.find((l) => l['msg'] === 'worker died: replacing it')!;
  t.same([died['level'], died['worker'], died['signal']], [50, 1, 'SIGKILL'], 'logged at error');
  t.equal(await scrapeMetric(gw.adminUrl, 'mcp_gateway_worker_restarts_total'), 1, 'counted');
  t.equal((await fetch(`${gw.adminUrl}/readyz`)).status, 200, 'ready again');
  const sessionId = await sessionOn(gw.url);
  for (let i = 0; i < 4; i++) replicaOf(await postFresh(gw.url, toolCallBody('whoami', {}, i + 2), { 'mcp-session-id': sessionId }));
  t.same(await workersOf(gw, sessionId), new Set([1, 2]), 'both workers serve');
});

t.test('more than one worker needs the Redis store: check-config says so', async (t) => {
  const check = async (settings: Record<string, unknown>) => {
    const dir = t.testdir({ 'gateway.yaml': stringify({ replicas: [{ id: 'r1', url: 'http://127.0.0.1:1/mcp' }], ...settings }) });
    return outputOf(spawn(process.execPath, [CLI, 'check-config', '--config', `${dir}/gateway.yaml`]));
  };
  const refused = await check({ workers: 2 });
  t.equal(refused.code, 1);
  t.match(refused.stderr, /workers: more than one worker needs store\.type: redis/);
  const auto = await check({ workers: 'auto' });
  t.equal(auto.code, 0);
  t.match(auto.stdout, /workers 1: workers: auto runs 1 worker with a memory store/);
  const wrong = await check({ workers: 'many' });
  t.equal(wrong.code, 1);
  t.match(wrong.stderr, /workers: expected an integer of at least 1 or auto\n$/, 'one problem, named once');
});

t.test('a worker that cannot start its tracing logs why, and the gateway stops', async (t) => {
  const redis = await startRedisServer(t);
  const dir = t.testdir({
    'gateway.yaml': stringify({ workers: 2, store: { type: 'redis', url: redis.url }, replicas: [{ id: 'r1', url: 'http://127.0.0.1:1/mcp' }], listen: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 } }),
  });
  const env = { ...process.env, OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' };
  const out = await outputOf(spawn(process.execPath, [CLI, '--config', `${dir}/gateway.yaml`], { env, stdio: ['ignore', 'pipe', 'pipe'] }));
  t.not(out.code, 0, 'the gateway exits with an error');
  const lines = `${out.stdout}\n${out.stderr}`.split('\n').flatMap((l) => {
    try {
      return [JSON.parse(l) as Record<string, unknown>];
    } catch {
      return [];
    }
  });
  const fatal = lines.find((l) => l['level'] === 60 && l['worker'] !== undefined);
  t.ok(fatal, 'the worker logs its start failure as a log line, at fatal', { lines });
  t.match(JSON.stringify(fatal), /grpc is not supported/, 'naming the cause');
  t.ok(lines.some((l) => l['msg'] === 'a worker exited while starting: stopping'), 'the primary stops');
});
