/**
 * Why a client got resumed: false, asked as an operator asks: `mcp-resume-gateway explain` as its
 * own process on the gateway's configuration file, and the admin listener's /debug endpoints of a
 * real gateway process, on a real redis-server, with cursors a real SDK client received.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import t from 'tap';
import { stringify } from 'yaml';
import { CursorCodec } from '../../src/cursor/codec.js';
import type { Explanation, SessionView } from '../../src/resumption/explain.js';
import { connect } from '../helpers/client.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { post, rawSession, refusingPort, toolCallBody } from '../helpers/http.js';
import { outputOf, type Output } from '../helpers/processes.js';
import { rawStreams } from '../helpers/raw-sse.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';

const CLI = fileURLToPath(new URL('../../src/cli.js', import.meta.url));
const HEALTH_INTERVAL_MS = 200;

t.setTimeout(300_000);

async function configFile(settings: Record<string, unknown>): Promise<string> {
  const file = join(await mkdtemp(join(tmpdir(), 'gw-explain-')), 'gateway.yaml');
  await writeFile(file, stringify(settings));
  return file;
}

const explain = (file: string, args: string[]): Promise<Output> =>
  outputOf(spawn(process.execPath, [CLI, 'explain', ...args, '--config', file], { stdio: ['ignore', 'pipe', 'pipe'] }));

async function explainJson(file: string, cursor: string, sessionId?: string): Promise<Explanation> {
  const out = await explain(file, [cursor, ...(sessionId === undefined ? [] : ['--session', sessionId]), '--json']);
  if (out.code !== 0) throw new Error(`explain exited ${out.code}: ${out.stderr}`);
  return JSON.parse(out.stdout) as Explanation;
}

/** The cursors a tool call's own SSE stream carried, as the SDK client saw them. */
async function callCursors(client: Awaited<ReturnType<typeof connect>>['client'], count: number): Promise<string[]> {
  const cursors: string[] = [];
  await client.callTool({ name: 'emit', arguments: { count, intervalMs: 1, stream: 'request' } }, undefined, {
    onresumptiontoken: (token) => cursors.push(token),
  });
  return cursors;
}

/** A cursor whose MAC is another one: same shape, not authentic. */
function forged(cursor: string): string {
  const parts = cursor.split('.');
  const mac = parts[4]!;
  parts[4] = (mac[0] === 'A' ? 'B' : 'A') + mac.slice(1);
  return parts.join('.');
}

t.test('explain and /debug on a gateway with Redis', async (t) => {
  const redis = await startRedisServer(t);
  const replicas = await spawnReplicas(t, 2);
  const gw: GatewayProcess = await startGatewayProcess(t, {
    store: { type: 'redis', url: redis.url },
    replicas: replicas.map((r) => ({ id: r.id, url: r.url })),
    health: { intervalMs: HEALTH_INTERVAL_MS, unhealthyThreshold: 1 },
  });
  const mcp = gw.url;
  const { client, sessionId } = await connect(t, mcp);
  const cursors = await callCursors(client, 3);
  t.ok(cursors.length >= 3, `the SDK client received cursors (${cursors.length})`);
  const inspector = new Redis(redis.url);
  t.teardown(() => inspector.quit());
  const secretKeys = await inspector.keys('*cursor-secret');
  const secret = secretKeys.length === 1 ? await inspector.get(secretKeys[0]!) : null;
  t.ok(secret, 'the gateways agreed a secret through the store');
  const everything: string[] = [];

  await t.test('a cursor in the middle of a finished POST stream continues', async (t) => {
    const e = await explainJson(gw.file, cursors[0]!, sessionId);
    t.match(e.cursor, { mac: 'valid', session: 'match', key: { source: 'agreed' }, position: 1 });
    t.match(e.session, { id: sessionId, state: 'active', ownerGone: false, ownerHealth: 'unknown' });
    t.match(e.incarnation, { recorded: true, positionRecorded: true, record: { kind: 'post', pendingCalls: 0 } });
    t.match(e.resumption, { outcome: 'continued', reason: 'none', status: 200 });
    const text = await explain(gw.file, [cursors[0]!, '--session', sessionId]);
    t.equal(text.code, 0);
    t.match(text.stdout, /^resumption +continued \(status 200\)/m, 'the text says so too');
    t.match(text.stdout, /^ +mac +valid$/m);
    // How the logs and spans name the session: its fingerprint under the agreed key.
    const fingerprint = new CursorCodec(secret!).sessionFingerprint(sessionId);
    t.same(e.sessionFingerprints, { current: fingerprint, previous: [] }, "the session's fingerprint");
    t.match(text.stdout, new RegExp(`^ +logged as +${fingerprint}$`, 'm'), 'the text names it');
    everything.push(JSON.stringify(e), text.stdout, text.stderr);
    // The admin listener agrees, and knows the owner's health.
    const admin = (await (await fetch(`${gw.adminUrl}/debug/explain?cursor=${encodeURIComponent(cursors[0]!)}&session=${encodeURIComponent(sessionId)}`)).json()) as Explanation;
    t.match(admin, { resumption: { outcome: 'continued' }, session: { ownerHealth: 'up' }, sessionFingerprints: { current: fingerprint } });
    everything.push(JSON.stringify(admin));
  });

  await t.test('the last cursor of that stream: complete; without --session: session_unknown', async (t) => {
    const last = await explainJson(gw.file, cursors.at(-1)!, sessionId);
    t.match(last.resumption, { outcome: 'continued', status: 204 });
    const alone = await explainJson(gw.file, cursors[0]!);
    t.match(alone.cursor, { mac: 'valid', session: 'not_checked' });
    t.match(alone.resumption, { outcome: 'rejected', reason: 'session_unknown', status: 404 });
    t.ok(alone.notes.some((n) => /no session given/.test(n)), 'and says why');
  });

  await t.test('a forged cursor: MAC invalid, foreign_cursor, its fields shown as unauthenticated', async (t) => {
    const e = await explainJson(gw.file, forged(cursors[0]!), sessionId);
    t.match(e.cursor, { mac: 'invalid', foreign: 'bad_mac', position: 1 });
    t.equal(e.incarnation, null, 'the store is not asked about a forged incarnation');
    t.match(e.resumption, { outcome: 'new_stream', reason: 'foreign_cursor', status: 200 });
    const text = await explain(gw.file, [forged(cursors[0]!), '--session', sessionId]);
    t.match(text.stdout, /not authenticated/);
    const junk = await explainJson(gw.file, 'not-a-cursor', sessionId);
    t.match(junk.cursor, { mac: 'not_checked', foreign: 'bad_parts' });
    t.match(junk.resumption, { reason: 'foreign_cursor' });
    const other = await rawSession(mcp);
    t.match((await explainJson(gw.file, cursors[0]!, other)).resumption, { reason: 'session_mismatch' }, 'a cursor of another session');
    everything.push(JSON.stringify(e), text.stdout);
  });

  await t.test('a GET stream superseded by a newer one; the session view lists both and the one open here', async (t) => {
    const raw = rawStreams(t);
    const session = await rawSession(mcp);
    const first = await raw.open(mcp, session);
    t.equal(first.status, 200);
    await (await post(mcp, toolCallBody('emit', { count: 1, intervalMs: 1, stream: 'get' }), { 'mcp-session-id': session })).text();
    const [event] = await first.events.until(1);
    const cursor = event!.id!;
    first.close();
    // A plain GET would take the held stream over (it goes on); a cursor that is not one is a
    // new stream, whose fresh GET supersedes the held one.
    const second = await raw.open(mcp, session, 'not-a-cursor');
    t.equal(second.headers['mcp-resumption'], 'new-stream');
    const e = await explainJson(gw.file, cursor, session);
    t.match(e.incarnation, { recorded: true, record: { kind: 'get' } });
    t.ok(e.incarnation?.supersededBy, 'superseded by the newer GET');
    t.match(e.resumption, { outcome: 'new_stream', reason: 'superseded' });

    const response = await fetch(`${gw.adminUrl}/debug/sessions/${encodeURIComponent(session)}`);
    t.equal(response.status, 200);
    const view = (await response.json()) as SessionView;
    t.match(view.session, { id: session, state: 'active', ownerHealth: 'up' });
    t.same(view.fingerprints, { current: new CursorCodec(secret!).sessionFingerprint(session), previous: [] }, 'the session view names its fingerprint');
    t.equal(view.currentGet, e.incarnation?.supersededBy);
    t.same(view.incarnations.filter((i) => i.kind === 'get').length, 2, 'both GET incarnations');
    t.ok(view.openStreams.recorded.includes(view.currentGet!), 'the current GET is open');
    t.same(view.openStreams.here.map((s) => s.incarnation), [view.currentGet], 'and relayed by this instance');
    const unknown = await fetch(`${gw.adminUrl}/debug/sessions/nobody`);
    t.equal(unknown.status, 404);
    t.match(await unknown.json(), { session: null, fingerprints: { current: new CursorCodec(secret!).sessionFingerprint('nobody') } }, "a session the store no longer holds still gets its fingerprint, to find its lines");
    t.equal((await fetch(`${gw.adminUrl}/debug/explain`)).status, 400, 'no cursor: 400');
    t.equal((await fetch(`${new URL(gw.url).origin}/debug/sessions/${encodeURIComponent(session)}`)).status, 404, 'never on the MCP listener');
    everything.push(JSON.stringify(view));
    second.close();
  });

  await t.test('the owner gone: shown, and a journaled POST stream still continues (J4)', async (t) => {
    const owner = (await explainJson(gw.file, cursors[0]!, sessionId)).session!.owner;
    await replicas.find((r) => r.id === owner)!.kill();
    const adminExplain = `${gw.adminUrl}/debug/explain?cursor=${encodeURIComponent(cursors[0]!)}&session=${encodeURIComponent(sessionId)}`;
    await waitFor('the gateway declares the owner gone', bound(10_000), async () => ((await (await fetch(adminExplain)).json()) as Explanation).session?.ownerGone === true);
    const e = await explainJson(gw.file, cursors[0]!, sessionId);
    t.match(e.session, { ownerGone: true });
    // J4: what the journal holds survives its replica: the POST stream is continued from it, then ends.
    t.match(e.resumption, { outcome: 'continued', status: 200, detail: /from the journal.*the stream ends/ });
    everything.push(JSON.stringify(e));
  });

  t.test('no secret in anything explain or /debug said', async (t) => {
    for (const text of everything) t.notOk(text.includes(secret!), 'the cursor secret is not shown');
    t.end();
  });
});

t.test('explain: exit codes', async (t) => {
  const redis = await startRedisServer(t);
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGatewayProcess(t, { store: { type: 'redis', url: redis.url }, replicas: [{ id: replica!.id, url: replica!.url }] });
  const missing = await explain(gw.file, []);
  t.equal(missing.code, 2, 'no cursor: bad usage');
  t.match(missing.stderr, /explain needs the cursor/);

  const port = await refusingPort();
  const replicasOf = { replicas: [{ id: replica!.id, url: replica!.url }] };
  const down = await explain(await configFile({ store: { type: 'redis', url: `redis://:storepass@127.0.0.1:${port}`, connectTimeoutMs: 200 }, ...replicasOf }), ['1.x', '--session', 's']);
  t.equal(down.code, 1, 'the store does not answer: 1');
  t.match(down.stderr, /the store does not answer/);
  t.notOk(`${down.stdout}${down.stderr}`.includes('storepass'), 'the store password is not shown');

  const inProcess = await explain(await configFile(replicasOf), ['1.x']);
  t.equal(inProcess.code, 2, 'a memory store cannot be read from outside');
  t.match(inProcess.stderr, /\/debug\/explain/);
});
