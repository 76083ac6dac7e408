/**
 * An owner that numbers its events anew (CONTRACT.md §4 E6, §5 check 7 and "Continued"): a real
 * SDK replica whose event ids are a counter that a Last-Event-ID sets back (--renumber), two
 * gateway instances on one store (Redis, and the memory store shared in one process), raw HTTP.
 * The client reconnects through the other instance; nothing the owner sends under an upstream id
 * recorded for another event reaches it, and what it gets is a signal, never a repeated cursor.
 */
import t, { type Test } from 'tap';
import { createMemoryStore } from '../../src/store/memory.js';
import { metricValue, startGateway, type RunningGateway } from '../helpers/gateway.js';
import { post, rawSession, toolCallBody } from '../helpers/http.js';
import { rawStreams, type RawEvent, type RawStream } from '../helpers/raw-sse.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplica, type ReplicaProcess } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';

t.setTimeout(240_000);

const HOLD_MS = 1_000;
const DEADLINE_MS = bound(10_000);

interface Fleet {
  replica: ReplicaProcess;
  a: RunningGateway;
  b: RunningGateway;
}

async function fleet(t: Test, storeType: 'redis' | 'memory', renumber: 'from-cursor' | 'from-1', journal: boolean): Promise<Fleet> {
  const replica = await spawnReplica(t, { id: 'r1', renumber });
  const store = storeType === 'redis' ? { type: 'redis', url: (await startRedisServer(t)).url } : { type: 'memory' };
  const config = {
    store,
    replicas: [{ id: replica.id, url: replica.url }],
    resumption: { journal: journal ? { enabled: true, holdMs: HOLD_MS } : { enabled: false } },
  };
  // Two instances on one store: the memory store is shared by handing both the same one.
  const shared = storeType === 'memory' ? createMemoryStore() : undefined;
  const a = await startGateway(t, config, shared);
  const b = await startGateway(t, config, shared);
  return { replica, a, b };
}

/** GET streams the replica holds open (its /healthz): the owner attached to a resumption before anything is emitted on it. */
async function replicaGetStreams(replica: ReplicaProcess): Promise<number> {
  return ((await (await fetch(new URL('/healthz', replica.url))).json()) as { getStreams: number }).getStreams;
}

async function emit(url: string, sessionId: string, count: number, stream: 'get' | 'request' = 'get'): Promise<Response> {
  return post(url, toolCallBody('emit', { count, intervalMs: 1, stream }), { 'mcp-session-id': sessionId });
}

const seqOf = (e: RawEvent): number | undefined => (JSON.parse(e.data || 'null') as { params?: { data?: { seq?: number } } } | null)?.params?.data?.seq;

/** A session with a GET stream through `a` that carried five events, then cut: their cursors. */
async function fiveThenCut(t: Test, f: Fleet): Promise<{ sessionId: string; cursors: string[]; open: ReturnType<typeof rawStreams>['open'] }> {
  const { open } = rawStreams(t);
  const sessionId = await rawSession(f.a.url);
  const get = await open(f.a.url, sessionId);
  t.equal(get.status, 200, 'the GET stream opens');
  await waitFor('the owner holds the GET stream', DEADLINE_MS, async () => (await replicaGetStreams(f.replica)) === 1);
  await (await emit(f.a.url, sessionId, 5)).text();
  const events = (await get.events.until(5)).filter((e) => e.data !== '');
  t.same(events.map(seqOf), [1, 2, 3, 4, 5], 'five events');
  get.close();
  await waitFor('the owner let the GET stream go', DEADLINE_MS, async () => (await replicaGetStreams(f.replica)) === 0);
  return { sessionId, cursors: events.map((e) => e.id!), open };
}

function isReset(e: RawEvent | undefined, reason: string): boolean {
  if (!e?.data.includes('notifications/gateway/stream_reset')) return false;
  return (JSON.parse(e.data) as { params: { reason: string } }).params.reason === reason;
}

async function divergences(g: RunningGateway, when: string): Promise<number> {
  return metricValue(g.registry, 'mcp_gateway_owner_divergences_total', { replica: 'r1', when });
}

function noOldCursor(t: Test, stream: RawStream, cursors: readonly string[]): void {
  const reused = stream.events.items.filter((e) => e.id !== undefined && cursors.includes(e.id));
  t.same(reused, [], 'no event under a cursor the client already holds');
}

for (const storeType of ['redis', 'memory'] as const) {
  t.test(`${storeType}: journal off, an owner numbering on from the cursor: its "replay" is a gap`, async (t) => {
    const f = await fleet(t, storeType, 'from-cursor', false);
    const { sessionId, cursors, open } = await fiveThenCut(t, f);
    // The client had not processed 4 and 5: it resumes after 3, through the other instance.
    const resuming = open(f.b.url, sessionId, cursors[2]);
    await waitFor('the owner was asked to resume', DEADLINE_MS, async () => (await replicaGetStreams(f.replica)) === 1);
    // The owner replays nothing, then sends new events under the ids of 4 and 5.
    await (await emit(f.b.url, sessionId, 2)).text();
    const stream = await resuming;
    t.equal(stream.headers['mcp-resumption'], 'new-stream');
    t.equal(stream.headers['mcp-resumption-reason'], 'gap');
    const [first] = await stream.events.until(1);
    t.ok(isReset(first, 'gap'), 'the stream_reset signal first', { first });
    noOldCursor(t, stream, cursors);
    t.equal(await divergences(f.b, 'replay'), 1, 'counted, by replica');
  });

  t.test(`${storeType}: journal off, an owner counting from 1 again: the stream ends, its reconnection is a gap on any instance`, async (t) => {
    const f = await fleet(t, storeType, 'from-1', false);
    const { sessionId, cursors, open } = await fiveThenCut(t, f);
    const last = cursors[4]!;
    // Nothing was recorded after the last cursor: nothing to verify, the continuation answers at once.
    const stream = await open(f.b.url, sessionId, last);
    t.equal(stream.headers['mcp-resumption'], 'continued');
    await waitFor('the owner holds the resumed stream', DEADLINE_MS, async () => (await replicaGetStreams(f.replica)) === 1);
    await (await emit(f.b.url, sessionId, 2)).text();
    await stream.ended;
    t.same(stream.events.items.filter((e) => e.data !== ''), [], 'nothing of the fresh counter was forwarded');
    t.equal(await divergences(f.b, 'live'), 1, 'counted as after the replay');
    for (const g of [f.a, f.b]) {
      const explained = (await (await fetch(`${g.adminUrl}/debug/explain?cursor=${encodeURIComponent(last)}&session=${sessionId}`)).json()) as {
        incarnation: { record: { state: string } };
        resumption: { outcome: string; reason: string };
        notes: string[];
      };
      t.equal(explained.incarnation.record.state, 'diverged', 'explain shows the incarnation marked');
      t.ok(explained.notes.some((n) => n.includes('numbers its events anew')), 'and says why');
      t.match(explained.resumption, { outcome: 'new_stream', reason: 'gap' }, 'each instance would answer it as a gap');
    }
    // Through the instance that did not see it happen. (Its fresh stream supersedes the old one.)
    const again = await open(f.a.url, sessionId, last);
    t.equal(again.headers['mcp-resumption-reason'], 'gap', 'the reconnection with the last cursor is a gap');
    t.ok(isReset((await again.events.until(1))[0], 'gap'), 'signalled');
    noOldCursor(t, again, cursors);
  });

  t.test(`${storeType}: journal off, a POST stream cut mid-call, its owner numbering on: the call fails with -32010`, async (t) => {
    const f = await fleet(t, storeType, 'from-cursor', false);
    const { open } = rawStreams(t);
    const sessionId = await rawSession(f.a.url);
    const controller = new AbortController();
    const call = await fetch(f.a.url, {
      method: 'POST',
      body: toolCallBody('emit', { count: 6, intervalMs: 200, stream: 'request' }, 9),
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': sessionId, 'mcp-protocol-version': '2025-06-18' },
      signal: controller.signal,
    });
    const reader = call.body!.getReader();
    let text = '';
    while ((text.match(/\nid: /g) ?? []).length < 2 && !text.startsWith('id: ')) {
      const { value } = await reader.read();
      text += Buffer.from(value!).toString();
    }
    const first = /id: (\S+)/.exec(text)![1]!;
    controller.abort();
    const stream = await open(f.b.url, sessionId, first);
    t.equal(stream.headers['mcp-resumption-reason'], 'gap', 'the renumbered replay is a gap');
    const events = await stream.events.until(2);
    t.ok(isReset(events[0], 'gap'), 'the signal first');
    t.match(JSON.parse(events[1]!.data), { id: 9, error: { code: -32010 } }, 'then the call fails at once');
    await stream.ended;
    t.equal(await divergences(f.b, 'replay'), 1);
  });

  t.test(`${storeType}: journal on, the hold expired, an owner numbering on: the journal's events, then a gap`, async (t) => {
    const f = await fleet(t, storeType, 'from-cursor', true);
    const { sessionId, cursors, open } = await fiveThenCut(t, f);
    await waitFor('the held stream let go', bound(HOLD_MS * 5), async () => (await metricValue(f.a.registry, 'mcp_gateway_hold_expiries_total')) === 1);
    const resuming = open(f.b.url, sessionId, cursors[2]);
    await waitFor('the owner was asked to resume', DEADLINE_MS, async () => (await replicaGetStreams(f.replica)) === 1);
    await (await emit(f.b.url, sessionId, 2)).text();
    const stream = await resuming;
    t.equal(stream.headers['mcp-resumption'], 'continued', 'continued from the journal');
    const got = (await stream.events.until(3)).filter((e) => e.data !== '');
    t.same(got.slice(0, 2).map((e) => e.id), cursors.slice(3), 'the recorded events 4 and 5, with their own cursors');
    t.same(got.slice(0, 2).map(seqOf), [4, 5], 'and their own payloads');
    t.ok(isReset(got[2], 'gap'), 'then what follows them is signalled a gap, on the same response', { event: got[2] });
    const ids = stream.events.items.map((e) => e.id);
    t.same(cursors.map((c) => ids.filter((id) => id === c).length), [0, 0, 0, 1, 1], 'each recorded event once, nothing under a cursor before them');
    t.equal(await divergences(f.b, 'replay'), 1);
    stream.close();
  });
}
