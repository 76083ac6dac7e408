/**
 * The journal end to end (CONTRACT.md §8), on real processes: demo replicas that keep no event log
 * (--no-event-store, the SDK's default server), gateways started with the real CLI, one real
 * redis-server where two gateways share a store, and the real SDK client behind a TCP balancer
 * whose connections are cut for real. What is asserted is what the client and the replica saw: every
 * progress event once, the result, and the tool run once.
 */
import t, { type Test } from 'tap';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { startBalancer, type Balancer } from '../helpers/balancer.js';
import { connect } from '../helpers/client.js';
import { ownerOf, toolCalls } from '../helpers/demo-calls.js';
import { post, toolCallBody } from '../helpers/http.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas, type ReplicaProcess } from '../helpers/replicas.js';
import { scrapeMetric } from '../helpers/scrape.js';
import { bound, waitFor } from '../helpers/wait.js';

// Each test starts its own replicas, gateways and Redis as processes: beyond the default per-file
// timeout on a loaded machine, not a bound of the gateway.
t.setTimeout(600_000);

const STEPS = 20;
const CUT_AFTER = 5;
/** Slow enough that the cut lands while the tool still runs, and the client reconnects before its end. */
const INTERVAL_MS = 100;
/** The call may take its own run plus the SDK client's reconnection delays (1 s, then 1.5 s). */
const CALL_TIMEOUT_MS = bound(STEPS * INTERVAL_MS + 2_500);
/** A call whose reconnection the test holds in the balancer: it waits for the test's own steps too. */
const HELD_CALL_TIMEOUT_MS = bound(60_000);
const ONE_TO = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

interface Fleet {
  replicas: ReplicaProcess[];
  gateways: GatewayProcess[];
  balancer: Balancer;
}

/**
 * Two replicas without a log, `gateways` gateway instances (on one redis-server when more than
 * one, else the memory store) with the journal on, and the balancer in front of them.
 */
async function fleet(t: Test, gateways: number, journal: Record<string, unknown> = {}): Promise<Fleet> {
  const replicas = await spawnReplicas(t, 2, { eventStore: false });
  const store = gateways > 1 ? { type: 'redis', url: (await startRedisServer(t)).url } : { type: 'memory' };
  const settings = {
    store,
    replicas: replicas.map((r) => ({ id: r.id, url: r.url })),
    // A shorter lease than the default: a dead instance's streams are taken over sooner.
    resumption: { journal: { enabled: true, leaseMs: 3000, ...journal } },
  };
  const started = await Promise.all(Array.from({ length: gateways }, () => startGatewayProcess(t, settings)));
  const balancer = await startBalancer(t, started.map((g) => g.url));
  // Everything before the cut goes to the first instance.
  balancer.pin(0);
  return { replicas, gateways: started, balancer };
}

/** GET responses the client received: status and the resumption headers. */
function recordingFetch(): { fetch: typeof fetch; gets: { status: number; resumption: string | null; reason: string | null }[] } {
  const gets: { status: number; resumption: string | null; reason: string | null }[] = [];
  const recording = async (input: string | URL | Request, init?: RequestInit) => {
    const res = await fetch(input, init);
    if ((init?.method ?? 'GET') === 'GET') {
      gets.push({ status: res.status, resumption: res.headers.get('mcp-resumption'), reason: res.headers.get('mcp-resumption-reason') });
    }
    return res;
  };
  return { fetch: recording as typeof fetch, gets };
}

/**
 * Calls `progress` (STEPS steps by default) and runs `atCut` when the CUT_AFTER-th progress event
 * reaches the client; returns the progress values seen, in order, and the call's outcome.
 */
async function progressAcrossCut(
  client: Client,
  atCut: () => void,
  { timeout = CALL_TIMEOUT_MS, steps = STEPS, intervalMs = INTERVAL_MS, cutAfter = CUT_AFTER } = {},
) {
  const seen: number[] = [];
  const outcome = await client
    .callTool({ name: 'progress', arguments: { steps, intervalMs } }, undefined, {
      timeout,
      onprogress: (p) => {
        seen.push(p.progress);
        if (p.progress === cutAfter) atCut();
      },
    })
    .then(
      (result) => ({ result, error: undefined }),
      (error: unknown) => ({ result: undefined, error: error as { code?: number; message: string; data?: unknown } }),
    );
  return { seen, ...outcome };
}

const textOf = (result: unknown): string | undefined => (result as { content?: { text?: string }[] } | undefined)?.content?.[0]?.text;

const journaled = (gateway: GatewayProcess) => scrapeMetric(gateway.adminUrl, 'mcp_gateway_journal_events_total');

/**
 * Waits until `gateway` journaled `events` more events than `before`: a call's stream, which is
 * the session's only stream that carries events by then (its GET stream's priming event and
 * `whoami`'s stream were journaled before `before` was read). A call's stream is its priming
 * event (J1), its progress events, then its response.
 */
async function journaledAll(gateway: GatewayProcess, before: number, events: number): Promise<void> {
  await waitFor(`${events} events journaled`, CALL_TIMEOUT_MS, async () => (await journaled(gateway)) >= before + events);
}

t.test('a tool call cut after 5 of 20 progress events: every event once, the result, the tool run once', async (t) => {
  const { replicas, gateways, balancer } = await fleet(t, 1);
  const { client } = await connect(t, balancer.url);
  const owner = await ownerOf(client, replicas);

  const call = await progressAcrossCut(client, () => balancer.cut());
  t.equal(call.error, undefined, `the call succeeds (${call.error?.message})`);
  t.same(call.seen, ONE_TO(STEPS), 'every progress event once, in order');
  t.equal(textOf(call.result), `done after ${STEPS} steps`, 'the result');
  t.same((await toolCalls(owner))['progress'], { started: 1, finished: 1 }, 'the tool ran once, to its end');
  t.ok(balancer.accepted[0]! > 1, 'the client reconnected after the cut');
  t.ok((await scrapeMetric(gateways[0]!.adminUrl, 'mcp_gateway_resumptions_total', { outcome: 'continued' })) >= 1, 'the gateway continued the stream');
});

t.test('the same with the continuation on the other instance (two gateways, one redis-server)', async (t) => {
  const { replicas, gateways, balancer } = await fleet(t, 2);
  const { client } = await connect(t, balancer.url);
  const owner = await ownerOf(client, replicas);
  const before = balancer.accepted[1]!;

  const call = await progressAcrossCut(client, () => {
    balancer.pin(1);
    balancer.cut();
  });
  t.equal(call.error, undefined, `the call succeeds (${call.error?.message})`);
  t.same(call.seen, ONE_TO(STEPS), 'every progress event once, in order');
  t.equal(textOf(call.result), `done after ${STEPS} steps`, 'the result');
  t.same((await toolCalls(owner))['progress'], { started: 1, finished: 1 }, 'the tool ran once, to its end');
  t.ok(balancer.accepted[1]! > before, 'the client reconnected to the other instance');
  t.ok((await scrapeMetric(gateways[1]!.adminUrl, 'mcp_gateway_resumptions_total', { outcome: 'continued' })) >= 1, 'which continued the stream');
});

/** A client whose standalone GET stream is attached, and the seq of each emitted event it received. */
async function getStreamClient(t: Test, url: string, onEvent: (seq: number) => void) {
  let attached!: () => void;
  const getStream = new Promise<void>((resolve) => (attached = resolve));
  const connected = await connect(t, url, {
    fetch: async (input, init) => {
      const res = await fetch(input, init);
      if (init?.method === 'GET' && res.ok) attached();
      return res;
    },
  });
  connected.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => onEvent((n.params.data as { seq: number }).seq));
  // A notification for a GET stream that is not attached yet is not delivered: wait for it.
  await getStream;
  return connected;
}

/**
 * Emits `count` events on the session's GET stream, the call sent to `gatewayUrl` directly, past
 * the balancer: only the GET stream is cut.
 */
async function emitOnGet(gatewayUrl: string, sessionId: string, count: number): Promise<void> {
  const res = await post(gatewayUrl, toolCallBody('emit', { count, intervalMs: INTERVAL_MS }), { 'mcp-session-id': sessionId });
  const body = await res.text();
  if (res.status !== 200 || !body.includes(`emitted ${count} on get stream`)) throw new Error(`emit answered ${res.status}: ${body.slice(0, 300)}`);
}

t.test('a GET stream cut after 5 of 20 events, continued on the other instance: every event once', async (t) => {
  const { gateways, balancer } = await fleet(t, 2);
  const seqs: number[] = [];
  let all!: () => void;
  const allSeen = new Promise<void>((resolve) => (all = resolve));
  const { sessionId } = await getStreamClient(t, balancer.url, (seq) => {
    seqs.push(seq);
    if (seq === CUT_AFTER) {
      balancer.pin(1);
      balancer.cut();
    }
    if (seq === STEPS) all();
  });
  await emitOnGet(gateways[0]!.url, sessionId, STEPS);
  await allSeen;
  t.same(seqs, ONE_TO(STEPS), 'every event of the GET stream once, in order');
  t.ok((await scrapeMetric(gateways[1]!.adminUrl, 'mcp_gateway_continuations_total', { source: 'journal' })) >= 1, 'continued from the journal by the other instance');
});

t.test('the instance holding a GET stream SIGKILLed: what it journaled, then gap, never a silent omission', async (t) => {
  const { gateways, balancer } = await fleet(t, 2);
  const [holder, other] = gateways as [GatewayProcess, GatewayProcess];
  const seen: { seq?: number; reset?: string }[] = [];
  let killed: Promise<unknown> = Promise.resolve();
  let reset!: () => void;
  const resetSeen = new Promise<void>((resolve) => (reset = resolve));
  const { client, sessionId } = await getStreamClient(t, balancer.url, (seq) => {
    seen.push({ seq });
    if (seq === CUT_AFTER) {
      balancer.pin(1);
      balancer.cut();
      killed = holder.stop('SIGKILL');
    }
  });
  client.fallbackNotificationHandler = async (n) => {
    if (n.method !== 'notifications/gateway/stream_reset') return;
    seen.push({ reset: (n.params as { reason: string }).reason });
    reset();
  };
  await emitOnGet(other.url, sessionId, STEPS);
  await killed;
  await resetSeen;
  const seqs = seen.flatMap((e) => (e.seq === undefined ? [] : [e.seq]));
  t.same(seqs.slice(0, CUT_AFTER), ONE_TO(CUT_AFTER), 'the events before the cut, each once');
  t.equal(new Set(seqs).size, seqs.length, 'no event twice');
  t.same([...seqs].sort((a, b) => a - b), seqs, 'in order');
  for (let i = 1; i < seen.length; i++) {
    const [previous, current] = [seen[i - 1]!, seen[i]!];
    if (previous.seq !== undefined && current.seq !== undefined && current.seq !== previous.seq + 1) {
      t.fail(`seq ${previous.seq} then ${current.seq} without a stream_reset between them`);
    }
  }
  t.match(seen.find((e) => e.reset !== undefined), { reset: 'gap' }, 'the break is signalled: stream_reset, reason gap');
});

t.test('the owner SIGKILLed after its response was journaled: the response is delivered', async (t) => {
  const { replicas, gateways, balancer } = await fleet(t, 2);
  const { client } = await connect(t, balancer.url);
  const owner = await ownerOf(client, replicas);
  const before = await journaled(gateways[0]!);

  const calling = progressAcrossCut(
    client,
    () => {
      // The client's reconnection waits in the balancer until the owner is dead.
      balancer.pause();
      balancer.cut();
    },
    { timeout: HELD_CALL_TIMEOUT_MS },
  );
  // Priming, progress, response: the response is journaled, so the tool has finished.
  await journaledAll(gateways[0]!, before, STEPS + 2);
  const ran = await toolCalls(owner);
  await owner.kill('SIGKILL');
  balancer.pin(1);
  balancer.resume();

  const call = await calling;
  t.equal(call.error, undefined, `the call succeeds (${call.error?.message})`);
  t.same(call.seen, ONE_TO(STEPS), 'every progress event once, in order');
  t.equal(textOf(call.result), `done after ${STEPS} steps`, 'the result, from the journal of a replica that is gone');
  t.same(ran['progress'], { started: 1, finished: 1 }, 'the tool ran once');
});

t.test("a cursor older than the journal's window: gap, and the call settles", async (t) => {
  const WINDOW = 16;
  const steps = WINDOW * 2;
  const { replicas, gateways, balancer } = await fleet(t, 1, { maxEvents: WINDOW });
  const recording = recordingFetch();
  const { client } = await connect(t, balancer.url, { fetch: recording.fetch });
  const owner = await ownerOf(client, replicas);
  const before = await journaled(gateways[0]!);

  const cut = () => {
    balancer.pause();
    balancer.cut();
  };
  const calling = progressAcrossCut(client, cut, { timeout: HELD_CALL_TIMEOUT_MS, steps, intervalMs: INTERVAL_MS / 10, cutAfter: 2 });
  await journaledAll(gateways[0]!, before, steps + 2);
  balancer.resume();

  const call = await calling;
  const { seen } = call;
  // The session's GET stream holds its priming cursor too (J1): its reconnection is continued.
  const resumed = recording.gets.filter((g) => g.resumption !== null && g.resumption !== 'continued');
  t.same(resumed, [{ status: 200, resumption: 'new-stream', reason: 'gap' }], "the call's reconnection is answered as a new stream, reason gap");
  // The call settles instead of waiting for its timeout, with the response it was journaled with
  // (J4): the events before it are lost (the signal says so), the response is not.
  t.equal(call.error, undefined, 'the call does not fail');
  t.equal(textOf(call.result), `done after ${steps} steps`, 'the call settles with its journaled result');
  t.same(seen, ONE_TO(seen.length), 'what the client saw has no gap and no repeat');
  t.ok(seen.length < steps, 'and is not everything');
  t.same((await toolCalls(owner))['progress'], { started: 1, finished: 1 }, 'the tool ran once: not again');
});

t.test("a cursor older than the journal's window while the call still runs: gap, then the call followed to its result", async (t) => {
  const WINDOW = 8;
  // Long enough that the call still runs when the client is let back: the test waits only for a
  // window and a few more of its events to be journaled.
  const steps = 100;
  const { replicas, gateways, balancer } = await fleet(t, 1, { maxEvents: WINDOW });
  const recording = recordingFetch();
  const { client } = await connect(t, balancer.url, { fetch: recording.fetch });
  const owner = await ownerOf(client, replicas);
  const before = await journaled(gateways[0]!);

  const cut = () => {
    balancer.pause();
    balancer.cut();
  };
  const calling = progressAcrossCut(client, cut, { timeout: HELD_CALL_TIMEOUT_MS, steps, intervalMs: INTERVAL_MS, cutAfter: 2 });
  await journaledAll(gateways[0]!, before, WINDOW + 4);
  const running = (await toolCalls(owner))['progress'];
  balancer.resume();

  const call = await calling;
  const { seen } = call;
  t.same(running, { started: 1, finished: 0 }, 'the call still ran when the client came back');
  // The session's GET stream holds its priming cursor too (J1): its reconnection is continued.
  const resumed = recording.gets.filter((g) => g.resumption !== null && g.resumption !== 'continued');
  t.same(resumed, [{ status: 200, resumption: 'new-stream', reason: 'gap' }], "the call's reconnection is answered as a new stream, reason gap");
  t.equal(call.error, undefined, `the call does not fail with -32010 (${JSON.stringify(call.error)})`);
  t.equal(textOf(call.result), `done after ${steps} steps`, 'the call settles with its result');
  t.ok(
    seen.every((p, i) => i === 0 || p > seen[i - 1]!),
    'no progress event twice or out of order',
  );
  t.ok(seen.length < steps, 'what the window lost is not shown');
  t.equal(seen[seen.length - 1], steps, 'the call was followed live to its last event');
  t.same((await toolCalls(owner))['progress'], { started: 1, finished: 1 }, 'the tool ran once');
});
