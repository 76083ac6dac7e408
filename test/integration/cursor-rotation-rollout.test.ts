/**
 * The cursor key rotation of docs/security.md#rotating-the-cursor-key, rolled out as it says (E2):
 * two gateway processes on one redis-server, both signing with the old key; each of the three
 * steps is applied to one instance at a time (its file rewritten, SIGHUP), and between any two
 * single-instance changes the client cuts its journaled GET stream and resumes it with its last
 * cursor through the other instance than the last time, so that a cursor signed by one instance is
 * checked by the other at every stage of the rollout. Each resumption is a continuation: every
 * event once, in order, no signal. Once the rollout is done the instances agree on their keys; a
 * cursor of the old key resumed after step 2 was verified by a previous key, and after step 3 it is
 * foreign (CONTRACT.md §5: a new stream with the signal). Neither key is ever logged.
 */
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import t from 'tap';
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

/** Rewrites the instance's cursor section, sends SIGHUP, and waits for the reload's log line. */
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

t.test('a new cursor key rolled out one instance at a time, step by step: every resumption continues, and the old key ends foreign', async (t) => {
  const [redis, [replica]] = await Promise.all([startRedisServer(t), spawnReplicas(t, 1)]);
  const OLD = randomBytes(32).toString('base64url');
  const NEW = randomBytes(32).toString('base64url');
  const settings = {
    store: { type: 'redis', url: redis.url },
    replicas: [{ id: replica!.id, url: replica!.url }],
    health: { intervalMs: HEALTH_INTERVAL_MS, timeoutMs: PROBE_TIMEOUT_MS },
    cursor: { secret: OLD },
  };
  const gateways = await Promise.all([startGatewayProcess(t, settings), startGatewayProcess(t, settings)]);
  const [a, b] = gateways as [GatewayProcess, GatewayProcess];
  const name = (gw: GatewayProcess) => (gw === a ? 'A' : 'B');
  const streams = rawStreams(t);

  // The session whose GET stream is cut and resumed after every change: opened on A, which holds
  // (and journals) its stream whenever no client is attached.
  const sessionId = await rawSession(a.url);
  let stream: RawStream = await streams.open(a.url, sessionId);
  t.equal(stream.status, 200, 'the GET stream opens');
  await emit(a.url, sessionId);
  const received: RawEvent[] = [...(await stream.events.until(BATCH))];
  const oldCursor = received[0]!.id!;

  // A second session, left with a cursor of the old key until step 2 is done everywhere.
  const idleSessionId = await rawSession(b.url);
  const idle = await streams.open(b.url, idleSessionId);
  await emit(b.url, idleSessionId);
  const idleCursor = (await idle.events.until(BATCH)).at(-1)!.id!;
  idle.close();

  let through = a;
  let emitted = 1;
  /** Cuts the stream, sends a batch while the client is away, resumes through the other instance. */
  async function cutAndResume(stage: string): Promise<void> {
    stream.close();
    await stream.ended;
    await waitFor('A holds the GET stream again', bound(1000), async () => (await scrapeMetric(a.adminUrl, 'mcp_gateway_held_streams')) === 1);
    await emit(a.url, sessionId);
    emitted++;
    through = through === a ? b : a;
    const cursor = received.at(-1)!.id!;
    const resumed = await streams.open(through.url, sessionId, cursor);
    t.equal(resumed.status, 200, `${stage}: resumed through ${name(through)}`);
    t.equal(resumed.headers['mcp-resumption'], 'continued', `${stage}: a continuation`);
    t.equal(resumed.headers['mcp-resumption-reason'], undefined, `${stage}: no reason`);
    const away = await resumed.events.until(BATCH);
    // And live again: a batch sent after the resumption arrives on the same stream.
    await emit(through.url, sessionId);
    emitted++;
    const all = await resumed.events.until(2 * BATCH);
    t.same(seqs(all), batches(2), `${stage}: the batch sent while away, then the live one, each event once and in order`);
    t.notOk(all.some((e) => e.data.includes('stream_reset')), `${stage}: no stream_reset`);
    t.equal(away[0]!.id === cursor, false, `${stage}: nothing up to the cursor again`);
    received.push(...all);
    stream = resumed;
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
  for (const [stage, gw, cursor] of rollout) {
    const line = await rekey(gw, cursor);
    t.equal(line['previousKeys'], cursor.previousSecrets?.length ?? 0, `${stage}: the reload says how many keys only verify`);
    await cutAndResume(stage);
    if (stage === 'step 2 on B') {
      const before = (await scrapeMetric(a.adminUrl, 'mcp_gateway_cursor_previous_key_total')) + (await scrapeMetric(b.adminUrl, 'mcp_gateway_cursor_previous_key_total'));
      const resumedIdle = await streams.open(a.url, idleSessionId, idleCursor);
      t.equal(resumedIdle.headers['mcp-resumption'], 'continued', 'after step 2, a cursor of the old key still continues');
      resumedIdle.close();
      const after = (await scrapeMetric(a.adminUrl, 'mcp_gateway_cursor_previous_key_total')) + (await scrapeMetric(b.adminUrl, 'mcp_gateway_cursor_previous_key_total'));
      t.ok(after > before, `verified by a previous key (mcp_gateway_cursor_previous_key_total ${before} -> ${after})`);
    }
  }

  t.same(seqs(received), batches(emitted), `all ${emitted * BATCH} events, each once and in order, across ${rollout.length} resumptions`);
  t.equal(new Set(received.map((e) => e.id)).size, received.length, 'each under a cursor of its own');
  t.equal(await scrapeMetric(a.adminUrl, 'mcp_gateway_resumptions_total', { outcome: 'new_stream' }) + (await scrapeMetric(b.adminUrl, 'mcp_gateway_resumptions_total', { outcome: 'new_stream' })), 0, 'no resumption was answered as a new stream');

  // The rollout done: both instances published their keys since and compared them, and agree.
  for (const gw of gateways) {
    const publishOp = { op: 'publishKeyFingerprint' };
    const published = await scrapeMetric(gw.adminUrl, 'mcp_gateway_store_duration_seconds_count', publishOp);
    await waitFor(`${name(gw)} compared keys twice more`, bound(HEALTH_INTERVAL_MS * 3), async () => (await scrapeMetric(gw.adminUrl, 'mcp_gateway_store_duration_seconds_count', publishOp)) >= published + 2);
    t.equal(await scrapeMetric(gw.adminUrl, 'mcp_gateway_cursor_key_mismatch_instances'), 0, `${name(gw)} counts no instance with another key`);
    t.notOk(gw.logs.some((l) => /uses another cursor key/.test(String(l['msg']))), `${name(gw)} never warned of a mismatch during the rollout`);
  }

  // Step 3 done: a cursor signed only under the old key is foreign, answered as a new stream.
  stream.close();
  for (const gw of gateways) {
    const foreign = await streams.open(gw.url, sessionId, oldCursor);
    t.equal(foreign.status, 200, `through ${name(gw)}: a cursor of the dropped key`);
    t.equal(foreign.headers['mcp-resumption'], 'new-stream', 'is answered as a new stream');
    t.equal(foreign.headers['mcp-resumption-reason'], 'foreign_cursor', 'because it is foreign');
    const [signal] = await foreign.events.until(1);
    t.match(JSON.parse(signal!.data), { method: 'notifications/gateway/stream_reset', params: { resumed: false, reason: 'foreign_cursor', lastEventId: oldCursor } }, 'with the signal first');
    foreign.close();
  }

  for (const gw of gateways) t.equal(await gw.stop('SIGTERM'), 0);
  t.same(findSecrets([...a.lines, ...b.lines], [OLD, NEW]), [], 'neither key is logged');
});
