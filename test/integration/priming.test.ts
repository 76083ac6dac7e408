/**
 * J1's priming events on real processes: demo replicas that keep no event log (--no-event-store,
 * the SDK's default server), two gateways started with the real CLI on one redis-server, and the
 * real SDK client behind a TCP balancer whose connections are cut for real. The tool waits, then
 * answers with no event before its answer: without the gateway's priming event, a cut before the
 * answer would leave the client without a cursor, and the call would time out. And a continuation
 * from the owner's replay (replicas with an event log, the journal off), primed as well.
 */
import t, { type Test } from 'tap';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { startBalancer, type Balancer } from '../helpers/balancer.js';
import { connect } from '../helpers/client.js';
import { ownerOf, toolCalls } from '../helpers/demo-calls.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas, type ReplicaProcess } from '../helpers/replicas.js';
import { scrapeMetric } from '../helpers/scrape.js';
import { bound } from '../helpers/wait.js';

t.setTimeout(600_000);

/** The tool's run: long enough for the cuts and the SDK client's reconnections (1 s, then 1.5 s). */
const STEPS = 40;
const INTERVAL_MS = 100;
const CALL_TIMEOUT_MS = bound(STEPS * INTERVAL_MS + 10_000);

interface Fleet {
  replicas: ReplicaProcess[];
  gateways: GatewayProcess[];
  balancer: Balancer;
}

/** The client's GETs that resumed: their Last-Event-ID and how the gateway answered. */
function recordingFetch(): { fetch: typeof fetch; resumed: { lastEventId: string; status: number; resumption: string | null }[] } {
  const resumed: { lastEventId: string; status: number; resumption: string | null }[] = [];
  const recording = async (input: string | URL | Request, init?: RequestInit) => {
    const res = await fetch(input, init);
    const lastEventId = new Headers(init?.headers).get('last-event-id');
    if ((init?.method ?? 'GET') === 'GET' && lastEventId !== null) resumed.push({ lastEventId, status: res.status, resumption: res.headers.get('mcp-resumption') });
    return res;
  };
  return { fetch: recording as typeof fetch, resumed };
}

/**
 * Two instances on one redis-server behind the balancer, pinned to the first. By default the
 * replicas keep no event log (the SDK's default server) and the journal is on.
 */
async function fleet(t: Test, options: { eventStore?: boolean; journal?: boolean } = {}): Promise<Fleet> {
  const replicas = await spawnReplicas(t, 2, { eventStore: options.eventStore === true });
  const store = { type: 'redis', url: (await startRedisServer(t)).url };
  const settings = { store, replicas: replicas.map((r) => ({ id: r.id, url: r.url })), resumption: { journal: { enabled: options.journal !== false } } };
  const gateways = await Promise.all([startGatewayProcess(t, settings), startGatewayProcess(t, settings)]);
  const balancer = await startBalancer(t, gateways.map((g) => g.url));
  balancer.pin(0);
  return { replicas, gateways, balancer };
}

/**
 * Calls `progress` without a progress token (no event before its answer); `onToken` runs on each
 * cursor the client is given, with how many came before it.
 */
async function silentCall(client: Client, onToken: (token: string, index: number) => void) {
  const tokens: string[] = [];
  const outcome = await client
    .callTool({ name: 'progress', arguments: { steps: STEPS, intervalMs: INTERVAL_MS } }, undefined, {
      timeout: CALL_TIMEOUT_MS,
      onresumptiontoken: (token) => {
        tokens.push(token);
        onToken(token, tokens.length - 1);
      },
    })
    .then(
      (result) => ({ result, error: undefined }),
      (error: unknown) => ({ result: undefined, error: error as Error }),
    );
  return { tokens, ...outcome };
}

const textOf = (result: unknown): string | undefined => (result as { content?: { text?: string }[] } | undefined)?.content?.[0]?.text;

t.test('a call whose stream carries nothing before its answer, cut before it: answered, the tool run once', async (t) => {
  const { replicas, balancer } = await fleet(t);
  const recording = recordingFetch();
  const { client } = await connect(t, balancer.url, { fetch: recording.fetch });
  const owner = await ownerOf(client, replicas);

  const call = await silentCall(client, (_token, index) => {
    // The priming event is the stream's first: nothing of the replica has come yet.
    if (index === 0) {
      balancer.pin(1);
      balancer.cut();
    }
  });
  t.equal(call.error, undefined, `the call succeeds (${call.error?.message})`);
  t.equal(textOf(call.result), `done after ${STEPS} steps`, 'the answer');
  t.same((await toolCalls(owner))['progress'], { started: 1, finished: 1 }, 'the tool ran once, to its end');
  t.same(
    recording.resumed.filter((r) => r.lastEventId === call.tokens[0]),
    [{ lastEventId: call.tokens[0], status: 200, resumption: 'continued' }],
    'the client resumed once, from the priming cursor, and the stream was continued',
  );
});

/**
 * A call cut after its first cursor and again after the continuation's priming event, through
 * the other instance and back: answered, the tool run once, each continuation begun with the
 * client's position and resumed from it.
 */
async function cutTwice(t: Test, options: Parameters<typeof fleet>[1]) {
  const { replicas, gateways, balancer } = await fleet(t, options);
  const recording = recordingFetch();
  const { client } = await connect(t, balancer.url, { fetch: recording.fetch });
  const owner = await ownerOf(client, replicas);

  const call = await silentCall(client, (_token, index) => {
    // 0: the stream's first cursor; 1: the continuation's priming event, the client's own position again.
    if (index === 0) balancer.pin(1);
    if (index === 1) balancer.pin(0);
    if (index < 2) balancer.cut();
  });
  t.equal(call.error, undefined, `the call succeeds (${call.error?.message})`);
  t.equal(textOf(call.result), `done after ${STEPS} steps`, 'the answer');
  t.same(call.tokens.slice(1, 3), [call.tokens[0], call.tokens[0]], "each continuation began with the client's position");
  t.equal(call.tokens.length, 4, 'then only the answer: nothing twice');
  t.not(call.tokens[3], call.tokens[0], 'the answer under a cursor of its own');
  t.same((await toolCalls(owner))['progress'], { started: 1, finished: 1 }, 'the tool ran once, to its end');
  t.same(
    recording.resumed.filter((r) => r.lastEventId === call.tokens[0]),
    [
      { lastEventId: call.tokens[0], status: 200, resumption: 'continued' },
      { lastEventId: call.tokens[0], status: 200, resumption: 'continued' },
    ],
    'resumed twice from that cursor, continued both times (by the other instance, then the first again)',
  );
  const continuations = (source: string) => Promise.all(gateways.map((g) => scrapeMetric(g.adminUrl, 'mcp_gateway_continuations_total', { source })));
  return { continuations };
}

t.test('a continued stream cut before its next event is resumed again, from its priming cursor', async (t) => {
  // The first cursor is the POST stream's priming event; the journal continues both times.
  const { continuations } = await cutTwice(t, {});
  t.ok((await continuations('journal')).every((n) => n >= 1), 'each instance continued one from the journal');
});

t.test("a continuation from the owner's replay begins with the client's position: cut before its next event, resumed again from it", async (t) => {
  // The journal off: every continuation is the owner's replay (§5 check 7), which the gateway
  // primes with the cursor it continues after, as the journal's continuations are. The first
  // cursor is the replica's own priming event (its event store), under a cursor of the gateway's.
  const { continuations } = await cutTwice(t, { eventStore: true, journal: false });
  t.same(await continuations('owner'), [1, 1], "each instance continued one from the owner's replay");
  t.same(await continuations('journal'), [0, 0], 'none from the journal, which is off');
});

t.test("a replica's own priming event follows the gateway's, at a position of its own: resumed from it, continued once", async (t) => {
  // The SDK's server with an event store primes a POST stream itself (protocol 2025-11-25 on):
  // kept as an event like any other (docs/journal.md), so the client sees two in a row.
  const { replicas, gateways, balancer } = await fleet(t, { eventStore: true });
  const recording = recordingFetch();
  const { client } = await connect(t, balancer.url, { fetch: recording.fetch });
  const owner = await ownerOf(client, replicas);

  const call = await silentCall(client, (_token, index) => {
    // 0: the gateway's priming event; 1: the replica's, under a cursor of the gateway's.
    if (index === 1) {
      balancer.pin(1);
      balancer.cut();
    }
  });
  t.equal(call.error, undefined, `the call succeeds (${call.error?.message})`);
  t.equal(textOf(call.result), `done after ${STEPS} steps`, 'the answer');
  const [gateway, replica, , answer] = call.tokens.map((token) => token.split('.'));
  t.equal(gateway?.[2], '1', "the gateway's priming event at the stream's first position");
  t.same(replica?.slice(1, 3), [gateway?.[1], '2'], "the replica's at the next, in the same incarnation");
  t.equal(call.tokens[2], call.tokens[1], "the continuation began with the client's position, the replica's priming event");
  t.same(answer?.slice(1, 3), [gateway?.[1], '3'], 'then the answer at the next position: nothing twice, nothing lost');
  t.equal(call.tokens.length, 4, 'and nothing else');
  t.same((await toolCalls(owner))['progress'], { started: 1, finished: 1 }, 'the tool ran once, to its end');
  // The session's GET stream, cut too, resumes from its own priming cursor (another incarnation).
  t.same(
    recording.resumed.filter((r) => call.tokens.includes(r.lastEventId)),
    [{ lastEventId: call.tokens[1], status: 200, resumption: 'continued' }],
    "the call resumed once, from the replica's priming cursor, and was continued",
  );
  t.ok((await scrapeMetric(gateways[1]!.adminUrl, 'mcp_gateway_continuations_total', { source: 'journal' })) >= 1, 'from the journal, by the other instance');
});
