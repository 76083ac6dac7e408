/**
 * J1's priming events on real processes: demo replicas that keep no event log (--no-event-store,
 * the SDK's default server), two gateways started with the real CLI on one redis-server, and the
 * real SDK client behind a TCP balancer whose connections are cut for real. The tool waits, then
 * answers with no event before its answer: without the gateway's priming event, a cut before the
 * answer would leave the client without a cursor, and the call would time out.
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

async function fleet(t: Test): Promise<Fleet> {
  const replicas = await spawnReplicas(t, 2, { eventStore: false });
  const store = { type: 'redis', url: (await startRedisServer(t)).url };
  const settings = { store, replicas: replicas.map((r) => ({ id: r.id, url: r.url })), resumption: { journal: { enabled: true } } };
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

t.test('a continued stream cut before its next event is resumed again, from its priming cursor', async (t) => {
  const { replicas, gateways, balancer } = await fleet(t);
  const recording = recordingFetch();
  const { client } = await connect(t, balancer.url, { fetch: recording.fetch });
  const owner = await ownerOf(client, replicas);

  const call = await silentCall(client, (_token, index) => {
    // 0: the POST stream's priming event; 1: the continuation's, the client's own position again.
    if (index === 0) balancer.pin(1);
    if (index === 1) balancer.pin(0);
    if (index < 2) balancer.cut();
  });
  t.equal(call.error, undefined, `the call succeeds (${call.error?.message})`);
  t.equal(textOf(call.result), `done after ${STEPS} steps`, 'the answer');
  t.equal(call.tokens[1], call.tokens[0], "the continuation began with the client's position");
  t.same((await toolCalls(owner))['progress'], { started: 1, finished: 1 }, 'the tool ran once, to its end');
  t.same(
    recording.resumed.filter((r) => r.lastEventId === call.tokens[0]),
    [
      { lastEventId: call.tokens[0], status: 200, resumption: 'continued' },
      { lastEventId: call.tokens[0], status: 200, resumption: 'continued' },
    ],
    'resumed twice from the priming cursor, continued both times (by the other instance, then the first again)',
  );
  t.ok((await scrapeMetric(gateways[0]!.adminUrl, 'mcp_gateway_resumptions_total', { outcome: 'continued' })) >= 1, 'the first instance continued one');
  t.ok((await scrapeMetric(gateways[1]!.adminUrl, 'mcp_gateway_resumptions_total', { outcome: 'continued' })) >= 1, 'and the other instance one');
});
