/**
 * The response path's own cost per event, in one process, without sockets: SseRewriter.prepare and
 * commit (src/sse/rewriter.ts) over the events that bench/upstream.ts floods (an id line and a
 * JSON-RPC notification), cut into chunks of `--chunk` bytes as a socket hands them over, with the
 * journal on and off, each into two sinks: `none` (the record answered at once: the rewriter alone)
 * and `memory` (the memory store's record, as a gateway on it makes it).
 *
 * With `--baseline DIR` (another checkout, built with `npm run build:test`), that build's rewriter,
 * codec and memory store run in the same process, alternated with this one's round by round (who
 * goes first alternates too); the first two rounds warm up and are dropped. Prints the median ns per
 * event of each, and this build ÷ the baseline paired by round with their spread: ratios from one
 * run, since absolute times move with whatever else the machine runs.
 *
 * The passes share one heap: what one pass leaves, a later one may collect, which is most of the
 * spread of the memory sink with the journal (it keeps every payload as a string). A full
 * collection forced between passes (--expose-gc) was tried: every pass then ran 2.5 × slower, so
 * it measured something else.
 *
 *   npm run bench:rewriter [-- --baseline DIR --events 40000 --chunk 65536 --rounds 12]
 */
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { runIfMain } from './lib/main.js';
import { median } from './lib/stats.js';
import { floodEvent } from './upstream.js';

export interface RewriterBenchOptions {
  /** Events per pass. */
  events: number;
  /** Bytes per chunk. */
  chunk: number;
  /** Passes of each build and case; the first two are dropped. */
  rounds: number;
  /** Another checkout's root, whose build/src is compared with this one's. */
  baseline?: string;
}

export type Sink = 'none' | 'memory';

export interface Case {
  journal: boolean;
  sink: Sink;
}

export interface CaseResult extends Case {
  /** Median ns per event of this build (and of the baseline). */
  nsPerEvent: number;
  baselineNsPerEvent?: number;
  /** This build ÷ the baseline, paired by round. */
  ratios?: number[];
  /** Bytes written out in one pass: the same for both builds, or the comparison means nothing. */
  outBytes: number;
}

/** What a build's modules give the bench (loaded by path, so that two builds can share a process). */
interface Build {
  SseRewriter: new (options: unknown) => { prepare(chunk: Buffer): unknown; commit(batch: unknown): Promise<{ out: Buffer }> };
  CursorCodec: new (secret: string) => unknown;
  createMemoryStore: () => {
    openIncarnation(incarnation: unknown, ttlMs: number): Promise<void>;
    recordEvents(sessionId: string, incarnationId: string, batch: unknown, maxPositions: number, ttlMs: number, maxJournalBytes?: number): Promise<string>;
    close(): Promise<void>;
  };
}

async function loadBuild(srcDir: string): Promise<Build> {
  const from = (path: string) => import(pathToFileURL(resolve(srcDir, path)).href);
  const [rewriter, codec, memory] = await Promise.all([from('sse/rewriter.js'), from('cursor/codec.js'), from('store/memory.js')]);
  return { SseRewriter: rewriter.SseRewriter, CursorCodec: codec.CursorCodec, createMemoryStore: memory.createMemoryStore };
}

/** The flood's events, as bench/upstream.ts writes them, in chunks. */
export function floodChunks(events: number, chunk: number): Buffer[] {
  const parts: string[] = [];
  for (let seq = 1; seq <= events; seq++) parts.push(floodEvent(seq));
  const all = Buffer.from(parts.join(''));
  const chunks: Buffer[] = [];
  for (let at = 0; at < all.length; at += chunk) chunks.push(all.subarray(at, at + chunk));
  return chunks;
}

const SESSION = 'bench-session';
/** A cursor incarnation: 16 characters of base64url. */
const INCARNATION = 'benchIncarnation';
const TTL_MS = 600_000;

/** One pass: ns per event, and the bytes written out. */
async function pass(build: Build, c: Case, chunks: readonly Buffer[], events: number): Promise<{ ns: number; out: number }> {
  const store = c.sink === 'memory' ? build.createMemoryStore() : undefined;
  try {
    if (store) await store.openIncarnation({ id: INCARNATION, sessionId: SESSION, owner: 'r1', kind: 'get', supersede: false }, TTL_MS);
    const sink = store
      ? { record: (fromSeq: number, upstreamIds: unknown, responded: unknown, payloads: unknown) => store.recordEvents(SESSION, INCARNATION, { attach: 1, fromSeq, upstreamIds, responded, ...(payloads ? { payloads } : {}) }, events, TTL_MS, Number.MAX_SAFE_INTEGER) }
      : { record: () => Promise.resolve('ok') };
    const rewriter = new build.SseRewriter({
      cursors: { codec: new build.CursorCodec('bench-secret-of-at-least-32-bytes!'), sessionId: SESSION, incarnation: INCARNATION, sink, journal: c.journal },
      head: 0,
      maxEventBytes: 1024 * 1024,
      trackResponses: false,
    });
    let out = 0;
    const start = process.hrtime.bigint();
    for (const chunk of chunks) out += (await rewriter.commit(rewriter.prepare(chunk))).out.length;
    return { ns: Number(process.hrtime.bigint() - start) / events, out };
  } finally {
    await store?.close();
  }
}

export const CASES: readonly Case[] = [
  { journal: true, sink: 'none' },
  { journal: true, sink: 'memory' },
  { journal: false, sink: 'none' },
  { journal: false, sink: 'memory' },
];

export async function runRewriterBench(opts: RewriterBenchOptions): Promise<CaseResult[]> {
  if (opts.rounds < 3) throw new Error(`--rounds must be at least 3 (the first two warm up), got ${opts.rounds}`);
  const current = await loadBuild(fileURLToPath(new URL('../src', import.meta.url)));
  const baseline = opts.baseline === undefined ? undefined : await loadBuild(resolve(opts.baseline, 'build/src'));
  const chunks = floodChunks(opts.events, opts.chunk);
  const results: CaseResult[] = [];
  for (const c of CASES) {
    const mine: number[] = [];
    const theirs: number[] = [];
    let outBytes = 0;
    for (let round = 0; round < opts.rounds; round++) {
      const order: [Build, number[]][] = [[current, mine]];
      if (baseline) order[round % 2 === 0 ? 'push' : 'unshift']([baseline, theirs]);
      for (const [build, into] of order) {
        const { ns, out } = await pass(build, c, chunks, opts.events);
        if (outBytes !== 0 && out !== outBytes) throw new Error(`the builds wrote ${outBytes} and ${out} bytes for the same events: they do not do the same work`);
        outBytes = out;
        if (round >= 2) into.push(ns);
      }
    }
    results.push({
      ...c,
      nsPerEvent: median(mine),
      outBytes,
      ...(baseline ? { baselineNsPerEvent: median(theirs), ratios: mine.map((ns, i) => ns / theirs[i]!) } : {}),
    });
  }
  return results;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      baseline: { type: 'string' },
      events: { type: 'string', default: '40000' },
      chunk: { type: 'string', default: '65536' },
      rounds: { type: 'string', default: '12' },
    },
  });
  const number = (name: string, text: string) => {
    const n = Number(text);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a positive integer, got ${text}`);
    return n;
  };
  const opts: RewriterBenchOptions = {
    events: number('events', values.events),
    chunk: number('chunk', values.chunk),
    rounds: number('rounds', values.rounds),
    ...(values.baseline === undefined ? {} : { baseline: values.baseline }),
  };
  const results = await runRewriterBench(opts);
  const line = (cells: readonly string[]) => process.stdout.write(`${cells.map((c, i) => c.padEnd(i === 0 ? 12 : 10)).join(' ')}\n`);
  line(['journal', 'sink', 'ns/event', ...(opts.baseline ? ['baseline', 'ratio', 'spread'] : [])]);
  for (const r of results) {
    const ratios = r.ratios ?? [];
    line([
      r.journal ? 'on' : 'off',
      r.sink,
      r.nsPerEvent.toFixed(0),
      ...(opts.baseline ? [r.baselineNsPerEvent!.toFixed(0), median(ratios).toFixed(3), `${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)}`] : []),
    ]);
  }
  process.stdout.write(`${opts.events} events in chunks of ${opts.chunk} bytes, ${opts.rounds - 2} measured rounds; ratio = this build ÷ the baseline, paired by round (median, then the spread)\n`);
}

runIfMain(import.meta.url, main);
