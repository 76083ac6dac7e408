/**
 * The load generator: its own process (forked by bench/lib/client.ts, driven over IPC), so that
 * the orchestrator's bookkeeping never competes with it and its CPU use can be told apart from the
 * proxy's. undici pools, one connection per concurrent client.
 *
 * Each job answers with one result; long jobs also send `{ mark: 'start' | 'end' }` at the
 * edges of the measured window, so that the orchestrator samples the proxy's CPU exactly there.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import type { Pool } from 'undici';
import { runFleetJob, type FleetJob } from './fleet-load.js';
import { headers, initialize, jsonRpc, mapLimit, pools, PROTOCOL_VERSION } from './lib/mcp-session.js';
import { SseBlocks } from './lib/sse-blocks.js';
import { percentile } from './lib/stats.js';

export type Job =
  | { kind: 'rpc'; url: string; concurrency: number; warmupMs: number; durationMs: number }
  | { kind: 'flood'; url: string; warmupMs: number; durationMs: number }
  | { kind: 'idle-sessions'; url: string; count: number; concurrency: number }
  | { kind: 'idle-streams'; concurrency: number }
  | { kind: 'idle-close' }
  | { kind: 'resume'; url: string; events: number; reps: number; timeoutMs: number }
  | FleetJob;

export interface RpcResult {
  requests: number;
  errors: number;
  seconds: number;
  latenciesMs: { p50: number; p99: number };
  cpuSeconds: number;
  firstError?: string;
}

export interface FloodResult {
  events: number;
  bytes: number;
  seconds: number;
  cpuSeconds: number;
}

export interface IdleResult {
  opened: number;
  failed: number;
  firstError?: string;
}

export interface ResumeResult {
  /** ms from sending the GET to the first replayed event, one per repetition. */
  firstEventMs: number[];
  /** ms from sending the GET to the last of the `events` replayed events. */
  allEventsMs: number[];
  /** The Mcp-Resumption header of each answer (direct: none). */
  resumption: string[];
  /** Repetitions that did not replay every event. */
  failed: number;
  firstError?: string;
}

const DATA_FIELD = Buffer.from('data:');

function cpuSeconds(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}

function mark(which: 'start' | 'end'): void {
  process.send?.({ mark: which });
}

async function rpc(job: Extract<Job, { kind: 'rpc' }>): Promise<RpcResult> {
  const { pool, path } = pools(job.url, job.concurrency);
  const sessions = await Promise.all(Array.from({ length: job.concurrency }, () => initialize(pool, path)));
  const latencies: number[] = [];
  let phase: 'warmup' | 'measure' | 'done' = 'warmup';
  let requests = 0;
  let errors = 0;
  let firstError: string | undefined;
  let nextId = 1;
  const worker = async (session: string) => {
    const h = headers(session);
    while (phase !== 'done') {
      const id = nextId++;
      const body = jsonRpc(id, 'tools/call', { name: 'echo', arguments: { text: 'x' } });
      const started = performance.now();
      let ok = false;
      try {
        const res = await pool.request({ path, method: 'POST', headers: h, body });
        await res.body.text();
        ok = res.statusCode === 200;
        if (!ok) firstError ??= `status ${res.statusCode}`;
      } catch (err) {
        firstError ??= (err as Error).message;
      }
      if (phase !== 'measure') continue;
      if (ok) {
        requests++;
        latencies.push(performance.now() - started);
      } else {
        errors++;
      }
    }
  };
  const workers = sessions.map(worker);
  await delay(job.warmupMs);
  phase = 'measure';
  mark('start');
  const started = performance.now();
  const cpuBefore = cpuSeconds();
  await delay(job.durationMs);
  phase = 'done';
  const seconds = (performance.now() - started) / 1000;
  const cpu = cpuSeconds() - cpuBefore;
  mark('end');
  await Promise.all(workers);
  await pool.close();
  latencies.sort((a, b) => a - b);
  const result: RpcResult = { requests, errors, seconds, latenciesMs: { p50: percentile(latencies, 50), p99: percentile(latencies, 99) }, cpuSeconds: cpu };
  if (firstError !== undefined) result.firstError = firstError;
  return result;
}

/** Counts `data:` fields across chunk boundaries: one per event of the streams in this harness. */
class EventCounter {
  events = 0;
  bytes = 0;
  #carry: Buffer = Buffer.alloc(0);

  add(chunk: Buffer): void {
    this.bytes += chunk.length;
    const buf = this.#carry.length > 0 ? Buffer.concat([this.#carry, chunk]) : chunk;
    let at = buf.indexOf(DATA_FIELD);
    while (at !== -1) {
      this.events++;
      at = buf.indexOf(DATA_FIELD, at + DATA_FIELD.length);
    }
    this.#carry = buf.subarray(Math.max(0, buf.length - (DATA_FIELD.length - 1)));
  }
}

async function flood(job: Extract<Job, { kind: 'flood' }>): Promise<FloodResult> {
  const { pool, path } = pools(job.url, 2);
  const session = await initialize(pool, path);
  const abort = new AbortController();
  const res = await pool.request({
    path,
    method: 'GET',
    headers: { accept: 'text/event-stream', 'mcp-session-id': session, 'mcp-protocol-version': PROTOCOL_VERSION, 'x-bench-sse': 'flood' },
    signal: abort.signal,
  });
  if (res.statusCode !== 200) throw new Error(`GET answered ${res.statusCode}`);
  const counter = new EventCounter();
  let measured = { events: 0, bytes: 0, seconds: 0, cpuSeconds: 0 };
  const reading = (async () => {
    try {
      for await (const chunk of res.body) counter.add(chunk as Buffer);
    } catch {
      // Aborted at the end of the window.
    }
  })();
  await delay(job.warmupMs);
  mark('start');
  const start = { events: counter.events, bytes: counter.bytes, at: performance.now(), cpu: cpuSeconds() };
  await delay(job.durationMs);
  measured = {
    events: counter.events - start.events,
    bytes: counter.bytes - start.bytes,
    seconds: (performance.now() - start.at) / 1000,
    cpuSeconds: cpuSeconds() - start.cpu,
  };
  mark('end');
  abort.abort();
  await reading;
  await pool.destroy();
  if (measured.events === 0) throw new Error('no event arrived in the measured window');
  return measured;
}

/** What the idle-streams jobs hold between calls. */
const idle: { pool?: Pool; path?: string; sessions: string[]; aborts: AbortController[] } = { sessions: [], aborts: [] };

async function idleSessions(job: Extract<Job, { kind: 'idle-sessions' }>): Promise<IdleResult> {
  // One connection per stream, plus the ones that create the sessions.
  const { pool, path } = pools(job.url, job.count + job.concurrency);
  idle.pool = pool;
  idle.path = path;
  let failed = 0;
  let firstError: string | undefined;
  await mapLimit(Array.from({ length: job.count }, (_, i) => i), job.concurrency, async () => {
    try {
      idle.sessions.push(await initialize(pool, path));
    } catch (err) {
      failed++;
      firstError ??= (err as Error).message;
    }
  });
  const result: IdleResult = { opened: idle.sessions.length, failed };
  if (firstError !== undefined) result.firstError = firstError;
  return result;
}

async function idleStreams(job: Extract<Job, { kind: 'idle-streams' }>): Promise<IdleResult> {
  const { pool, path } = idle;
  if (!pool || !path) throw new Error('idle-sessions first');
  let opened = 0;
  let failed = 0;
  let firstError: string | undefined;
  await mapLimit(idle.sessions, job.concurrency, async (session) => {
    const abort = new AbortController();
    try {
      const res = await pool.request({
        path,
        method: 'GET',
        headers: { accept: 'text/event-stream', 'mcp-session-id': session, 'mcp-protocol-version': PROTOCOL_VERSION },
        signal: abort.signal,
      });
      if (res.statusCode !== 200) throw new Error(`GET answered ${res.statusCode}`);
      res.body.on('error', () => undefined);
      res.body.resume();
      idle.aborts.push(abort);
      opened++;
    } catch (err) {
      failed++;
      firstError ??= (err as Error).message;
    }
  });
  const result: IdleResult = { opened, failed };
  if (firstError !== undefined) result.firstError = firstError;
  return result;
}

async function idleClose(): Promise<IdleResult> {
  for (const abort of idle.aborts) abort.abort();
  const opened = idle.aborts.length;
  idle.aborts = [];
  idle.sessions = [];
  await idle.pool?.destroy();
  delete idle.pool;
  return { opened, failed: 0 };
}

function idOfBlock(block: string): string | undefined {
  return block.match(/^id: ?(.*)$/m)?.[1];
}

/** Reads event blocks until `count` events with data arrived; resolves with their ids. */
async function readEvents(reader: SseBlocks, count: number, onFirst?: () => void): Promise<string[]> {
  const ids: string[] = [];
  while (ids.length < count) {
    const block = await reader.next();
    if (block === undefined) throw new Error(`the stream ended after ${ids.length} of ${count} events`);
    if (!/^data:/m.test(block)) continue;
    if (ids.length === 0) onFirst?.();
    ids.push(idOfBlock(block) ?? '');
  }
  return ids;
}

/**
 * On the demo SDK replica (through a proxy or directly): a session whose GET stream carried
 * `events + 1` events, then `reps` times: a GET with Last-Event-ID set to the first event's id,
 * timed to the first and to the last of the `events` replayed events.
 */
async function resume(job: Extract<Job, { kind: 'resume' }>): Promise<ResumeResult> {
  const { pool, path } = pools(job.url, 4);
  const session = await initialize(pool, path);
  const sseHeaders = (extra: Record<string, string> = {}) => ({
    accept: 'text/event-stream',
    'mcp-session-id': session,
    'mcp-protocol-version': PROTOCOL_VERSION,
    ...extra,
  });
  const first = new AbortController();
  const stream = await pool.request({ path, method: 'GET', headers: sseHeaders(), signal: first.signal });
  if (stream.statusCode !== 200) throw new Error(`GET answered ${stream.statusCode}`);
  const reader = new SseBlocks(stream.body);
  const call = await pool.request({
    path,
    method: 'POST',
    headers: headers(session),
    body: jsonRpc(1, 'tools/call', { name: 'emit', arguments: { count: job.events + 1, intervalMs: 0, stream: 'get' } }),
  });
  await call.body.text();
  const ids = await readEvents(reader, job.events + 1);
  first.abort();
  await stream.body.text().catch(() => undefined);
  const lastEventId = ids[0]!;

  const result: ResumeResult = { firstEventMs: [], allEventsMs: [], resumption: [], failed: 0 };
  mark('start');
  for (let rep = 0; rep < job.reps; rep++) {
    const deadline = Date.now() + job.timeoutMs;
    for (;;) {
      const abort = new AbortController();
      const started = performance.now();
      let firstAt = 0;
      try {
        const res = await pool.request({ path, method: 'GET', headers: sseHeaders({ 'last-event-id': lastEventId }), signal: abort.signal });
        if (res.statusCode === 409 && Date.now() < deadline) {
          // The owner has not yet noticed that the previous stream closed.
          await res.body.text();
          await delay(10);
          continue;
        }
        if (res.statusCode !== 200) throw new Error(`resumption answered ${res.statusCode}`);
        const replay = new SseBlocks(res.body);
        const timer = setTimeout(() => abort.abort(), Math.max(1, deadline - Date.now()));
        try {
          await readEvents(replay, job.events, () => (firstAt = performance.now()));
        } finally {
          clearTimeout(timer);
        }
        const done = performance.now();
        result.firstEventMs.push(firstAt - started);
        result.allEventsMs.push(done - started);
        result.resumption.push(String(res.headers['mcp-resumption'] ?? 'none'));
        abort.abort();
        await res.body.text().catch(() => undefined);
      } catch (err) {
        result.failed++;
        result.firstError ??= (err as Error).message;
        abort.abort();
      }
      break;
    }
  }
  mark('end');
  await pool.destroy();
  return result;
}

async function run(job: Job): Promise<unknown> {
  switch (job.kind) {
    case 'rpc':
      return rpc(job);
    case 'flood':
      return flood(job);
    case 'idle-sessions':
      return idleSessions(job);
    case 'idle-streams':
      return idleStreams(job);
    case 'idle-close':
      return idleClose();
    case 'resume':
      return resume(job);
    default:
      return runFleetJob(job);
  }
}

process.on('message', (message: { id: number; job: Job }) => {
  run(message.job).then(
    (result) => process.send?.({ id: message.id, result }),
    (err: unknown) => process.send?.({ id: message.id, error: err instanceof Error ? err.message : String(err) }),
  );
});

// An orchestrator that died leaves no load generator behind.
process.on('disconnect', () => process.exit(0));
