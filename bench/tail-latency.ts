/**
 * What continuing through another instance adds to live latency (CONTRACT.md §8 J3, the journal).
 * Two gateways share one Redis, journal on, in front of one replica (the bench upstream, in this
 * process, so that an event's emission and its arrival are read on one clock). One GET stream of
 * one session, its replica's events sent `--interval-ms` apart, each without an upstream id (a
 * replica without an event log), reaches the client three ways in turn, `--rounds` times:
 *
 * - direct: a stream of another session, from the replica with no proxy (the floor of this setup);
 * - pump: through instance A, whose pump reads the replica's stream (the pump's own client);
 * - tail: the client continues with its last cursor through instance B, which tails the journal:
 *   woken by the store's note of each batch, it reads the journal and sends what it found.
 *
 * The pump's stream is never moved: between the phases the client drops its connection (A holds
 * the stream, J2) and continues through the other instance, which B confirms by counting a
 * continuation from the journal each time. Prints p50 and p99 of each, and tail against pump.
 *
 *   npm run bench:tail-latency [-- --events 300 --interval-ms 5 --rounds 3]
 */
import type { ServerResponse } from 'node:http';
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { PROTOCOL_VERSION, rawSession } from '../test/helpers/http.js';
import { runIfMain } from './lib/main.js';
import { SseBlocks } from './lib/sse-blocks.js';
import { openFilesLimit } from './lib/procs.js';
import { percentile } from './lib/stats.js';
import { makeScratch, removeDir, startRedis, startTarget, type Target } from './lib/targets.js';
import { listen } from './upstream.js';

export interface TailLatencyOptions {
  /** Events measured per phase. */
  events: number;
  intervalMs: number;
  rounds: number;
  /** Events sent first in each phase and not measured: a tail's subscription settles meanwhile. */
  warmup: number;
}

export type Path = 'direct' | 'pump' | 'tail';

export interface TailLatencyResult {
  /** Milliseconds from the replica's write to the client's read, by path, every measured event. */
  latenciesMs: Record<Path, number[]>;
  /** p50 and p99 by path, ms. */
  summary: Record<Path, { p50: number; p99: number }>;
  /** Continuations B served from the journal (one per tail phase when the path is what it says). */
  tailContinuations: number;
}

/** The replica's side: each session's current GET stream, and when each event left. */
class Emitter {
  readonly #streams = new Map<string, ServerResponse>();
  readonly #waiting = new Map<string, () => void>();

  onStream = (res: ServerResponse, sessionId: string): void => {
    this.#streams.set(sessionId, res);
    res.once('close', () => {
      if (this.#streams.get(sessionId) === res) this.#streams.delete(sessionId);
    });
    this.#waiting.get(sessionId)?.();
  };

  /** Resolves once the replica holds a GET stream of the session. */
  stream(sessionId: string): Promise<ServerResponse> {
    const open = this.#streams.get(sessionId);
    if (open) return Promise.resolve(open);
    return new Promise((resolve) => this.#waiting.set(sessionId, () => resolve(this.#streams.get(sessionId)!)));
  }

  /** Sends events first..first+count-1, intervalMs apart; resolves with when each left. */
  async send(sessionId: string, first: number, count: number, intervalMs: number): Promise<Map<number, number>> {
    const res = await this.stream(sessionId);
    const sent = new Map<number, number>();
    for (let seq = first; seq < first + count; seq++) {
      if (seq > first) await new Promise((resolve) => setTimeout(resolve, intervalMs));
      sent.set(seq, performance.now());
      res.write(`data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"seq":${seq}}}}\n\n`);
    }
    return sent;
  }
}

/** The client's side: one GET stream, when each event arrived, and the last cursor it carried. */
class Reader {
  readonly arrivals = new Map<number, number>();
  /** Events that arrived more than once (never, when each position is sent exactly once). */
  repeated = 0;
  lastId: string | undefined;
  readonly #blocks: SseBlocks;
  readonly #abort: AbortController;
  readonly #done: Promise<void>;
  #want: { seq: number; resolve: () => void } | undefined;

  private constructor(body: AsyncIterable<Uint8Array>, abort: AbortController) {
    this.#blocks = new SseBlocks(body);
    this.#abort = abort;
    this.#done = this.#read();
  }

  static async open(url: string, sessionId: string, lastEventId: string | undefined): Promise<Reader> {
    const headers: Record<string, string> = { accept: 'text/event-stream', 'mcp-session-id': sessionId, 'mcp-protocol-version': PROTOCOL_VERSION };
    if (lastEventId !== undefined) headers['last-event-id'] = lastEventId;
    const abort = new AbortController();
    const response = await fetch(url, { headers, signal: abort.signal });
    if (response.status !== 200 || response.body === null) throw new Error(`GET ${url} answered ${response.status}`);
    return new Reader(response.body, abort);
  }

  async #read(): Promise<void> {
    for (let block = await this.#blocks.next(); block !== undefined; block = await this.#blocks.next()) {
      const at = performance.now();
      const id = /^id: (.*)$/m.exec(block);
      if (id) this.lastId = id[1];
      const seq = /"seq":(\d+)/.exec(block);
      if (!seq) continue;
      const n = Number(seq[1]);
      if (this.arrivals.has(n)) this.repeated++;
      else this.arrivals.set(n, at);
      if (this.#want && n >= this.#want.seq) this.#want.resolve();
    }
  }

  /** Resolves once event `seq` arrived; rejects after `ms`. */
  until(seq: number, ms: number): Promise<void> {
    if (this.arrivals.has(seq)) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`event ${seq} did not arrive within ${ms} ms (last arrived: ${Math.max(0, ...this.arrivals.keys())})`)), ms);
      this.#want = {
        seq,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      };
    });
  }

  /**
   * Drops the connection (the gateway holds the stream, J2). Aborted, not cancelled: cancelling
   * a body waits for the read in progress, which waits for an event.
   */
  async close(): Promise<void> {
    this.#abort.abort();
    await this.#done.catch(() => undefined);
  }
}

async function continuations(target: Target, source: string): Promise<number> {
  const text = await (await fetch(target.metricsUrl!)).text();
  const line = text.split('\n').find((l) => l.startsWith(`mcp_gateway_continuations_total{source="${source}"}`));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

export async function runTailLatency(opts: TailLatencyOptions): Promise<TailLatencyResult> {
  const dir = await makeScratch();
  const emitter = new Emitter();
  const upstream = await listen(0, { onStream: emitter.onStream });
  const address = { url: `http://127.0.0.1:${upstream.port}/mcp`, port: upstream.port };
  const redis = await startRedis(dir);
  const targets: Target[] = [];
  const latenciesMs: Record<Path, number[]> = { direct: [], pump: [], tail: [] };
  let next = 1;
  // Each phase: warm-up events, then the measured ones; every one must arrive, once.
  const phase = async (path: Path, reader: Reader, sessionId: string): Promise<void> => {
    const deadline = Math.max(10_000, opts.intervalMs * (opts.warmup + opts.events) * 4);
    if (opts.warmup > 0) {
      const warm = next;
      next += opts.warmup;
      await emitter.send(sessionId, warm, opts.warmup, opts.intervalMs);
      await reader.until(next - 1, deadline);
    }
    const first = next;
    next += opts.events;
    const sent = await emitter.send(sessionId, first, opts.events, opts.intervalMs);
    await reader.until(next - 1, deadline);
    for (const [seq, at] of sent) {
      const arrived = reader.arrivals.get(seq);
      if (arrived === undefined) throw new Error(`${path}: event ${seq} never arrived`);
      latenciesMs[path].push(arrived - at);
    }
    if (reader.repeated > 0) throw new Error(`${path}: ${reader.repeated} events arrived twice`);
  };
  try {
    const proxy = { dir, upstreams: [address], redisUrl: redis.url, gatewayLog: 'warn', gatewayConnections: 64, openFiles: await openFilesLimit() };
    // Started together (each start is mostly waiting); both are stopped whatever happened.
    const started = await Promise.allSettled([startTarget('gateway-redis-journal', proxy), startTarget('gateway-redis-journal', proxy)]);
    for (const s of started) if (s.status === 'fulfilled') targets.push(s.value);
    const failed = started.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;
    const [a, b] = targets as [Target, Target];
    const before = await continuations(b, 'journal');

    const direct = await rawSession(address.url);
    const sessionId = await rawSession(a.url);
    let lastId: string | undefined;
    for (let round = 0; round < opts.rounds; round++) {
      const floor = await Reader.open(address.url, direct, undefined);
      await phase('direct', floor, direct);
      await floor.close();
      // Round 1 opens the stream at A; later rounds continue there, attaching to A's pump.
      for (const [path, via] of [['pump', a], ['tail', b]] as const) {
        const reader = await Reader.open(via.url, sessionId, lastId);
        await phase(path, reader, sessionId);
        await reader.close();
        lastId = reader.lastId;
        if (lastId === undefined) throw new Error(`no cursor came through ${path}`);
      }
    }
    const tailContinuations = (await continuations(b, 'journal')) - before;
    const summary = {} as TailLatencyResult['summary'];
    for (const path of Object.keys(latenciesMs) as Path[]) {
      const sorted = [...latenciesMs[path]].sort((x, y) => x - y);
      summary[path] = { p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
    }
    return { latenciesMs, summary, tailContinuations };
  } finally {
    for (const target of targets) await target.stop();
    await upstream.close();
    await redis.stop();
    await removeDir(dir);
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      events: { type: 'string', default: '300' },
      'interval-ms': { type: 'string', default: '5' },
      rounds: { type: 'string', default: '3' },
      warmup: { type: 'string', default: '20' },
    },
  });
  const opts: TailLatencyOptions = { events: Number(values.events), intervalMs: Number(values['interval-ms']), rounds: Number(values.rounds), warmup: Number(values.warmup) };
  for (const [name, value] of Object.entries(opts)) {
    if (!Number.isInteger(value) || value < (name === 'warmup' ? 0 : 1)) throw new Error(`--${name} must be a positive integer`);
  }
  const result = await runTailLatency(opts);
  const { direct, pump, tail } = result.summary;
  const fmt = (ms: number) => ms.toFixed(2).padStart(7);
  console.log(
    `live latency, replica write to client read: ${opts.rounds} rounds of ${opts.events} events ${opts.intervalMs} ms apart per path, Redis store, journal on; ` +
      `load average ${loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')} on ${cpus().length} cores`,
  );
  console.log('path                                      p50 ms   p99 ms');
  console.log(`direct (replica, no proxy)               ${fmt(direct.p50)}  ${fmt(direct.p99)}`);
  console.log(`pump (the holding instance's own client) ${fmt(pump.p50)}  ${fmt(pump.p99)}`);
  console.log(`tail (continued through another instance)${fmt(tail.p50)}  ${fmt(tail.p99)}`);
  console.log(`tail / pump                              ${fmt(tail.p50 / pump.p50)}x ${fmt(tail.p99 / pump.p99)}x`);
  console.log(`continuations the other instance served from the journal: ${result.tailContinuations} (one per tail phase: ${opts.rounds})`);
}

runIfMain(import.meta.url, main);
