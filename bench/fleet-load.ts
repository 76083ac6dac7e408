/**
 * The load generator's jobs for the work MCP fleets do (bench/load.ts runs them): tool calls at a
 * fixed rate (open loop), many GET streams at a modest rate each, and a reconnection storm of
 * those streams. Latency is read at the client, against the time a request was due (open loop: a
 * request that waits for a connection or for a late timer counts that wait) or the time the
 * replica stamped on an event.
 */
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { Pool } from 'undici';
import { headers, initialize, mapLimit, pools, PROTOCOL_VERSION } from './lib/mcp-session.js';
import { percentile } from './lib/stats.js';
import { stamp } from './upstream.js';

export type FleetJob =
  | {
      kind: 'open-loop';
      url: string;
      sessions: number;
      /** Calls per second, sent on schedule whatever the answers do. */
      rate: number;
      /** Share of the calls answered on an SSE stream with `progress` notifications first. */
      sseShare: number;
      progress: number;
      warmupMs: number;
      durationMs: number;
    }
  | { kind: 'streams-open'; urls: string[]; count: number; rate: number; concurrency: number; renumbered?: boolean }
  | { kind: 'streams-measure'; warmupMs: number; durationMs: number }
  | { kind: 'streams-storm'; timeoutMs: number; settleMs: number }
  | { kind: 'streams-close' };

export interface Percentiles {
  p50: number;
  p99: number;
  p999: number;
}

export interface OpenLoopResult {
  requests: number;
  errors: number;
  seconds: number;
  /** ms from when each call was due to its whole answer. */
  latenciesMs: Percentiles;
  /** Calls still unanswered when the window closed (counted as errors too). */
  unanswered: number;
  firstError?: string;
}

export interface StreamsOpenResult {
  opened: number;
  failed: number;
  firstError?: string;
}

export interface StreamsMeasureResult {
  events: number;
  seconds: number;
  /** ms from the replica's stamp to the event's arrival at the client. */
  latenciesMs: Percentiles;
  /** Over the whole life of the streams so far: events skipped or received twice, by their seq. */
  lost: number;
  repeated: number;
  streamsOpen: number;
}

export interface StormResult {
  streams: number;
  /** Answers by status and Mcp-Resumption header, e.g. "200 continued": 1998. */
  outcomes: Record<string, number>;
  /** ms from the cut to the first event after it on every stream (NaN if one never came). */
  allContinuedMs: number;
  /** ms from each reconnection's request to its response headers (a 503 and its retry: two). */
  decisionMs: Percentiles;
  /** 503 answers (each retried after its Retry-After) and connections reset or refused (after a second), as a client does. */
  unavailable: number;
  /** Streams with no event within the timeout after reconnecting. */
  silent: number;
  /** Events skipped or received twice by the streams continued (a new stream starts a new sequence). */
  lost: number;
  /** stream_reset notifications since the cut: streams that could not go on, said so. */
  signalled: number;
  /** The same, by the reason each gave. */
  signalReasons: Record<string, number>;
  repeated: number;
  /** The first stream that received an event twice: its answer, last seq before the cut, seqs after. */
  firstRepeat?: string;
  firstError?: string;
}

function mark(which: 'start' | 'end'): void {
  process.send?.({ mark: which });
}

function ms(sorted: number[]): Percentiles {
  sorted.sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99), p999: percentile(sorted, 99.9) };
}

// ----- open loop -----

async function openLoop(job: Extract<FleetJob, { kind: 'open-loop' }>): Promise<OpenLoopResult> {
  // Enough connections that a call never waits for one unless the target holds them all.
  const { pool, path } = pools(job.url, 1024);
  const sessions: string[] = [];
  await mapLimit(Array.from({ length: job.sessions }), 32, async () => void sessions.push(await initialize(pool, path)));
  const headersOf = sessions.map((s) => headers(s));
  const every = 1000 / job.rate;
  const sseEvery = job.sseShare > 0 ? Math.round(1 / job.sseShare) : 0;
  const latencies: number[] = [];
  let phase: 'warmup' | 'measure' | 'done' = 'warmup';
  let requests = 0;
  let errors = 0;
  let inFlight = 0;
  let firstError: string | undefined;
  let sent = 0;

  const call = async (n: number, due: number) => {
    const counted = phase === 'measure';
    const args = sseEvery > 0 && n % sseEvery === 0 ? `{"progress":${job.progress}}` : '{"text":"x"}';
    const body = `{"jsonrpc":"2.0","id":${n},"method":"tools/call","params":{"name":"echo","arguments":${args}}}`;
    inFlight++;
    let ok = false;
    try {
      const res = await pool.request({ path, method: 'POST', headers: headersOf[n % sessions.length]!, body });
      const text = await res.body.text();
      ok = res.statusCode === 200 && text.includes(`"id":${n},"result"`);
      if (!ok) firstError ??= `status ${res.statusCode}: ${text.slice(0, 120)}`;
    } catch (err) {
      firstError ??= (err as Error).message;
    }
    inFlight--;
    if (!counted || phase !== 'measure') return;
    if (ok) {
      requests++;
      latencies.push(performance.now() - due);
    } else {
      errors++;
    }
  };

  const start = performance.now();
  // Each call leaves at its due time: a timer every millisecond sends every call that is due.
  const ticker = setInterval(() => {
    const now = performance.now();
    for (let due = start + sent * every; due <= now; due = start + sent * every) void call(sent++, due);
  }, 1);
  await delay(job.warmupMs);
  phase = 'measure';
  mark('start');
  const measuredFrom = performance.now();
  await delay(job.durationMs);
  const seconds = (performance.now() - measuredFrom) / 1000;
  const unanswered = inFlight;
  phase = 'done';
  mark('end');
  clearInterval(ticker);
  for (let i = 0; i < 200 && inFlight > 0; i++) await delay(25);
  await pool.destroy();
  const result: OpenLoopResult = { requests, errors: errors + unanswered, seconds, latenciesMs: ms(latencies), unanswered };
  if (firstError !== undefined) result.firstError = firstError;
  return result;
}

// ----- many streams -----

/** One GET stream of a session, read event by event. */
interface Stream {
  session: string;
  /** Which of the job's URLs it is connected through. */
  via: number;
  req: ClientRequest | undefined;
  buffer: string;
  lastId: string | undefined;
  lastSeq: number;
  /** performance.now() of its first event since the storm's cut (-1: none yet; 0: no storm). */
  firstAfterCut: number;
  /** Since the storm: the answer to its reconnection, its last seq before, and the seqs after (first few). */
  storm?: { answer: string; before: number; after: number[] };
  /** The cursor each recent seq came with (the last 256), to tell a replayed event from one numbered twice. */
  ids: Map<number, string>;
}

const fleet: {
  urls: string[];
  /** Events a second the upstream writes on each stream. */
  rate: number;
  /** The upstream's paced events carry ids that start at 1 again on every stream (bench/upstream.ts). */
  renumbered: boolean;
  streams: Stream[];
  lost: number;
  repeated: number;
  /** stream_reset notifications received (resumed: false), in the stream or as a new stream's first event. */
  signalled: number;
  /** The same, by the reason each gave. */
  signalReasons: Record<string, number>;
  /** The first event received twice, described. */
  firstRepeat?: string;
  window: { latencies: number[]; events: number } | undefined;
  /** performance.now() of the storm's cut. */
  cutAt: number;
} = {
  cutAt: 0,
  signalled: 0,
  signalReasons: {},
  urls: [],
  rate: 5,
  renumbered: false,
  streams: [],
  lost: 0,
  repeated: 0,
  window: undefined,
};

const SEQ_AND_STAMP = /"seq":(\d+),"t":([\d.]+)/;

/**
 * Counts event `seq` of a stream whose last was `stream.lastSeq`: the seqs it skipped as lost, a
 * seq at or below the last as repeated; moves the stream on.
 */
export function countSeq(totals: { lost: number; repeated: number }, stream: { lastSeq: number }, seq: number): 'next' | 'repeated' {
  if (seq <= stream.lastSeq) {
    totals.repeated++;
    return 'repeated';
  }
  totals.lost += seq - stream.lastSeq - 1;
  stream.lastSeq = seq;
  return 'next';
}

function onEvent(stream: Stream, block: string): void {
  let id: string | undefined;
  for (const line of block.split('\n')) if (line.startsWith('id:')) id = line.slice(line[3] === ' ' ? 4 : 3);
  if (id !== undefined) stream.lastId = id;
  if (block.includes('notifications/gateway/stream_reset')) {
    // The gateway says the stream could not go on (resumed: false): what follows is a fresh
    // stream from the replica, a sequence of its own. Signalled, so neither lost nor repeated.
    fleet.signalled++;
    const reason = /"reason":"([^"]*)"/.exec(block)?.[1] ?? 'none given';
    fleet.signalReasons[reason] = (fleet.signalReasons[reason] ?? 0) + 1;
    stream.lastSeq = 0;
    stream.ids.clear();
    return;
  }
  const m = SEQ_AND_STAMP.exec(block);
  if (!m) return;
  const arrived = performance.now();
  if (stream.firstAfterCut === -1) stream.firstAfterCut = arrived;
  const seq = Number(m[1]);
  if (stream.storm && stream.storm.after.length < 12) stream.storm.after.push(seq);
  if (countSeq(fleet, stream, seq) === 'repeated') {
    if (fleet.firstRepeat === undefined) {
      const before = stream.ids.get(seq);
      const storm = stream.storm ? `${stream.storm.answer}, last seq ${stream.storm.before} before the cut, then ${stream.storm.after.join(',')}; ` : '';
      fleet.firstRepeat = `${storm}seq ${seq} again after ${stream.lastSeq}, ${(arrived - fleet.cutAt).toFixed(0)} ms after the cut, ${before === undefined ? 'first cursor unknown' : before === id ? 'under the same cursor' : `first under ${before}, now under ${id}`}`;
    }
  }
  if (id !== undefined) {
    stream.ids.set(seq, id);
    stream.ids.delete(seq - 256);
  }
  const w = fleet.window;
  if (w) {
    w.events++;
    w.latencies.push(stamp() - Number(m[2]));
  }
}

/** Opens the stream's GET (with Last-Event-ID when given); resolves with its response once its headers are in. */
function connect(stream: Stream, extra: Record<string, string> = {}): Promise<IncomingMessage> {
  const u = new URL(fleet.urls[stream.via]!);
  return new Promise((resolve, reject) => {
    const req = httpRequest(u, {
      method: 'GET',
      agent: false,
      headers: { accept: 'text/event-stream', 'mcp-session-id': stream.session, 'mcp-protocol-version': PROTOCOL_VERSION, 'x-bench-sse': `paced-${fleet.rate}${fleet.renumbered ? '-renumbered' : ''}`, ...extra },
    });
    stream.req = req;
    req.once('error', reject);
    req.once('response', (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        const retryAfter = res.statusCode === 503 ? Number(res.headers['retry-after'] ?? 1) || 1 : undefined;
        reject(Object.assign(new Error(`GET answered ${res.statusCode}`), retryAfter === undefined ? {} : { retryAfter }));
        return;
      }
      res.setEncoding('utf8');
      stream.buffer = '';
      res.on('data', (chunk: string) => {
        stream.buffer += chunk;
        let end = stream.buffer.indexOf('\n\n');
        while (end !== -1) {
          onEvent(stream, stream.buffer.slice(0, end));
          stream.buffer = stream.buffer.slice(end + 2);
          end = stream.buffer.indexOf('\n\n');
        }
      });
      res.on('error', () => undefined);
      resolve(res);
    });
    req.end();
  });
}

async function streamsOpen(job: Extract<FleetJob, { kind: 'streams-open' }>): Promise<StreamsOpenResult> {
  fleet.urls = job.urls;
  fleet.rate = job.rate;
  fleet.renumbered = job.renumbered === true;
  const pools = job.urls.map((url) => new Pool(new URL(url).origin, { connections: job.concurrency, keepAliveTimeout: 10_000 }));
  let failed = 0;
  let firstError: string | undefined;
  await mapLimit(Array.from({ length: job.count }), job.concurrency, async (_, i) => {
    const via = i % job.urls.length;
    try {
      const session = await initialize(pools[via]!, new URL(job.urls[via]!).pathname);
      const stream: Stream = { session, via, req: undefined, buffer: '', lastId: undefined, lastSeq: 0, firstAfterCut: 0, ids: new Map() };
      await connect(stream);
      fleet.streams.push(stream);
    } catch (err) {
      failed++;
      firstError ??= (err as Error).message;
    }
  });
  await Promise.all(pools.map((p) => p.close()));
  const result: StreamsOpenResult = { opened: fleet.streams.length, failed };
  if (firstError !== undefined) result.firstError = firstError;
  return result;
}

async function streamsMeasure(job: Extract<FleetJob, { kind: 'streams-measure' }>): Promise<StreamsMeasureResult> {
  await delay(job.warmupMs);
  fleet.window = { latencies: [], events: 0 };
  mark('start');
  const started = performance.now();
  await delay(job.durationMs);
  const seconds = (performance.now() - started) / 1000;
  mark('end');
  const w = fleet.window;
  fleet.window = undefined;
  return { events: w.events, seconds, latenciesMs: ms(w.latencies), lost: fleet.lost, repeated: fleet.repeated, streamsOpen: fleet.streams.length };
}

/**
 * Cuts every stream at once, then reconnects each through the next URL (the other instance) with
 * the last id it received, all at once.
 */
async function streamsStorm(job: Extract<FleetJob, { kind: 'streams-storm' }>): Promise<StormResult> {
  const lostBefore = fleet.lost;
  const signalledBefore = fleet.signalled;
  fleet.signalReasons = {};
  const repeatedBefore = fleet.repeated;
  delete fleet.firstRepeat;
  for (const s of fleet.streams) {
    s.req?.destroy();
    s.req = undefined;
    s.via = (s.via + 1) % fleet.urls.length;
    s.firstAfterCut = -1;
  }
  mark('start');
  const cutAt = performance.now();
  fleet.cutAt = cutAt;
  const decisions: number[] = [];
  const outcomes: Record<string, number> = {};
  let unavailable = 0;
  let firstError: string | undefined;
  await Promise.all(
    fleet.streams.map(async (s) => {
      const before = s.lastSeq;
      try {
        // As a client does: a 503 is asked again after its Retry-After, until the timeout.
        let res: IncomingMessage;
        for (;;) {
          const sent = performance.now();
          const answer = await connect(s, s.lastId === undefined ? {} : { 'last-event-id': s.lastId }).then(
            (r) => r,
            (err: Error & { retryAfter?: number; code?: string }) => {
              // A connection the listener's backlog refused or reset is tried again after a second.
              const retry = err.retryAfter ?? (err.code === 'ECONNRESET' || err.code === 'ECONNREFUSED' ? 1 : undefined);
              if (retry === undefined || performance.now() - cutAt > job.timeoutMs) throw err;
              return Object.assign(err, { retryAfter: retry });
            },
          );
          decisions.push(performance.now() - sent);
          if (!(answer instanceof Error)) {
            res = answer;
            break;
          }
          unavailable++;
          await delay((answer.retryAfter ?? 1) * 1000);
        }
        const resumption = String(res.headers['mcp-resumption'] ?? 'none');
        const key = `${res.statusCode} ${resumption}${res.headers['mcp-resumption-reason'] ? ` ${String(res.headers['mcp-resumption-reason'])}` : ''}`;
        outcomes[key] = (outcomes[key] ?? 0) + 1;
        s.storm = { answer: key, before, after: [] };
        // A new stream (signalled) is a fresh one from the replica: its events start a sequence of their own.
        if (resumption === 'new-stream') {
          s.lastSeq = 0;
          s.ids.clear();
        }
      } catch (err) {
        const key = (err as Error).message;
        outcomes[key] = (outcomes[key] ?? 0) + 1;
        firstError ??= key;
      }
    }),
  );
  // Every stream's first event after the cut (or the timeout).
  const deadline = performance.now() + job.timeoutMs;
  while (performance.now() < deadline && fleet.streams.some((s) => s.firstAfterCut === -1)) await delay(20);
  const silent = fleet.streams.filter((s) => s.firstAfterCut === -1).length;
  const allContinuedMs = silent > 0 ? Number.NaN : Math.max(...fleet.streams.map((s) => s.firstAfterCut)) - cutAt;
  mark('end');
  // Events keep arriving a while: a loss or a repeat right after the continuation shows here.
  await delay(job.settleMs);
  const result: StormResult = {
    streams: fleet.streams.length,
    outcomes,
    allContinuedMs,
    decisionMs: ms(decisions),
    unavailable,
    silent,
    lost: fleet.lost - lostBefore,
    signalled: fleet.signalled - signalledBefore,
    signalReasons: fleet.signalReasons,
    repeated: fleet.repeated - repeatedBefore,
  };
  const first = fleet.firstRepeat as string | undefined;
  if (first !== undefined) result.firstRepeat = first;
  if (firstError !== undefined) result.firstError = firstError;
  return result;
}

function streamsClose(): StreamsOpenResult {
  const opened = fleet.streams.length;
  for (const s of fleet.streams) s.req?.destroy();
  fleet.streams = [];
  fleet.lost = 0;
  fleet.repeated = 0;
  fleet.signalled = 0;
  fleet.signalReasons = {};
  return { opened, failed: 0 };
}

export function runFleetJob(job: FleetJob): Promise<unknown> {
  switch (job.kind) {
    case 'open-loop':
      return openLoop(job);
    case 'streams-open':
      return streamsOpen(job);
    case 'streams-measure':
      return streamsMeasure(job);
    case 'streams-storm':
      return streamsStorm(job);
    case 'streams-close':
      return Promise.resolve(streamsClose());
  }
}
