/**
 * CONTRACT.md §8 on real processes: SDK replicas without an event log (the SDK's default server:
 * no ids, nothing replayed, 409 to a second GET), a real redis-server, two gateway instances behind
 * a balancer that cuts connections, and the real SDK client. What the replica sends while the
 * client is away is held (J2), journaled (J1) and continued from the journal (J3), on the same
 * instance or the other one.
 */
import t, { type Test } from 'tap';
import { startBalancer } from '../helpers/balancer.js';
import { callText, connect } from '../helpers/client.js';
import { metricValue, startGateway, type RunningGateway } from '../helpers/gateway.js';
import { MCP_ACCEPT, PROTOCOL_VERSION, post, rawSession, toolCallBody } from '../helpers/http.js';
import { wireOpen } from '../helpers/model-wire.js';
import type { Explanation } from '../../src/resumption/explain.js';
import { rawStreams } from '../helpers/raw-sse.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas, type ReplicaProcess } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';
import { collectLogging, Collected, gatedFetch } from '../helpers/watch.js';

const HOLD_MS = 60_000;

async function fleet(t: Test, settings: Record<string, unknown> = {}) {
  const redis = await startRedisServer(t);
  const replicas = await spawnReplicas(t, 2, { eventStore: false });
  const config = {
    store: { type: 'redis', url: redis.url },
    replicas: replicas.map((r) => ({ id: r.id, url: r.url })),
    resumption: { journal: { holdMs: HOLD_MS } },
    ...settings,
  };
  const gateways = [await startGateway(t, config), await startGateway(t, config)];
  const balancer = await startBalancer(t, gateways.map((g) => g.url));
  return { redis, replicas, gateways, balancer };
}

/** One gateway on Redis in front of one SDK replica without an event log, with these journal settings. */
async function oneReplica(t: Test, journal: Record<string, unknown>): Promise<RunningGateway> {
  const redis = await startRedisServer(t);
  const [replica] = await spawnReplicas(t, 1, { eventStore: false });
  return startGateway(t, {
    store: { type: 'redis', url: redis.url },
    replicas: [{ id: replica!.id, url: replica!.url }],
    resumption: { journal },
  });
}

async function total(gateways: RunningGateway[], name: string, labels: Record<string, string> = {}): Promise<number> {
  const values = await Promise.all(gateways.map((g) => metricValue(g.registry, name, labels)));
  return values.reduce((a, b) => a + b, 0);
}

async function perInstance(gateways: RunningGateway[], name: string, labels: Record<string, string> = {}): Promise<number[]> {
  return Promise.all(gateways.map((g) => metricValue(g.registry, name, labels)));
}

/** The demo replica's count of a tool's calls, started and answered. */
async function toolCalls(replica: ReplicaProcess, tool: string): Promise<{ started: number; finished: number }> {
  const health = (await (await fetch(replica.url.replace(/\/mcp$/, '/healthz'))).json()) as { toolCalls: Record<string, { started: number; finished: number }> };
  return health.toolCalls[tool] ?? { started: 0, finished: 0 };
}

function byId(replicas: ReplicaProcess[], id: string): ReplicaProcess {
  const found = replicas.find((r) => r.id === id);
  if (!found) throw new Error(`no replica ${id}`);
  return found;
}

/**
 * A progress tool call cut after two notifications; the reconnection is held until the replica
 * has finished the call (so that its response is sent while no client is there), then lands on
 * instance `resumeOn`.
 */
async function cutToolCall(t: Test, resumeOn: number) {
  const { gateways, balancer, replicas } = await fleet(t);
  const gate = gatedFetch();
  balancer.pin(0);
  const { client } = await connect(t, balancer.url, { fetch: gate.fetch });
  const owner = byId(replicas, await callText(client, 'whoami'));
  const progress = new Collected<number>();
  const call = client.callTool({ name: 'progress', arguments: { steps: 8, intervalMs: 50 } }, undefined, {
    onprogress: (p) => progress.push(p.progress),
  });
  await progress.until(2);
  balancer.cut();
  await gate.reconnections.until(1);
  // The call runs to its end on the replica while the client is away: held and journaled.
  await waitFor('the tool call answered on the replica', bound(8 * 50), async () => (await toolCalls(owner, 'progress')).finished === 1);
  // With the priming events of the whoami call's stream, the session's GET stream and this call's (J1).
  await waitFor('the response journaled', bound(1000), async () => (await total(gateways, 'mcp_gateway_journal_events_total')) >= 9 + 1 + 3);
  balancer.pin(resumeOn);
  gate.open();
  const result = await call;
  // The call's stream and the session's GET stream, which holds its priming cursor (J1): both
  // continued (the GET reconnects on its own schedule).
  await waitFor('both streams continued', bound(5000), async () => (await total(gateways, 'mcp_gateway_continuations_total', { source: 'journal' })) >= 2);
  return { gateways, result, progress, owner };
}

t.test('a tool call cut mid-way: held, journaled, continued on the same instance from the journal', async (t) => {
  const { gateways, result, progress, owner } = await cutToolCall(t, 0);
  t.same(result.content, [{ type: 'text', text: 'done after 8 steps' }], 'the result, sent while the client was away');
  t.same(progress.items, [1, 2, 3, 4, 5, 6, 7, 8], 'every progress notification once, in order');
  t.same(await toolCalls(owner, 'progress'), { started: 1, finished: 1 }, 'the tool ran once');
  t.same(await perInstance(gateways, 'mcp_gateway_continuations_total', { source: 'journal' }), [2, 0], 'continued from the journal, by the instance that held it');
  t.equal(await total(gateways, 'mcp_gateway_continuations_total', { source: 'owner' }), 0, 'the owner was never asked to replay');
});

t.test('a tool call cut mid-way, continued on the other instance from the journal', async (t) => {
  const { gateways, result, progress, owner } = await cutToolCall(t, 1);
  t.same(result.content, [{ type: 'text', text: 'done after 8 steps' }], 'the result');
  t.same(progress.items, [1, 2, 3, 4, 5, 6, 7, 8], 'every progress notification once, in order');
  t.same(await toolCalls(owner, 'progress'), { started: 1, finished: 1 }, 'the tool ran once');
  t.same(await perInstance(gateways, 'mcp_gateway_continuations_total', { source: 'journal' }), [0, 2], 'continued by the other instance');
});

t.test('a GET stream cut: held while the client is away, continued on the other instance, then live through the tail', async (t) => {
  const { gateways, balancer } = await fleet(t);
  const gate = gatedFetch();
  balancer.pin(0);
  const { client } = await connect(t, balancer.url, { fetch: gate.fetch });
  const logged = collectLogging(client);
  await gate.streams.until(1);
  await callText(client, 'emit', { count: 3, intervalMs: 5 });
  t.same(await logged.until(3), [1, 2, 3], 'three events on the GET stream, each with a cursor');

  balancer.cut();
  await gate.reconnections.until(1);
  await waitFor('the GET stream held', bound(1000), async () => (await metricValue(gateways[0]!.registry, 'mcp_gateway_held_streams')) === 1);
  // Sent while the client is away: only the held stream carries them to the journal.
  balancer.pin(1);
  await callText(client, 'emit', { count: 4, intervalMs: 5 });
  gate.open();
  t.same(await logged.until(7), [1, 2, 3, 1, 2, 3, 4], 'the missed events from the journal, once, in order');
  // Now live: the pump on instance 0 reads the replica, instance 1 tails the journal.
  await callText(client, 'emit', { count: 2, intervalMs: 5 });
  t.same(await logged.until(9), [1, 2, 3, 1, 2, 3, 4, 1, 2], 'then live events through the tail');
  t.equal(logged.items.length, 9, 'nothing else arrived');
  t.same(await perInstance(gateways, 'mcp_gateway_continuations_total', { source: 'journal' }), [0, 1]);
  t.equal(await metricValue(gateways[0]!.registry, 'mcp_gateway_held_streams'), 1, 'the pump stays held on instance 0 while instance 1 tails');
});

t.test('a cursor older than the journal window is a gap (J5)', async (t) => {
  const gateway = await oneReplica(t, { maxEvents: 16 });
  const sessionId = await rawSession(gateway.url);
  const streams = rawStreams(t);
  const live = await streams.open(gateway.url, sessionId);
  const emitted = await post(gateway.url, toolCallBody('emit', { count: 40, intervalMs: 0 }), { 'mcp-session-id': sessionId });
  await emitted.text();
  const events = await live.events.until(40);
  t.ok(events.every((e) => e.id !== undefined), 'every event carries a cursor, though the replica sent no id');
  t.ok((await metricValue(gateway.registry, 'mcp_gateway_journal_events_total')) >= 40, 'every event journaled');

  const old = await streams.open(gateway.url, sessionId, events[0]!.id);
  t.equal(old.headers['mcp-resumption'], 'new-stream');
  t.equal(old.headers['mcp-resumption-reason'], 'gap', 'older than the last 16 events: a gap, never a silent omission');
  const recent = await streams.open(gateway.url, sessionId, events[36]!.id);
  t.equal(recent.headers['mcp-resumption'], 'continued', 'a cursor within the window continues');
  const replayed = await recent.events.until(3);
  t.same(
    replayed.map((e) => e.id),
    events.slice(37, 40).map((e) => e.id),
    'the events after it, with their original cursors (E3)',
  );
  t.same(
    replayed.map((e) => e.data),
    events.slice(37, 40).map((e) => e.data),
    'and their data',
  );
});

t.test('a call whose response was journaled after its cursor left the window: the signal, the response, the end; the session\'s GET stream stays resumable', async (t) => {
  // Found by the model-based walk (MODEL_SEED=118357424): the signal's stream went on as a fresh
  // GET, which superseded the session's own GET stream, cut with the call and held meanwhile.
  const gateway = await oneReplica(t, { maxEvents: 4, holdMs: HOLD_MS });
  const sessionId = await rawSession(gateway.url);
  const streams = rawStreams(t);
  const get = await streams.open(gateway.url, sessionId);
  await (await post(gateway.url, toolCallBody('emit', { count: 1, intervalMs: 1, stream: 'get' }), { 'mcp-session-id': sessionId })).text();
  const getCursor = (await get.events.until(1))[0]!.id!;

  const call = await wireOpen(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: MCP_ACCEPT, 'mcp-protocol-version': PROTOCOL_VERSION, 'mcp-session-id': sessionId },
    body: toolCallBody('emit', { count: 6, intervalMs: 20, stream: 'request' }, 77),
    timeoutMs: 10_000,
  });
  if (call.kind !== 'stream') throw new Error(`the call answered ${call.response.status}`);
  t.ok(await call.stream.until(() => call.stream.events.length >= 1, 10_000), 'the call\'s first event');
  const callCursor = call.stream.events[0]!.id!;
  call.stream.close();
  get.close();
  // Held (J2): the call's five other events and its response, past the window of 4.
  const explain = `${gateway.adminUrl}/debug/explain?cursor=${encodeURIComponent(callCursor)}&session=${encodeURIComponent(sessionId)}`;
  await waitFor('the call and its response journaled', bound(6 * 20), async () => ((await (await fetch(explain)).json()) as Explanation).incarnation?.record?.pendingCalls === 0);
  await waitFor('the GET stream held', bound(1000), async () => (await metricValue(gateway.registry, 'mcp_gateway_held_streams')) === 1);

  const resumed = await streams.open(gateway.url, sessionId, callCursor);
  t.equal(resumed.headers['mcp-resumption'], 'new-stream');
  t.equal(resumed.headers['mcp-resumption-reason'], 'gap', 'the call\'s cursor is below the window');
  await resumed.ended;
  const events = resumed.events.items;
  t.equal(events.length, 2, 'the signal and the response, then the end');
  t.match(JSON.parse(events[0]!.data), { method: 'notifications/gateway/stream_reset', params: { reason: 'gap', lastEventId: callCursor } });
  t.match(JSON.parse(events[1]!.data), { id: 77, result: { content: [{ text: 'emitted 6 on request stream' }] } }, 'the journaled response (J4)');

  const again = await streams.open(gateway.url, sessionId, getCursor);
  t.equal(again.headers['mcp-resumption'], 'continued', 'the GET stream was not superseded by the call\'s signal');
  t.equal(again.headers['mcp-resumption-reason'], undefined);
  again.close();
});

t.test('journal off: events without ids stay without, nothing is held, and the owner replays as before', async (t) => {
  const gateway = await oneReplica(t, { enabled: false });
  const sessionId = await rawSession(gateway.url);
  const streams = rawStreams(t);
  const live = await streams.open(gateway.url, sessionId);
  const emitted = await post(gateway.url, toolCallBody('emit', { count: 3, intervalMs: 0 }), { 'mcp-session-id': sessionId });
  await emitted.text();
  const events = await live.events.until(3);
  t.same(
    events.map((e) => e.id),
    [undefined, undefined, undefined],
    'no cursor where the replica sent no id (E1)',
  );
  live.close();
  await live.ended;
  t.equal(await metricValue(gateway.registry, 'mcp_gateway_journal_events_total'), 0, 'nothing journaled');
  t.equal(await metricValue(gateway.registry, 'mcp_gateway_held_streams'), 0, 'nothing held');
});

t.test('resumption.journal.leaseMs: the pump claims its stream that long, and renews the claim while the stream is idle', async (t) => {
  const leaseMs = 1000;
  const [replica] = await spawnReplicas(t, 1, { eventStore: false });
  const gateway = await startGateway(t, {
    store: { type: 'memory' },
    replicas: [{ id: replica!.id, url: replica!.url }],
    resumption: { journal: { leaseMs } },
  });
  const sessionId = await rawSession(gateway.url);
  const streams = rawStreams(t);
  const live = await streams.open(gateway.url, sessionId);
  const emitted = await post(gateway.url, toolCallBody('emit', { count: 1, intervalMs: 0 }), { 'mcp-session-id': sessionId });
  await emitted.text();
  const [event] = await live.events.until(1);
  const explain = `${gateway.adminUrl}/debug/explain?cursor=${encodeURIComponent(event!.id!)}&session=${encodeURIComponent(sessionId)}`;
  // The claim as read between `before` and `after`: written (now + leaseMs) at most then.
  const claim = async () => {
    const before = Date.now();
    const e = (await (await fetch(explain)).json()) as Explanation;
    const pump = e.incarnation?.record?.pump;
    return { before, after: Date.now(), until: pump ? Date.parse(pump.until) : 0 };
  };
  const first = await claim();
  t.ok(first.until > first.before - leaseMs / 3 && first.until <= first.after + leaseMs, `the claim ends within leaseMs (${first.until - first.before} ms ahead)`);
  // No event comes now: only the renewals between events keep the claim ahead, a third of the lease at a time.
  await waitFor('the claim renewed past two leases from the first', bound(5 * leaseMs), async () => (await claim()).until > first.until + 2 * leaseMs);
  const later = await claim();
  t.ok(later.until > later.before, 'and still ahead of now');
});
