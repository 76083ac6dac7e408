/**
 * The journal part of `npm run demo` (CONTRACT.md §8): replicas that keep no event log, two gateway
 * instances on one store, and a client that reaches them through a relay the demo cuts, as a
 * network would. A cut tool call and a cut GET stream are each continued through the other
 * instance; what the client saw is printed and checked: every event once, the result, the tool
 * run once.
 */
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import type { Replica } from './replica.js';
import { startRelay, type Relay } from './relay.js';
import { CALL_TIMEOUT_MS, connectSession, rawPost, say, textOf, within, type Session } from './session.js';

export interface Instance {
  readonly name: string;
  /** The instance's MCP endpoint. */
  readonly mcpUrl: string;
  readonly adminUrl: string;
}

const STEPS = 10;
const CUT_AFTER_STEP = 3;
const EVENTS = 8;
const CUT_AFTER_EVENT = 2;
const INTERVAL_MS = 200;
/** A cut call takes its own run plus the SDK client's reconnection delay (1 s by default). */
const CUT_CALL_TIMEOUT_MS = CALL_TIMEOUT_MS + STEPS * INTERVAL_MS;

export async function journalScript(a: Instance, b: Instance, replicas: readonly Replica[], path: string): Promise<void> {
  const relay = await startRelay(
    new Map([
      [a.name, a.mcpUrl],
      [b.name, b.mcpUrl],
    ]),
    path,
  );
  say();
  say(`The journal at work: replicas without an event log (--no-event-store), gateway instances ${a.name} and`);
  say(`${b.name} on one store. The client goes through a TCP relay that the demo cuts (${relay.url});`);
  say(`its reconnection goes to the other instance, which continues the stream from the journal.`);
  try {
    await cutToolCall(relay, a, b, replicas);
    relay.lead(a.name);
    await cutGetStream(relay, a, b);
    await showJournalMetrics(b);
  } finally {
    await relay.close();
  }
}

/** A session through the relay that prints each reconnection with its answer. */
function connectThroughRelay(relay: Relay): Promise<Session> {
  return connectSession(relay.url, (res, init) => {
    const lastEventId = new Headers(init.headers).get('last-event-id');
    if (lastEventId === null) return;
    const reason = res.headers.get('mcp-resumption-reason');
    say(`       the client reconnects (GET, Last-Event-ID) through the relay to ${relay.target}: HTTP ${res.status}, Mcp-Resumption: ${res.headers.get('mcp-resumption')}${reason ? ` (${reason})` : ''}`);
  });
}

async function cutToolCall(relay: Relay, a: Instance, b: Instance, replicas: readonly Replica[]): Promise<void> {
  const session = await connectThroughRelay(relay);
  try {
    const owner = replicas.find((r) => r.id === session.owner);
    if (owner === undefined) throw new Error(`whoami answered ${session.owner}, not a replica of this demo`);
    say(`  8. a cut tool call: progress {steps: ${STEPS}, intervalMs: ${INTERVAL_MS}} through ${a.name}, session owned by ${owner.id};`);
    say(`     the relay is cut after progress ${CUT_AFTER_STEP} and leads to ${b.name} from then on:`);
    const seen: number[] = [];
    const started = performance.now();
    const result = await session.client.callTool({ name: 'progress', arguments: { steps: STEPS, intervalMs: INTERVAL_MS } }, undefined, {
      timeout: CUT_CALL_TIMEOUT_MS,
      onprogress: (p) => {
        seen.push(p.progress);
        say(`       progress ${p.progress}/${p.total}   +${Math.round(performance.now() - started)} ms`);
        if (p.progress === CUT_AFTER_STEP) cut(relay, b);
      },
    });
    say(`       result: ${textOf(result)}`);
    expectEachOnce('progress', seen, STEPS);
    const runs = owner.toolCalls()['progress'];
    if (runs?.started !== 1 || runs.finished !== 1) throw new Error(`the tool ran ${JSON.stringify(runs)} times on ${owner.id}, not once`);
    say(`       every progress event once (1 to ${STEPS}); ${owner.id} ran the tool once (1 call started, 1 answered)`);
  } finally {
    await session.client.close();
  }
}

async function cutGetStream(relay: Relay, a: Instance, b: Instance): Promise<void> {
  const session = await connectThroughRelay(relay);
  try {
    const status = await within(CALL_TIMEOUT_MS, () => 'the standalone GET stream was not answered', session.getStream);
    if (status !== 200) throw new Error(`the standalone GET stream got status ${status}`);
    say(`  9. a cut GET stream: emit {count: ${EVENTS}, intervalMs: ${INTERVAL_MS}} on the standalone GET stream through ${a.name};`);
    say(`     the relay is cut after seq ${CUT_AFTER_EVENT} and leads to ${b.name} from then on:`);
    const seen: number[] = [];
    const started = performance.now();
    const all = new Promise<void>((resolve) => {
      session.client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
        const seq = (n.params.data as { seq: number }).seq;
        seen.push(seq);
        say(`       notifications/message seq ${seq}   +${Math.round(performance.now() - started)} ms`);
        if (seq === CUT_AFTER_EVENT) cut(relay, b);
        if (seen.length === EVENTS) resolve();
      });
    });
    // The call goes to the instance directly, past the relay: only the GET stream is cut.
    const call = { jsonrpc: '2.0', id: 1_000, method: 'tools/call', params: { name: 'emit', arguments: { count: EVENTS, intervalMs: INTERVAL_MS } } };
    const answer = await rawPost(a.mcpUrl, session, {}, call);
    await answer.text();
    if (answer.status !== 200) throw new Error(`emit answered HTTP ${answer.status}`);
    await within(CUT_CALL_TIMEOUT_MS, () => `only ${seen.length} of ${EVENTS} events arrived`, all);
    expectEachOnce('notifications/message', seen, EVENTS);
    say(`       every event once (1 to ${EVENTS})`);
  } finally {
    await session.client.close();
  }
}

function cut(relay: Relay, to: Instance): void {
  relay.lead(to.name);
  relay.cut();
  say(`       -- the relay cuts the client's connections --`);
}

function expectEachOnce(what: string, seen: readonly number[], count: number): void {
  const expected = Array.from({ length: count }, (_, i) => i + 1);
  if (seen.join() !== expected.join()) throw new Error(`${what}: the client saw ${seen.join(', ')}, not each of 1 to ${count} once, in order`);
}

async function showJournalMetrics(b: Instance): Promise<void> {
  const text = await (await fetch(`${b.adminUrl}/metrics`, { signal: AbortSignal.timeout(CALL_TIMEOUT_MS) })).text();
  say(` 10. ${b.adminUrl}/metrics of ${b.name} (excerpt):`);
  for (const line of text.split('\n')) {
    if (/^mcp_gateway_(resumptions_total\{outcome="continued"|continuations_total\{|journal_)/.test(line)) say(`       ${line}`);
  }
}
