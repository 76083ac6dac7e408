/**
 * A GET against a held one (CONTRACT.md E4, §5 signal mode, §8 J2), on real processes: an SDK
 * replica without an event log (one GET stream per session, 409 to a second), gateway processes on
 * one redis-server, the real SDK client behind a balancer that cuts.
 *
 * A GET stream held with no client attached (on the instance the client comes back to, or on the
 * other one) is let go for the signal's fresh GET, and taken over by a plain GET, which gets what
 * the replica sent after the last event written to the client that left: the client is live again
 * at once, not after the hold period, whether or not the stream carried an event before the cut. A GET stream with a client attached
 * (to its pump, or through a tailing instance) is left alone: the signal ends after its
 * notification, a plain GET gets the owner's 409, and the attached client's stream stays live and
 * resumable.
 */
import t, { type Test } from 'tap';
import type { SessionView } from '../../src/resumption/explain.js';
import { startBalancer } from '../helpers/balancer.js';
import { callText, connect } from '../helpers/client.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { post, rawSession, toolCallBody } from '../helpers/http.js';
import { rawStreams } from '../helpers/raw-sse.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { scrapeMetric } from '../helpers/scrape.js';
import { bound, waitFor } from '../helpers/wait.js';
import { collectLogging, collectResets, gatedFetch } from '../helpers/watch.js';

/** Far longer than any test: only the release can end a held stream here. */
const HOLD_MS = 600_000;
/** The journal keeps this many events of a stream: a cursor older than that is a gap (J5). */
const WINDOW = 16;

// Six cases, each with two gateway processes of its own, and some waiting out the owner's 409
// retries (1 s each): on a loaded machine more than tap's 120 s for the file.
t.setTimeout(300_000);

// One redis-server and one replica for the file: each case has sessions of its own on them (the
// replica keeps one GET stream per session, the store its records per session) and its own
// gateways, whose held streams, leases and counters go with them.
const [redis, [replica]] = await Promise.all([startRedisServer(t), spawnReplicas(t, 1, { eventStore: false })]);

async function fleet(t: Test) {
  const settings = {
    store: { type: 'redis', url: redis.url },
    replicas: [{ id: replica!.id, url: replica!.url }],
    resumption: { journal: { holdMs: HOLD_MS, maxEvents: WINDOW } },
  };
  const gateways = await Promise.all([startGatewayProcess(t, settings), startGatewayProcess(t, settings)]);
  return { gateways, replica: replica! };
}

async function sessionView(gateway: GatewayProcess, sessionId: string): Promise<SessionView> {
  return (await (await fetch(`${gateway.adminUrl}/debug/sessions/${encodeURIComponent(sessionId)}`)).json()) as SessionView;
}

/** A session on two gateway instances, with a raw client attached to its GET stream through instance 0. */
async function attachedGet(t: Test) {
  const { gateways } = await fleet(t);
  const [g0, g1] = gateways as [GatewayProcess, GatewayProcess];
  const sessionId = await rawSession(g0.url);
  const streams = rawStreams(t);
  const first = await streams.open(g0.url, sessionId);
  const incarnation = await currentGet(g0, sessionId);
  return { gateways, g0, g1, sessionId, streams, first, incarnation };
}

/** Waits until `gateway` holds one GET stream with no client (J2). */
async function untilHeld(gateway: GatewayProcess): Promise<void> {
  await waitFor('the GET stream held', bound(1000), async () => (await scrapeMetric(gateway.adminUrl, 'mcp_gateway_held_streams')) === 1);
}

/** The session's current GET incarnation (E4), as the store holds it. */
async function currentGet(gateway: GatewayProcess, sessionId: string): Promise<string | undefined> {
  return (await sessionView(gateway, sessionId)).currentGet;
}

/** Calls the demo's emit tool with raw HTTP and waits for its answer. */
async function emit(url: string, sessionId: string, count: number): Promise<void> {
  const answer = await post(url, toolCallBody('emit', { count, intervalMs: 0 }), { 'mcp-session-id': sessionId });
  await answer.text();
  if (answer.status !== 200) throw new Error(`emit answered ${answer.status}`);
}

/**
 * The SDK client's GET stream held on instance 0; while the client is away, more events than the
 * journal keeps; the client comes back on instance `resumeOn` with a cursor below the window.
 */
async function gapAfterHeld(t: Test, resumeOn: number) {
  const { gateways } = await fleet(t);
  const balancer = await startBalancer(t, gateways.map((g) => g.url));
  const gate = gatedFetch();
  balancer.pin(0);
  const { client, sessionId } = await connect(t, balancer.url, { fetch: gate.fetch });
  const logged = collectLogging(client);
  const resets = collectResets(client);
  await gate.streams.until(1);
  await callText(client, 'emit', { count: 3, intervalMs: 5 });
  t.same(await logged.until(3), [1, 2, 3], 'three events on the GET stream');
  const held = await currentGet(gateways[0]!, sessionId);

  balancer.cut();
  await gate.reconnections.until(1);
  await untilHeld(gateways[0]!);
  const journaled = await scrapeMetric(gateways[0]!.adminUrl, 'mcp_gateway_journal_events_total');
  // Sent through the other instance, so that instance 0 journals the GET stream's events only.
  await emit(gateways[1]!.url, sessionId, 2 * WINDOW);
  await waitFor('the held stream journaled past its window', bound(1000), async () => {
    return (await scrapeMetric(gateways[0]!.adminUrl, 'mcp_gateway_journal_events_total')) >= journaled + 2 * WINDOW;
  });
  balancer.pin(resumeOn);
  gate.open();
  const [reset] = await resets.until(1);
  t.equal(reset!.reason, 'gap', 'the client is told: its cursor is older than the journal window');

  // Live at once on the fresh stream, well within the hold period the held one had left.
  await callText(client, 'emit', { count: 2, intervalMs: 5 });
  t.same(await logged.until(5), [1, 2, 3, 1, 2], 'live again on the fresh stream; nothing of the gap shown as if continuous');
  t.equal(await scrapeMetric(gateways[0]!.adminUrl, 'mcp_gateway_held_streams'), 0, 'the held stream was let go');
  t.equal(await scrapeMetric(gateways[0]!.adminUrl, 'mcp_gateway_hold_expiries_total', { reason: 'superseded' }), 1, 'for the new stream');
  const now = await currentGet(gateways[0]!, sessionId);
  t.ok(held !== undefined && now !== undefined && now !== held, 'the signal\'s stream superseded the held one (E4)');
  t.equal(await scrapeMetric(gateways[resumeOn]!.adminUrl, 'mcp_gateway_resumptions_total', { outcome: 'new_stream', reason: 'gap' }), 1);
}

t.test('a held GET is let go for the signal\'s fresh GET, on the instance that holds it', async (t) => {
  await gapAfterHeld(t, 0);
});

t.test('a held GET is let go for the signal\'s fresh GET, held by the other instance', async (t) => {
  await gapAfterHeld(t, 1);
});

t.test('a GET stream with its client attached is left alone: the signal ends after its notification', async (t) => {
  const { gateways, g0, g1, sessionId, streams, first: live, incarnation } = await attachedGet(t);
  await emit(g0.url, sessionId, 2 * WINDOW);
  const events = await live.events.until(2 * WINDOW);

  for (const [i, gateway] of gateways.entries()) {
    const gap = await streams.open(gateway.url, sessionId, events[0]!.id);
    t.equal(gap.headers['mcp-resumption-reason'], 'gap', `through instance ${i}: a gap`);
    await gap.ended;
    t.equal(gap.events.items.length, 1, 'the notification, then the end: the owner keeps its one GET stream for the attached client');
    t.match(JSON.parse(gap.events.items[0]!.data), { method: 'notifications/gateway/stream_reset', params: { reason: 'gap' } });
  }
  t.equal(await currentGet(g1, sessionId), incarnation, 'nothing superseded the live stream');
  await emit(g1.url, sessionId, 2);
  t.equal((await live.events.until(2 * WINDOW + 2)).length, 2 * WINDOW + 2, 'the attached client still gets the live events');
  const resumed = await streams.open(g1.url, sessionId, live.events.items.at(-1)!.id);
  t.equal(resumed.headers['mcp-resumption'], 'continued', 'and its stream stays resumable');
});

t.test('a held GET with a client tailing it through another instance is left alone', async (t) => {
  const { g0, g1, sessionId, streams, first } = await attachedGet(t);
  await emit(g0.url, sessionId, 2 * WINDOW);
  const events = await first.events.until(2 * WINDOW);
  first.close();
  await untilHeld(g0);
  const tail = await streams.open(g1.url, sessionId, events.at(-1)!.id);
  t.equal(tail.headers['mcp-resumption'], 'continued', 'continued through the other instance, which tails the journal');
  // The tail's lease is written as its stream begins: once an event came through it, it is there.
  await emit(g1.url, sessionId, 1);
  await tail.events.until(1);

  const gap = await streams.open(g0.url, sessionId, events[0]!.id);
  t.equal(gap.headers['mcp-resumption-reason'], 'gap');
  await gap.ended;
  t.equal(gap.events.items.length, 1, 'the notification, then the end');
  t.equal(await scrapeMetric(g0.adminUrl, 'mcp_gateway_held_streams'), 1, 'the pump still holds the stream for the tailing client');
  await emit(g1.url, sessionId, 2);
  t.equal((await tail.events.until(3)).length, 3, 'which still gets the live events');
});

t.test('a plain GET refused 409 while another client is attached supersedes nothing: that client\'s stream continues', async (t) => {
  const { gateways, g0, g1, sessionId, streams, first, incarnation } = await attachedGet(t);
  await emit(g0.url, sessionId, 2);
  const cursor = (await first.events.until(2))[1]!.id!;

  // Through either instance: the owner keeps its one GET stream for the attached client (409).
  for (const [i, gateway] of gateways.entries()) {
    const second = await streams.open(gateway.url, sessionId);
    t.equal(second.status, 409, `through instance ${i}: the owner's 409 reaches the client`);
    t.equal(await currentGet(g1, sessionId), incarnation, 'and nothing superseded the live stream (E4: no new stream opened)');
  }
  await emit(g1.url, sessionId, 1);
  t.equal((await first.events.until(3)).length, 3, 'the attached client still gets the live events');

  // Its connection cut, the first client comes back with its cursor: a continuation, not `superseded`.
  first.close();
  await untilHeld(g0);
  await emit(g1.url, sessionId, 2);
  const resumed = await streams.open(g1.url, sessionId, cursor);
  t.equal(resumed.status, 200);
  t.equal(resumed.headers['mcp-resumption'], 'continued', 'the stream continues');
  t.equal(resumed.headers['mcp-resumption-reason'], undefined, 'with no reason');
  const after = await resumed.events.until(3);
  t.equal(after[0]!.id, first.events.items[2]!.id, 'from the event after the cursor, with its own cursor (E3)');
  t.equal(new Set(after.map((e) => e.id)).size, 3, 'then the two journaled while the client was away');
  t.ok(after.every((e) => !e.data.includes('stream_reset')), 'no signal among them');
  t.equal(await scrapeMetric(g0.adminUrl, 'mcp_gateway_hold_expiries_total', { reason: 'superseded' }), 0, 'the held stream was not let go');
});

/** The seq of each of the demo's emit notifications (data {seq, replica}) on a raw stream. */
function seqs(events: readonly { data: string }[]): number[] {
  return events.map((e) => (JSON.parse(e.data) as { params: { data: { seq: number } } }).params.data.seq);
}

for (const [via, name] of [
  [0, 'the same instance'],
  [1, 'the other instance'],
] as const) {
  t.test(`a plain GET takes an idle held GET over at once, through ${name}, and gets what follows`, async (t) => {
    const { gateways, g0, sessionId, streams, first, incarnation } = await attachedGet(t);
    // The usual case: the GET stream carried nothing before its connection dropped.
    first.close();
    await untilHeld(g0);
    await emit(g0.url, sessionId, 2);

    const gateway = gateways[via]!;
    const second = await streams.open(gateway.url, sessionId);
    t.equal(second.status, 200, 'not the owner\'s 409: the held stream is taken over, not asked for again');
    t.equal(second.headers['mcp-resumption'], undefined, 'answered as the fresh stream the client asked for');
    t.same(seqs(await second.events.until(2)), [1, 2], 'with what the replica sent while no client was there, once');
    await emit(gateway.url, sessionId, 2);
    t.same(seqs(await second.events.until(4)), [1, 2, 1, 2], 'then the live events');
    t.equal(new Set(second.events.items.map((e) => e.id)).size, 4, 'each under a cursor of its own');
    t.equal(await currentGet(gateway, sessionId), incarnation, 'the same stream goes on: nothing was superseded');
    t.equal(await scrapeMetric(gateway.adminUrl, 'mcp_gateway_held_takeovers_total'), 1, 'counted as a takeover');
    t.equal(await scrapeMetric(g0.adminUrl, 'mcp_gateway_hold_expiries_total', { reason: 'superseded' }), 0, 'and the held stream was not let go');
  });

  t.test(`a plain GET after one event takes the held GET over from the next one, through ${name}`, async (t) => {
    const { gateways, g0, sessionId, streams, first } = await attachedGet(t);
    await emit(g0.url, sessionId, 1);
    const [seen] = await first.events.until(1);
    first.close();
    await untilHeld(g0);
    await emit(g0.url, sessionId, 2);

    const gateway = gateways[via]!;
    const second = await streams.open(gateway.url, sessionId);
    t.equal(second.status, 200);
    const after = await second.events.until(2);
    t.same(seqs(after), [1, 2], 'the two sent while away, not the one the client had');
    t.notOk(after.some((e) => e.id === seen!.id), 'nothing the client had is sent again');
    await emit(gateway.url, sessionId, 1);
    t.equal((await second.events.until(3)).length, 3, 'then live');

    // With its cursor, as a client that kept it does: the same stream, continued from the journal.
    second.close();
    await untilHeld(g0);
    const resumed = await streams.open(gateway.url, sessionId, after[0]!.id);
    t.equal(resumed.headers['mcp-resumption'], 'continued', 'a cursor of the stream continues it');
    t.equal((await resumed.events.until(2)).length, 2, 'from the event after the cursor');
  });
}

t.test('the SDK client\'s idle GET stream, cut, is continued at its first reconnect through the other instance', async (t) => {
  const { gateways } = await fleet(t);
  const balancer = await startBalancer(t, gateways.map((g) => g.url));
  const gate = gatedFetch();
  gate.open();
  balancer.pin(0);
  const { client, sessionId } = await connect(t, balancer.url, { fetch: gate.fetch });
  const errors: string[] = [];
  client.onerror = (err) => errors.push(err.message);
  const logged = collectLogging(client);
  await gate.streams.until(1);
  // Its priming event recorded, and so on its way to the client (J1): the stream's only event.
  await waitFor('the GET stream primed', bound(5000), async () => (await sessionView(gateways[0]!, sessionId)).incarnations.some((i) => i.kind === 'get' && i.head >= 1));
  balancer.pin(1);
  balancer.cut();

  const [, reopened] = await gate.streams.until(2);
  t.equal(reopened!.status, 200, "its GET, with the cursor of the stream's priming event (J1), is answered 200, not the owner's 409");
  t.equal(gate.reconnections.items.length, 1, 'it sent that cursor as Last-Event-ID');
  t.equal(await callText(client, 'emit', { count: 1, intervalMs: 0 }), 'emitted 1 on get stream', 'a tools/call after the cut works');
  t.same(await logged.until(1), [1], 'the notification emitted after the reconnect arrives');
  t.equal(await scrapeMetric(gateways[1]!.adminUrl, 'mcp_gateway_continuations_total', { source: 'journal' }), 1, 'the held stream was continued from the journal');
  t.notOk(errors.some((m) => /maximum reconnection attempts/i.test(m)), 'the client never gave its GET stream up', { errors });
});

t.test('a GET cut during a burst is taken over by a plain GET: nothing repeated, the rest of the burst arrives', async (t) => {
  const { g0, g1, sessionId, streams, first } = await attachedGet(t);
  const COUNT = 60;
  const burst = post(g0.url, toolCallBody('emit', { count: COUNT, intervalMs: 5 }), { 'mcp-session-id': sessionId }).then((r) => r.text());
  await first.events.until(5);
  first.close();
  const before = seqs(first.events.items);

  // Taken over as soon as the pump has seen its client leave; the owner's 409 until then is retried.
  const second = await streams.open(g1.url, sessionId);
  t.equal(second.status, 200);
  await waitFor('the end of the burst', bound(10_000), () => seqs(second.events.items).at(-1) === COUNT);
  await burst;
  const after = seqs(second.events.items);
  t.ok(after.every((seq, i) => i === 0 || seq === after[i - 1]! + 1), 'in order and contiguous to the end of the burst');
  t.notOk(after.some((seq) => before.includes(seq)), 'nothing the first client had is repeated');
  t.ok(after[0]! > before.at(-1)!, 'it begins after what was written to the first client');
  t.comment(`first client ${before.length} events, the takeover ${after.length}, in flight at the cut ${COUNT - before.length - after.length}`);
});
