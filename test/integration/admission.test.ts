/**
 * Storm admission (resumption.admission, docs/operations.md): past the bound of decisions running
 * and waiting, a resumption is answered 503 GW_RESUMPTION_BUSY with Retry-After at once; a turn
 * ends when the response's headers leave, so an open stream does not keep one.
 */
import t from 'tap';
import { metricValue, startGateway } from '../helpers/gateway.js';
import { MCP_ACCEPT, PROTOCOL_VERSION, rawSession } from '../helpers/http.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';

/** A decision on the stopped store lasts this long: the store timeout bounds it. */
const STORE_TIMEOUT_MS = 1_000;
const QUEUE_MS = 100;

t.test('past the bound: 503 GW_RESUMPTION_BUSY with Retry-After at once; a turn ends with its headers', async (t) => {
  const redis = await startRedisServer(t);
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, {
    store: { type: 'redis', url: redis.url, commandTimeoutMs: STORE_TIMEOUT_MS },
    replicas: [{ id: replica!.id, url: replica!.url }],
    resumption: { admission: { maxConcurrent: 1, maxQueued: 1, queueMs: QUEUE_MS } },
  });
  const sessionId = await rawSession(gw.url);
  const resume = (signal?: AbortSignal) =>
    fetch(gw.url, {
      headers: { 'mcp-session-id': sessionId, accept: MCP_ACCEPT, 'mcp-protocol-version': PROTOCOL_VERSION, 'last-event-id': 'not-a-cursor' },
      ...(signal ? { signal } : {}),
    });
  const decisions = (state: string) => metricValue(gw.registry, 'mcp_gateway_resumption_decisions', { state });

  // The store stopped: the first decision waits for it, holding the one turn.
  redis.pause();
  const firstController = new AbortController();
  t.teardown(() => firstController.abort());
  const first = resume(firstController.signal);
  await waitFor('the first decision running', bound(1_000), async () => (await decisions('running')) === 1);
  const second = resume();
  await waitFor('the second decision queued', bound(1_000), async () => (await decisions('queued')) === 1);
  const third = await resume();
  t.equal(third.status, 503, 'past the queue: 503');
  t.equal(third.headers.get('mcp-gateway-error'), 'GW_RESUMPTION_BUSY');
  t.equal(third.headers.get('retry-after'), '1', 'with Retry-After');
  t.match(await third.json(), { error: { code: -32000, data: { code: 'GW_RESUMPTION_BUSY' } } });
  const queued = await second;
  t.equal(queued.headers.get('mcp-gateway-error'), 'GW_RESUMPTION_BUSY', `a wait past queueMs is refused too (${queued.status})`);
  await queued.text();
  redis.resume();
  const held = await first;
  t.not(held.headers.get('mcp-gateway-error'), 'GW_RESUMPTION_BUSY', `the first was decided in its turn (${held.status})`);
  firstController.abort();
  t.equal(await metricValue(gw.registry, 'mcp_gateway_resumptions_busy_total'), 2, 'both refusals counted');

  // With the store back, a decision runs; its stream stays open, its turn ends with the headers.
  const controller = new AbortController();
  t.teardown(() => controller.abort());
  const decided = await resume(controller.signal);
  t.equal(decided.status, 200, 'decided');
  t.equal(decided.headers.get('mcp-resumption'), 'new-stream', 'a foreign cursor: a new stream, said so');
  t.equal(await decisions('running'), 0, 'no turn kept by the open stream');
  t.equal(await decisions('queued'), 0);
});

t.test('a decision that waited for its turn is decided once it gets one, for a client still there', async (t) => {
  const redis = await startRedisServer(t);
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGateway(t, {
    store: { type: 'redis', url: redis.url, commandTimeoutMs: STORE_TIMEOUT_MS },
    replicas: [{ id: replica!.id, url: replica!.url }],
    resumption: { admission: { maxConcurrent: 1, maxQueued: 1, queueMs: 30_000 } },
  });
  const sessionId = await rawSession(gw.url);
  const decisions = (state: string) => metricValue(gw.registry, 'mcp_gateway_resumption_decisions', { state });
  const controllers: AbortController[] = [];
  t.teardown(() => controllers.forEach((c) => c.abort()));
  const resume = () => {
    const controller = new AbortController();
    controllers.push(controller);
    // The bound only turns a request left unanswered into a failure that says so.
    const signal = AbortSignal.any([controller.signal, AbortSignal.timeout(20_000)]);
    return fetch(gw.url, {
      headers: { 'mcp-session-id': sessionId, accept: MCP_ACCEPT, 'mcp-protocol-version': PROTOCOL_VERSION, 'last-event-id': 'not-a-cursor' },
      signal,
    });
  };
  redis.pause();
  const first = resume();
  await waitFor('the first decision running', bound(1_000), async () => (await decisions('running')) === 1);
  const second = resume();
  await waitFor('the second decision queued', bound(1_000), async () => (await decisions('queued')) === 1);
  redis.resume();
  const answers = await Promise.all([first, second]);
  t.ok(answers[0]!.headers.get('mcp-gateway-error') !== 'GW_RESUMPTION_BUSY', `the first decided in its turn (${answers[0]!.status})`);
  t.equal(answers[1]!.status, 200, 'the queued one is answered once its turn came');
  t.equal(answers[1]!.headers.get('mcp-resumption'), 'new-stream', 'and decided: a foreign cursor is a new stream, said so');

  // mcp_gateway_resumption_decision_seconds: each admitted decision once per phase; the queued one
  // waited while the store was stopped, so the wait is in `queued`, not in its decision.
  const times = await phases(gw.registry);
  t.equal(times.queued?.count, 2, 'both waits counted (the first waited 0)');
  t.equal(times.decided?.count, 2, 'both decisions counted');
  t.ok(times.queued!.sum > 0, `the second's wait is counted (${times.queued!.sum} s)`);
  t.ok(times.queued!.zero === 1, 'the first had a turn at once');
});

/** mcp_gateway_resumption_decision_seconds by phase: count, sum, and observations in the lowest bucket. */
async function phases(registry: Parameters<typeof metricValue>[0]) {
  const metric = await registry.getSingleMetric('mcp_gateway_resumption_decision_seconds')!.get();
  const out: Record<string, { count: number; sum: number; zero: number }> = {};
  for (const v of metric.values as { labels: Record<string, string | number>; value: number; metricName?: string }[]) {
    const phase = String(v.labels.phase);
    const entry = (out[phase] ??= { count: 0, sum: 0, zero: 0 });
    if (v.metricName?.endsWith('_count')) entry.count = v.value;
    if (v.metricName?.endsWith('_sum')) entry.sum = v.value;
    if (v.metricName?.endsWith('_bucket') && v.labels.le === 0.001) entry.zero = v.value;
  }
  return out;
}

