/**
 * J6 on real processes: what the gateway serves of a session from its own state goes only to the
 * session's own client. The replicas do what the MCP authorization rules ask of servers (the SDK's
 * `requireBearerAuth` on every request, each session bound to the user of its `initialize`: 401
 * without a token, 403 for another user's), and keep no event log, so that every continuation is
 * served from the gateway's journal. On Redis through two instances (the continuation on the other
 * one tails the journal) and on the memory store through one.
 *
 * - the same token continues exactly;
 * - no token gets the owner's 401 and none of the events, another user's the owner's 403 and none;
 *   either leaves the stream as it was;
 * - a refreshed token of the same user continues (the owner accepts it);
 * - the owner killed after a call's response was journaled: the bound principal gets it, another
 *   credential nothing.
 */
import t, { type Test } from 'tap';
import { AUTH_TOKENS, spawnAuthReplica } from '../helpers/auth-replicas.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { post, rawSession, toolCallBody } from '../helpers/http.js';
import { rawStreams, type RawEvent } from '../helpers/raw-sse.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { scrapeMetric } from '../helpers/scrape.js';
import { bound, waitFor } from '../helpers/wait.js';

t.setTimeout(240_000);

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const [ALICE, ALICE_REFRESHED, BOB] = ['alice-token-1', 'alice-token-2', 'bob-token-1'].map((token) => {
  if (AUTH_TOKENS[token] === undefined) throw new Error(`no such test token ${token}`);
  return bearer(token);
}) as unknown as [Record<string, string>, Record<string, string>, Record<string, string>];

const redis = await startRedisServer(t);

interface Fleet {
  /** Where the client starts, and where it comes back (the other instance on Redis). */
  readonly first: GatewayProcess;
  readonly other: GatewayProcess;
  readonly killOwner: () => Promise<void>;
}

async function fleet(t: Test, store: 'redis' | 'memory'): Promise<Fleet> {
  const replica = await spawnAuthReplica(t, `auth-${store}`);
  const settings = {
    store: store === 'redis' ? { type: 'redis', url: redis.url } : { type: 'memory' },
    replicas: [{ id: replica.id, url: replica.url }],
    // A killed owner is declared gone within a probe or two.
    health: { intervalMs: 200, unhealthyThreshold: 1 },
    resumption: { journal: { holdMs: 600_000 } },
  };
  const first = await startGatewayProcess(t, settings);
  const other = store === 'redis' ? await startGatewayProcess(t, settings) : first;
  return { first, other, killOwner: () => replica.kill() };
}

/** The seq of each of the replica's emit notifications. */
const seqs = (events: readonly RawEvent[]): number[] =>
  events.map((e) => (JSON.parse(e.data) as { params: { data: { seq: number } } }).params.data.seq);

async function emit(url: string, sessionId: string, count: number, credential: Record<string, string>): Promise<void> {
  const answer = await post(url, toolCallBody('emit', { count, intervalMs: 0 }), { ...credential, 'mcp-session-id': sessionId });
  const text = await answer.text();
  if (answer.status !== 200) throw new Error(`emit answered ${answer.status}: ${text}`);
}

async function untilHeld(gateway: GatewayProcess, count = 1): Promise<void> {
  await waitFor('the stream held', bound(5000), async () => (await scrapeMetric(gateway.adminUrl, 'mcp_gateway_held_streams')) === count);
}

const checks = (gateway: GatewayProcess, result: string) => scrapeMetric(gateway.adminUrl, 'mcp_gateway_principal_checks_total', { result });

/** A refusal: the status, and nothing of the session (no event stream, no cursor, no event data). */
async function refusedWith(t: Test, stream: Awaited<ReturnType<ReturnType<typeof rawStreams>['open']>>, status: number, what: string) {
  t.equal(stream.status, status, what);
  t.notOk(String(stream.headers['content-type']).startsWith('text/event-stream'), 'not a stream');
  t.equal(stream.headers['mcp-resumption'], undefined, 'no resumption header');
  const body = await stream.text();
  t.notMatch(body, /"seq"|notifications\/message|id:/, 'none of the session\'s events');
  return body;
}

for (const store of ['redis', 'memory'] as const) {
  t.test(`${store}: a GET stream's journaled events go to the session's own client only`, async (t) => {
    const { first, other } = await fleet(t, store);
    const where = store === 'redis' ? 'through the other instance (tailing the journal)' : 'through the one instance';
    const streams = rawStreams(t);
    const sessionId = await rawSession(first.url, ALICE);
    const alice = await streams.open(first.url, sessionId, undefined, 30_000, ALICE);
    t.equal(alice.status, 200);
    await emit(first.url, sessionId, 3, ALICE);
    const cursor = (await alice.events.until(3))[2]!.id!;
    alice.close();
    await untilHeld(first);
    await emit(first.url, sessionId, 4, ALICE);

    const anonymous = await streams.open(other.url, sessionId, cursor);
    await refusedWith(t, anonymous, 401, `no token: the owner's 401, ${where}`);
    t.match(anonymous.headers['www-authenticate'], /^Bearer error="invalid_token"/, 'with its challenge');
    const bob = await streams.open(other.url, sessionId, cursor, 30_000, BOB);
    await refusedWith(t, bob, 403, `another user: the owner's 403, ${where}`);
    t.match(bob.headers['www-authenticate'], /insufficient_scope/, 'with its challenge');
    t.equal(await checks(other, 'refused'), 2, 'both counted as refused');

    const same = await streams.open(other.url, sessionId, cursor, 30_000, ALICE);
    t.equal(same.headers['mcp-resumption'], 'continued', `the same token continues, ${where}`);
    const missed = await same.events.until(4);
    t.same(seqs(missed), [1, 2, 3, 4], 'with exactly the four events sent while away: the refusals moved nothing');
    t.ok((await checks(other, 'match')) >= 1, 'a match, the owner not asked');
    same.close();
    await untilHeld(first);

    await emit(first.url, sessionId, 2, ALICE);
    const refreshed = await streams.open(other.url, sessionId, missed[3]!.id, 30_000, ALICE_REFRESHED);
    t.equal(refreshed.headers['mcp-resumption'], 'continued', 'a refreshed token of the same user continues: the owner accepted it');
    t.same(seqs(await refreshed.events.until(2)), [1, 2]);
    t.equal(await checks(other, 'accepted'), 1, 'counted as accepted');
    refreshed.close();
    await untilHeld(first);
    const again = await streams.open(other.url, sessionId, missed[3]!.id, 30_000, ALICE_REFRESHED);
    t.equal(again.headers['mcp-resumption'], 'continued');
    t.equal(await checks(other, 'accepted'), 1, 'the session is bound to the refreshed token now: no second ask');
    again.close();
  });

  t.test(`${store}: the owner killed after a call's response was journaled: the bound principal gets it, another nothing`, async (t) => {
    const { first, other, killOwner } = await fleet(t, store);
    const sessionId = await rawSession(first.url, ALICE);
    const call = JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'progress', arguments: { steps: 4, intervalMs: 50 }, _meta: { progressToken: 'p' } } });
    const cut = new AbortController();
    const response = await fetch(first.url, {
      method: 'POST',
      headers: { ...ALICE, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-session-id': sessionId, 'mcp-protocol-version': '2025-06-18' },
      body: call,
      signal: cut.signal,
    });
    t.equal(response.status, 200);
    const cursor = await nthEventId(response, 2);
    cut.abort();
    // Held (J2) until the response passed, then journaled and over.
    await waitFor('the response journaled', bound(10_000), async () => {
      const view = (await (await fetch(`${first.adminUrl}/debug/sessions/${encodeURIComponent(sessionId)}`)).json()) as { incarnations: { kind: string; pendingCalls: number; pump?: unknown; head: number }[] };
      return view.incarnations.some((i) => i.kind === 'post' && i.pendingCalls === 0 && i.pump === undefined && i.head > 2);
    });
    await killOwner();
    await waitFor('the owner declared gone', bound(10_000), async () => {
      const view = (await (await fetch(`${other.adminUrl}/debug/sessions/${encodeURIComponent(sessionId)}`)).json()) as { session: { ownerGone: boolean } | null };
      return view.session?.ownerGone === true;
    });

    const streams = rawStreams(t);
    for (const [who, credential] of [['no token', {}], ['another user', BOB], ["the same user's refreshed token", ALICE_REFRESHED]] as const) {
      const refused = await streams.open(other.url, sessionId, cursor, 30_000, credential);
      const body = await refusedWith(t, refused, 403, `${who}: 403, nobody left to ask`);
      t.equal(refused.headers['mcp-gateway-error'], 'GW_PRINCIPAL_REFUSED');
      t.notMatch(body, /done after/, 'not the result');
    }
    t.equal(await checks(other, 'owner_gone'), 3);

    const alice = await streams.open(other.url, sessionId, cursor, 30_000, ALICE);
    t.equal(alice.status, 200, 'the bound principal is served');
    await alice.ended;
    const data = alice.events.items.map((e) => e.data).join('\n');
    t.match(data, /"progress":3/, 'the progress it missed');
    t.match(data, /done after 4 steps/, 'and the journaled result');
    t.notMatch(data, /"progress":[12]\b/, 'nothing it had');
  });
}

/** Reads an SSE response until its `n`th event with an id (the gateway's priming event not counted, J1); returns that id. */
async function nthEventId(response: Response, n: number): Promise<string> {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let seen = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the stream ended after ${seen} events`);
    buffer += decoder.decode(value, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) !== -1) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const id = /^id: ?(.*)$/m.exec(block)?.[1];
      const priming = /^id: [^\n]*\ndata: ?$/.test(block);
      if (id !== undefined && !priming && ++seen === n) return id;
    }
  }
}
