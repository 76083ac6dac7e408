/**
 * CONTRACT.md §9 M2, task affinity, on real processes: SDK v2 replicas that keep tasks in memory
 * (test/helpers/v2-replica-main.ts), two gateway instances on one Redis, and the SDK v2 client
 * negotiating the 2026-07-28 era (`versionNegotiation: 'auto'`).
 */
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Redis } from 'ioredis';
import t, { type Test } from 'tap';
import { z } from 'zod';
import { taskKey } from '../../src/eras/tasks.js';
import { taskRecordKey } from '../../src/store/redis/keys.js';
import { metricValue, startGateway, type RunningGateway } from '../helpers/gateway.js';
import { MCP_ACCEPT } from '../helpers/http.js';
import type { Teardown } from '../helpers/processes.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnV2Replicas, type V2Replica } from '../helpers/v2-replicas.js';

const MODERN = '2026-07-28';
const META = { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': {} };
const MAX_TTL_MS = 120_000;

const Task = z.object({ taskId: z.string(), status: z.string(), statusMessage: z.string(), holder: z.string() }).passthrough();
type Task = z.infer<typeof Task>;

interface Fleet {
  replicas: V2Replica[];
  a: RunningGateway;
  b: RunningGateway;
  redis: Redis;
  prefix: string;
}

async function fleet(t: Teardown): Promise<Fleet> {
  const server = await startRedisServer(t);
  const replicas = await spawnV2Replicas(t, 2);
  const settings = {
    store: { type: 'redis', url: server.url },
    replicas: replicas.map((r) => ({ id: r.id, url: r.url })),
    tasks: { maxTtlMs: MAX_TTL_MS },
  };
  const a = await startGateway(t, settings);
  const b = await startGateway(t, settings);
  const redis = new Redis(server.url);
  t.teardown(() => redis.quit());
  return { replicas, a, b, redis, prefix: a.config.store.keyPrefix };
}

/**
 * The SDK v2 client through `url`. SDK 2.4.0 has no Tasks extension: it refuses a result with
 * `resultType: "task"` (UnsupportedResultType). A Tasks-aware client reads that result as it
 * arrives; so does this one, off its transport, keeping every task result it received.
 */
async function tasksClient(t: Test, url: string) {
  const client = new Client({ name: 'tasks-test', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  t.teardown(() => client.close());
  const created: Task[] = [];
  const deliver = transport.onmessage;
  transport.onmessage = (message) => {
    const result = (message as { result?: { resultType?: string } }).result;
    if (result?.resultType === 'task') created.push(Task.parse(result));
    deliver?.(message);
  };
  return {
    client,
    /** Calls start-task; with `progress`, the replica answers with an SSE stream. */
    async startTask(args: { ttlMs?: number | null } = {}, progress = false): Promise<Task> {
      const before = created.length;
      await client
        .request({ method: 'tools/call', params: { name: 'start-task', arguments: args } }, z.object({}).passthrough(), progress ? { onprogress: () => undefined } : {})
        .catch(() => undefined);
      t.equal(created.length, before + 1, 'the call answered with a task');
      return created.at(-1)!;
    },
    task(method: 'tasks/get' | 'tasks/cancel', taskId: string): Promise<Task> {
      return client.request({ method, params: { taskId } }, Task);
    },
    update(taskId: string, statusMessage: string): Promise<Task> {
      return client.request({ method: 'tasks/update', params: { taskId, statusMessage } }, Task);
    },
  };
}

function rawTaskRequest(url: string, method: string, taskId: string, id: string | number = 41): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: MCP_ACCEPT, 'mcp-protocol-version': MODERN, 'mcp-method': method, 'mcp-name': taskId },
    body: JSON.stringify({ jsonrpc: '2.0', id, method, params: { taskId, _meta: META } }),
  });
}

/** How many requests naming `taskId` (in Mcp-Name) each replica received. */
async function requestsNaming(replicas: V2Replica[], taskId: string): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const r of replicas) counts[r.id] = (await r.state()).seen.filter((h) => h['mcp-name'] === taskId).length;
  return counts;
}

t.test('a task created through one instance is polled, updated and cancelled through the other, on its holder only', async (t) => {
  const { replicas, a, b, redis, prefix } = await fleet(t);
  const viaA = await tasksClient(t, a.url);
  const viaB = await tasksClient(t, b.url);
  t.equal(viaA.client.getNegotiatedProtocolVersion?.(), MODERN, 'the modern era was negotiated');

  const created = await viaA.startTask();
  const holder = created.holder;
  t.ok(replicas.some((r) => r.id === holder), `created on ${holder}`);

  for (let i = 0; i < 6; i++) {
    const polled = await viaB.task('tasks/get', created.taskId);
    t.equal(polled.holder, holder, `poll ${i + 1} through the other instance reached the holder`);
  }
  const updated = await viaB.update(created.taskId, 'updated through B');
  t.equal(updated.statusMessage, 'updated through B', 'tasks/update reached the holder');
  t.equal((await viaA.task('tasks/get', created.taskId)).statusMessage, 'updated through B', 'and the holder kept it: one task, one replica');
  const cancelled = await viaB.task('tasks/cancel', created.taskId);
  t.equal(cancelled.status, 'cancelled', 'tasks/cancel reached the holder');
  t.equal((await viaB.task('tasks/get', created.taskId)).status, 'cancelled');

  const seen = await requestsNaming(replicas, created.taskId);
  t.equal(seen[holder], 10, 'the holder received all ten task requests');
  for (const r of replicas.filter((r) => r.id !== holder)) t.equal(seen[r.id], 0, `${r.id} never received one`);
  t.equal((await metricValue(a.registry, 'mcp_gateway_tasks_total', { outcome: 'recorded' })), 1, 'recorded once, by the instance that saw it created');
  t.equal(
    (await metricValue(a.registry, 'mcp_gateway_tasks_total', { outcome: 'routed' })) + (await metricValue(b.registry, 'mcp_gateway_tasks_total', { outcome: 'routed' })),
    10,
    'every task request was routed by the record',
  );

  // A task created in an SSE answer (a progress notification first) is recorded just the same.
  const streamed = await viaA.startTask({}, true);
  t.equal((await viaB.task('tasks/get', streamed.taskId)).holder, streamed.holder, 'a task from an SSE answer reaches its holder');

  // The task id is a secret: not in the store (keys or values), not in the metrics.
  const keys = await redis.keys('*');
  const values = await Promise.all(keys.map(async (key) => ((await redis.type(key)) === 'string' ? ((await redis.get(key)) ?? '') : JSON.stringify(await redis.hgetall(key).catch(() => ({}))))));
  for (const taskId of [created.taskId, streamed.taskId]) {
    t.notOk(keys.some((key) => key.includes(taskId)), 'no key holds the task id');
    t.notOk(values.some((value) => value.includes(taskId)), 'no value holds the task id');
    for (const gw of [a, b]) t.notOk((await (await fetch(`${gw.adminUrl}/metrics`)).text()).includes(taskId), 'no metric names it');
  }
  t.ok(keys.includes(taskRecordKey(prefix, taskKey(created.taskId))), 'the record is under the digest of the id');
});

t.test('a task whose holder is killed is answered as lost, through either instance, and reaches no other replica', async (t) => {
  const { replicas, a, b } = await fleet(t);
  const viaA = await tasksClient(t, a.url);
  const viaB = await tasksClient(t, b.url);
  const created = await viaA.startTask();
  const holder = replicas.find((r) => r.id === created.holder)!;
  const other = replicas.find((r) => r.id !== created.holder)!;
  t.equal((await viaB.task('tasks/get', created.taskId)).holder, holder.id, 'reachable before');

  await holder.kill();
  // The first request meets the refused connection (R4); the next finds the holder's epoch retired.
  await t.rejects(viaB.task('tasks/get', created.taskId), { code: -32602, message: /Task lost: the server that held it is gone/ }, 'lost through B');
  await t.rejects(viaA.update(created.taskId, 'too late'), { code: -32602, message: /Task lost/ }, 'lost through A');

  const raw = await rawTaskRequest(b.url, 'tasks/cancel', created.taskId, 'cancel-1');
  t.equal(raw.status, 200, 'never a 5xx: a JSON-RPC error, as a replica answers an unknown task');
  t.equal(raw.headers.get('mcp-gateway-error'), 'GW_TASK_LOST');
  const body = (await raw.json()) as { id: unknown; error: { code: number; message: string; data: unknown } };
  t.same(body, { jsonrpc: '2.0', id: 'cancel-1', error: { code: -32602, message: 'Task lost: the server that held it is gone', data: { code: 'GW_TASK_LOST' } } });
  t.notOk(JSON.stringify(body).includes(created.taskId), 'the answer does not echo the task id');

  t.equal((await requestsNaming([other], created.taskId))[other.id], 0, `${other.id} never received a request for it`);
  t.equal(
    (await metricValue(a.registry, 'mcp_gateway_tasks_total', { outcome: 'lost' })) + (await metricValue(b.registry, 'mcp_gateway_tasks_total', { outcome: 'lost' })),
    3,
    'counted as lost',
  );
  t.equal(text(await viaB.client.callTool({ name: 'whoami', arguments: {} })), other.id, 'the fleet serves on');
});

t.test('a task the store does not hold goes to the balancer; a null or long ttlMs is bounded by tasks.maxTtlMs', async (t) => {
  const { replicas, a, redis, prefix } = await fleet(t);
  const unknown = await rawTaskRequest(a.url, 'tasks/get', 'never-issued');
  t.equal(unknown.status, 200, 'forwarded');
  t.match(await unknown.json(), { error: { code: -32602, message: /Task not found/ } }, "a replica's own answer");
  t.notOk(unknown.headers.get('mcp-gateway-error'), 'not the gateway’s');
  const seen = await requestsNaming(replicas, 'never-issued');
  t.equal(Object.values(seen).reduce((n, c) => n + c, 0), 1, 'sent to one replica');
  t.equal(await metricValue(a.registry, 'mcp_gateway_tasks_total', { outcome: 'unknown' }), 1);

  const client = await tasksClient(t, a.url);
  const ttl = async (task: Task) => redis.pttl(taskRecordKey(prefix, taskKey(task.taskId)));
  const unbounded = await ttl(await client.startTask({ ttlMs: null }));
  t.ok(unbounded > 60_000 && unbounded <= MAX_TTL_MS, `ttlMs null: remembered for tasks.maxTtlMs (${unbounded} ms left)`);
  const long = await ttl(await client.startTask({ ttlMs: 10 * MAX_TTL_MS }));
  t.ok(long > 60_000 && long <= MAX_TTL_MS, `a longer ttlMs: bounded (${long} ms left)`);
  const short = await ttl(await client.startTask({ ttlMs: 30_000 }));
  t.ok(short > 0 && short <= 30_000, `a shorter ttlMs is the task's own (${short} ms left)`);
});

function text(result: { content?: unknown }): string {
  const content = result.content as { type: string; text?: string }[];
  return content.find((c) => c.type === 'text')?.text ?? '';
}
