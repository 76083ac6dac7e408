/**
 * The cursor key rotation of docs/security.md#rotating-the-cursor-key, rolled out as it says (E2):
 * two gateway processes on one redis-server, both signing with the old key, and a session whose
 * journaled GET stream each one holds. Each of the three steps is applied to one instance at a
 * time (its file rewritten, SIGHUP, its "cursor keys changed" line), and after every
 * single-instance change each client receives a live batch (its last cursor now signed by the
 * instance it is connected through, as that one is configured now), cuts its stream and resumes
 * it with that cursor through the other instance: through A at one stage and through B at the
 * next, the two sessions the other way round, so that at every stage a cursor of each instance is
 * checked by the other one. Each resumption is a continuation:
 * every event once, in order, no signal. During step 2 cursors of the old key are verified by a
 * previous key; once the rollout is done the instances agree on their keys, and a cursor of the
 * old key is foreign (CONTRACT.md §5: a new stream with the signal). Neither key is ever logged.
 */
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import t, { type Test } from 'tap';
import { parse, stringify } from 'yaml';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { findSecrets } from '../helpers/log-scan.js';
import { post, rawSession, toolCallBody } from '../helpers/http.js';
import { rawStreams, type RawEvent, type RawStream } from '../helpers/raw-sse.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { scrapeMetric } from '../helpers/scrape.js';
import { bound, PROBE_TIMEOUT_MS, waitFor } from '../helpers/wait.js';

const HEALTH_INTERVAL_MS = 200;
/** Events the replica sends per call of its emit tool. */
const BATCH = 3;
const KEYS_CHANGED = /^cursor keys changed/;

interface CursorSettings {
  secret: string;
  previousSecrets?: string[];
}

const PUBLISHED = ['mcp_gateway_store_duration_seconds_count', { op: 'publishKeyFingerprint' }] as const;

/**
 * Rewrites the instance's cursor section, sends SIGHUP, waits for the reload's log line, and then
 * until the instance has published its new keys (docs/security.md: a step is finished on an
 * instance then, and the other instances compare with what it published). Two ticks: one may have
 * read the keys before the reload.
 */
async function rekey(gw: GatewayProcess, cursor: CursorSettings): Promise<Record<string, unknown>> {
  const config = parse(await readFile(gw.file, 'utf8')) as Record<string, unknown>;
  config['cursor'] = cursor;
  await writeFile(gw.file, stringify(config));
  const before = gw.logs.length;
  gw.signal('SIGHUP');
  let line: Record<string, unknown> | undefined;
  await waitFor('the "cursor keys changed" line', bound(0), () => {
    line = gw.logs.slice(before).find((l) => KEYS_CHANGED.test(String(l['msg'])));
    return line !== undefined;
  });
  const published = await scrapeMetric(gw.adminUrl, ...PUBLISHED);
  await waitFor('the new keys published', bound(HEALTH_INTERVAL_MS * 2), async () => (await scrapeMetric(gw.adminUrl, ...PUBLISHED)) >= published + 2);
  return line!;
}

/** Calls the demo's emit tool with raw HTTP: BATCH logging notifications on the session's GET stream. */
async function emit(url: string, sessionId: string): Promise<void> {
  const answer = await post(url, toolCallBody('emit', { count: BATCH, intervalMs: 0 }), { 'mcp-session-id': sessionId });
  await answer.text();
  if (answer.status !== 200) throw new Error(`emit answered ${answer.status}`);
}

/** The seq of each emitted event: 1..BATCH per call, so that a lost, repeated or reordered one shows. */
function seqs(events: readonly RawEvent[]): unknown[] {
  return events.map((e) => (JSON.parse(e.data) as { params?: { data?: { seq?: number } } }).params?.data?.seq ?? e.data);
}

function batches(n: number): number[] {
  return Array.from({ length: n * BATCH }, (_, i) => (i % BATCH) + 1);
}

t.setTimeout(240_000);

/** Two gateway processes on one redis-server and one SDK replica, both signing with the old key. */
async function fleet(t: Test, settings: Record<string, unknown> = {}) {
  const [redis, [replica]] = await Promise.all([startRedisServer(t), spawnReplicas(t, 1)]);
  const OLD = randomBytes(32).toString('base64url');
  const NEW = randomBytes(32).toString('base64url');
  const all = {
    store: { type: 'redis', url: redis.url },
    replicas: [{ id: replica!.id, url: replica!.url }],
    health: { intervalMs: HEALTH_INTERVAL_MS, timeoutMs: PROBE_TIMEOUT_MS },
    cursor: { secret: OLD },
    ...settings,
  };
  const gateways = await Promise.all([startGatewayProcess(t, all), startGatewayProcess(t, all)]);
  const [a, b] = gateways as [GatewayProcess, GatewayProcess];
  return { OLD, NEW, gateways, a, b };
}

/** A client session whose GET stream one instance holds (and journals) whenever no client is attached. */
interface Client {
  readonly label: string;
  readonly sessionId: string;
  readonly holder: GatewayProcess;
  stream: RawStream;
  /** Every event received, over all its streams' incarnations' continuations. */
  readonly received: RawEvent[];
  batches: number;
}

t.test('a new cursor key rolled out one instance at a time, step by step: every resumption continues, and the old key ends foreign', async (t) => {
  const { OLD, NEW, gateways, a, b } = await fleet(t);
  const name = (gw: GatewayProcess) => (gw === a ? 'A' : 'B');
  const other = (gw: GatewayProcess) => (gw === a ? b : a);
  const streams = rawStreams(t);

  // One session held by each instance. An event's cursor is signed by the instance that sends it
  // to the client (the holder, or one tailing its journal), as that instance is configured then.
  async function open(holder: GatewayProcess): Promise<Client> {
    const sessionId = await rawSession(holder.url);
    const stream = await streams.open(holder.url, sessionId);
    t.equal(stream.status, 200, `the GET stream held by ${name(holder)} opens`);
    await emit(holder.url, sessionId);
    return { label: `the session held by ${name(holder)}`, sessionId, holder, stream, received: [...(await stream.events.until(BATCH))], batches: 1 };
  }
  const clients = [await open(a), await open(b)];
  const oldCursors = clients.map((c) => c.received.at(-1)!.id!);

  /**
   * A live batch, so that the last cursor is signed by the instance the client is connected
   * through as it is configured now; then the stream cut, a batch sent while the client is away, and the stream resumed through `through`.
   */
  async function cutAndResume(c: Client, through: GatewayProcess, stage: string): Promise<void> {
    const what = `${stage}, ${c.label} resumed through ${name(through)}`;
    const seen = c.stream.events.items.length;
    await emit(c.holder.url, c.sessionId);
    c.received.push(...(await c.stream.events.until(seen + BATCH)).slice(seen));
    c.stream.close();
    await c.stream.ended;
    await waitFor(`${name(c.holder)} holds the GET stream again`, bound(1000), async () => (await scrapeMetric(c.holder.adminUrl, 'mcp_gateway_held_streams')) === 1);
    await emit(c.holder.url, c.sessionId);
    c.batches += 2;
    const cursor = c.received.at(-1)!.id!;
    const resumed = await streams.open(through.url, c.sessionId, cursor);
    t.equal(resumed.status, 200, `${what}: 200`);
    t.equal(resumed.headers['mcp-resumption'], 'continued', `${what}: a continuation`);
    t.equal(resumed.headers['mcp-resumption-reason'], undefined, `${what}: no reason`);
    const away = await resumed.events.until(BATCH);
    t.same(seqs(away), batches(1), `${what}: the batch sent while away, each event once and in order`);
    t.notOk(away.some((e) => e.data.includes('stream_reset')), `${what}: no stream_reset`);
    t.notOk(away.some((e) => e.id === cursor), `${what}: nothing up to the cursor again`);
    c.received.push(...away);
    c.stream = resumed;
  }

  const step1 = { secret: OLD, previousSecrets: [NEW] };
  const step2 = { secret: NEW, previousSecrets: [OLD] };
  const step3 = { secret: NEW };
  const rollout: [string, GatewayProcess, CursorSettings][] = [
    ['step 1 on A', a, step1],
    ['step 1 on B', b, step1],
    ['step 2 on A', a, step2],
    ['step 2 on B', b, step2],
    ['step 3 on A', a, step3],
    ['step 3 on B', b, step3],
  ];
  const previousKeyTotal = async () => (await scrapeMetric(a.adminUrl, 'mcp_gateway_cursor_previous_key_total')) + (await scrapeMetric(b.adminUrl, 'mcp_gateway_cursor_previous_key_total'));
  let through = a;
  let verifiedByPrevious = 0;
  for (const [stage, gw, cursor] of rollout) {
    const line = await rekey(gw, cursor);
    t.equal(line['previousKeys'], cursor.previousSecrets?.length ?? 0, `${stage}: the reload says how many keys only verify`);
    // Alternating: the session held by A through B at one stage, through A at the next, and the
    // session held by B the other way round.
    through = other(through);
    const before = await previousKeyTotal();
    await cutAndResume(clients[0]!, through, stage);
    await cutAndResume(clients[1]!, other(through), stage);
    if (stage.startsWith('step 2')) verifiedByPrevious += (await previousKeyTotal()) - before;
  }
  t.ok(verifiedByPrevious > 0, `during step 2, cursors signed with the old key were verified by a previous key (mcp_gateway_cursor_previous_key_total grew by ${verifiedByPrevious})`);

  for (const c of clients) {
    t.same(seqs(c.received), batches(c.batches), `${c.label}: all ${c.batches * BATCH} events, each once and in order, across ${rollout.length} resumptions`);
    t.equal(new Set(c.received.map((e) => e.id)).size, c.received.length, `${c.label}: each under a cursor of its own`);
  }
  const newStreams = async (gw: GatewayProcess) => scrapeMetric(gw.adminUrl, 'mcp_gateway_resumptions_total', { outcome: 'new_stream' });
  t.equal((await newStreams(a)) + (await newStreams(b)), 0, 'no resumption was answered as a new stream');

  // The rollout done: both instances published their keys since and compared them, and agree.
  for (const gw of gateways) {
    const published = await scrapeMetric(gw.adminUrl, ...PUBLISHED);
    await waitFor(`${name(gw)} compared keys twice more`, bound(HEALTH_INTERVAL_MS * 3), async () => (await scrapeMetric(gw.adminUrl, ...PUBLISHED)) >= published + 2);
    t.equal(await scrapeMetric(gw.adminUrl, 'mcp_gateway_cursor_key_mismatch_instances'), 0, `${name(gw)} counts no instance with another key`);
    t.notOk(gw.logs.some((l) => /uses another cursor key/.test(String(l['msg']))), `${name(gw)} never warned of a mismatch during the rollout`);
  }

  // Step 3 done: a cursor signed only with the old key is foreign, answered as a new stream.
  for (const c of clients) c.stream.close();
  for (const [i, c] of clients.entries()) {
    for (const gw of gateways) {
      const what = `${c.label}, its cursor of the old key through ${name(gw)}`;
      const foreign = await streams.open(gw.url, c.sessionId, oldCursors[i]);
      t.equal(foreign.status, 200, `${what}: 200`);
      t.equal(foreign.headers['mcp-resumption'], 'new-stream', `${what}: a new stream`);
      t.equal(foreign.headers['mcp-resumption-reason'], 'foreign_cursor', `${what}: foreign_cursor`);
      const [signal] = await foreign.events.until(1);
      t.match(JSON.parse(signal!.data), { method: 'notifications/gateway/stream_reset', params: { resumed: false, reason: 'foreign_cursor', lastEventId: oldCursors[i] } }, `${what}: the signal first`);
      foreign.close();
    }
  }

  for (const gw of gateways) t.equal(await gw.stop('SIGTERM'), 0, `${name(gw)} stops cleanly`);
  t.same(findSecrets([...a.lines, ...b.lines], [OLD, NEW]), [], 'neither key is logged');
});

/** sessions.idleTtlMs of the quiet-stream case: short, since step 3 waits for it to pass. */
const IDLE_TTL_MS = 1500;

t.test('a GET stream open and quiet from before step 2 until step 3 holds a cursor of the old key: its resumption is then foreign', async (t) => {
  const { OLD, NEW, a, b } = await fleet(t, { sessions: { idleTtlMs: IDLE_TTL_MS } });
  const streams = rawStreams(t);
  const sessionId = await rawSession(a.url);
  const quiet = await streams.open(a.url, sessionId);
  await emit(a.url, sessionId);
  const cursor = (await quiet.events.until(BATCH)).at(-1)!.id!;

  for (const cursorSettings of [{ secret: OLD, previousSecrets: [NEW] }, { secret: NEW, previousSecrets: [OLD] }]) {
    for (const gw of [a, b]) await rekey(gw, cursorSettings);
  }
  // Step 3 waits until a session left idle since step 2 would be forgotten: the time is the condition.
  const step2Done = performance.now();
  await waitFor('sessions.idleTtlMs since step 2', bound(IDLE_TTL_MS), () => performance.now() - step2Done > IDLE_TTL_MS);
  // All that step 3 waits for holds: no cursor of the old key was verified by a previous key, and
  // sessions.idleTtlMs has passed. But this session was never idle (its stream is open), and its
  // client's last cursor is still one of the old key: the stream carried no event since step 2.
  t.equal((await scrapeMetric(a.adminUrl, 'mcp_gateway_cursor_previous_key_total')) + (await scrapeMetric(b.adminUrl, 'mcp_gateway_cursor_previous_key_total')), 0, 'no cursor was verified by a previous key');
  for (const gw of [a, b]) await rekey(gw, { secret: NEW });

  quiet.close();
  const resumed = await streams.open(b.url, sessionId, cursor);
  t.equal(resumed.status, 200, 'the session is still there');
  t.equal(resumed.headers['mcp-resumption'], 'new-stream', 'but the quiet stream cut after step 3 is not continued');
  t.equal(resumed.headers['mcp-resumption-reason'], 'foreign_cursor', 'its cursor is foreign');
  t.same(quiet.events.items.length, BATCH, 'the stream carried nothing after the first batch');
  t.same(findSecrets([...a.lines, ...b.lines], [OLD, NEW]), [], 'neither key is logged');
});
