/**
 * The workloads. Each runs every target it is given against the same upstream in this run, one
 * target at a time, and returns rows; ratios between rows are computed by the report.
 */
import { readdir, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import type { FloodResult, IdleResult, ResumeResult, RpcResult } from '../load.js';
import { median } from './stats.js';
import type { Context, Row } from './context.js';
import { treeRssBytes } from './procs.js';
import { countsBy, delta, measured, sample, storeRows } from './sampler.js';
import { kindOf, REDIS_KINDS, startTarget, type Target, type TargetName, type Upstream } from './targets.js';

export type { Context, Row } from './context.js';

/**
 * open-loop, streams (with the storm) and idle are the work MCP fleets do (the quick run's); rpc
 * (closed loop), sse (one flooding stream), rpc-sdk and resume measure single paths.
 */
export type WorkloadName = 'open-loop' | 'streams' | 'idle' | 'rpc' | 'rpc-sdk' | 'sse' | 'resume';
export const WORKLOADS: readonly WorkloadName[] = ['open-loop', 'streams', 'idle', 'rpc', 'rpc-sdk', 'sse', 'resume'];

export async function eachTarget(ctx: Context, kinds: readonly TargetName[], upstream: Upstream, workload: string, fn: (target: Target) => Promise<Row[]>): Promise<Row[]> {
  const rows: Row[] = [];
  for (const kind of kinds) {
    let target: Target | undefined;
    try {
      target = await startTarget(kind, { ...ctx.proxy, upstreams: [upstream] });
      if (REDIS_KINDS.includes(kindOf(kind))) await ctx.redis?.commandStats();
      rows.push(...(await fn(target)));
      ctx.log(`  ${workload} ${kind}: done`);
    } catch (err) {
      ctx.log(`  ${workload} ${kind}: FAILED ${(err as Error).message.split('\n')[0]}`);
      rows.push({ workload, target: kind, metric: 'failed', value: Number.NaN, note: (err as Error).message.split('\n')[0]! });
    } finally {
      await target?.stop();
    }
  }
  return rows;
}

export interface RpcSettings {
  concurrency: number;
  warmupMs: number;
  durationMs: number;
}

/** 1. POST tools/call round trips at a fixed concurrency. */
export function rpcWorkload(ctx: Context, name: 'rpc' | 'rpc-sdk', kinds: readonly TargetName[], upstream: Upstream, s: RpcSettings): Promise<Row[]> {
  return eachTarget(ctx, kinds, upstream, name, async (target) => {
    const { result, start, end, wall } = await measured(ctx, [target], upstream, (onMark) =>
      ctx.load.run<RpcResult>({ kind: 'rpc', url: target.url, concurrency: s.concurrency, warmupMs: s.warmupMs, durationMs: s.durationMs }, onMark),
    );
    if (result.requests === 0) throw new Error(`no request succeeded (${result.firstError ?? 'no error'})`);
    const errorNote = result.errors > 0 ? `${result.errors} errors, first: ${result.firstError}` : undefined;
    const w = { workload: name, target: target.kind };
    const rows: Row[] = [
      { ...w, metric: 'requests_per_s', value: result.requests / result.seconds, ...(errorNote ? { note: errorNote } : {}) },
      { ...w, metric: 'p50_ms', value: result.latenciesMs.p50 },
      { ...w, metric: 'p99_ms', value: result.latenciesMs.p99 },
    ];
    if (target.pid !== undefined) {
      rows.push({ ...w, metric: 'proxy_cpu_s_per_1k_req', value: ((end.proxyCpu - start.proxyCpu) / result.requests) * 1000 });
    }
    rows.push({ ...w, metric: 'loadgen_cpu_share', value: (end.loadCpu - start.loadCpu) / wall, note: 'of one core' });
    rows.push({ ...w, metric: 'upstream_cpu_share', value: (end.upstreamCpu - start.upstreamCpu) / wall, note: 'of one core' });
    if (target.pid !== undefined) rows.push({ ...w, metric: 'proxy_cpu_share', value: (end.proxyCpu - start.proxyCpu) / wall, note: 'of one core' });
    rows.push(...storeRows(name, target, 'request', result.requests, start, end));
    return rows;
  });
}

export interface SseSettings {
  warmupMs: number;
  durationMs: number;
}

/** 2. One SSE stream that the upstream fills as fast as it can. */
export function sseWorkload(ctx: Context, kinds: readonly TargetName[], upstream: Upstream, s: SseSettings): Promise<Row[]> {
  return eachTarget(ctx, kinds, upstream, 'sse', async (target) => {
    const { result, start, end, wall } = await measured(ctx, [target], upstream, (onMark) =>
      ctx.load.run<FloodResult>({ kind: 'flood', url: target.url, warmupMs: s.warmupMs, durationMs: s.durationMs }, onMark),
    );
    const w = { workload: 'sse', target: target.kind };
    const rows: Row[] = [
      { ...w, metric: 'events_per_s', value: result.events / result.seconds },
      { ...w, metric: 'MiB_per_s', value: result.bytes / result.seconds / 1024 / 1024 },
    ];
    if (target.pid !== undefined) {
      rows.push({ ...w, metric: 'proxy_cpu_us_per_event', value: ((end.proxyCpu - start.proxyCpu) / result.events) * 1e6 });
      rows.push({ ...w, metric: 'proxy_cpu_share', value: (end.proxyCpu - start.proxyCpu) / wall, note: 'of one core' });
    }
    rows.push({ ...w, metric: 'loadgen_cpu_share', value: (end.loadCpu - start.loadCpu) / wall, note: 'of one core' });
    rows.push({ ...w, metric: 'upstream_cpu_share', value: (end.upstreamCpu - start.upstreamCpu) / wall, note: 'of one core' });
    if (end.redisCpu > start.redisCpu) {
      rows.push({ ...w, metric: 'redis_cpu_us_per_event', value: ((end.redisCpu - start.redisCpu) / result.events) * 1e6 });
      rows.push({ ...w, metric: 'redis_cpu_share', value: (end.redisCpu - start.redisCpu) / wall, note: 'of one core' });
    }
    rows.push(...storeRows('sse', target, 'event', result.events, start, end));
    return rows;
  });
}

export interface IdleSettings {
  streams: number;
  /** Why the count is what it is, when it was capped. */
  capNote?: string;
}

/** Waits until the RSS of `pid` changes by less than 1 % over 500 ms (at most 5 s), then reads it. */
export async function settledRss(pid: number): Promise<number> {
  let last = await treeRssBytes(pid);
  for (let i = 0; i < 10; i++) {
    await delay(500);
    const now = await treeRssBytes(pid);
    if (Math.abs(now - last) < last * 0.01) return now;
    last = now;
  }
  return last;
}

/**
 * With --gateway-heap-snapshots, a heap snapshot of the gateway as `<name>.heapsnapshot` in its
 * folder: asked for with SIGUSR2 (--heapsnapshot-signal), and whole once the gateway answers again
 * (it writes the snapshot on its main thread). Each is taken after the RSS was read; writing one
 * leaves the process larger, so the next RSS reading includes it.
 */
async function heapSnapshot(target: Target, name: string): Promise<void> {
  const dir = target.heapSnapshotDir;
  if (dir === undefined || target.pid === undefined || target.metricsUrl === undefined) return;
  const before = new Set(await readdir(dir));
  process.kill(target.pid, 'SIGUSR2');
  let written: string | undefined;
  for (let i = 0; i < 600 && written === undefined; i++) {
    await delay(100);
    written = (await readdir(dir)).find((f) => f.endsWith('.heapsnapshot') && !before.has(f));
  }
  if (written === undefined) throw new Error(`${target.kind}: no heap snapshot in ${dir} within 60 s`);
  await (await fetch(target.metricsUrl)).text();
  await rename(join(dir, written), join(dir, `${name}.heapsnapshot`));
}

/** 3. Many open idle SSE streams: the proxy's resident memory per stream. */
export function idleWorkload(ctx: Context, kinds: readonly TargetName[], upstream: Upstream, s: IdleSettings): Promise<Row[]> {
  return eachTarget(ctx, kinds.filter((k) => k !== 'direct'), upstream, 'idle', async (target) => {
    const pid = target.pid!;
    const sessions = await ctx.load.run<IdleResult>({ kind: 'idle-sessions', url: target.url, count: s.streams, concurrency: 64 });
    try {
      if (sessions.opened === 0) throw new Error(`no session (${sessions.firstError ?? ''})`);
      const rssSessions = await settledRss(pid);
      await heapSnapshot(target, 'sessions');
      const before = await sample(ctx, [target], upstream);
      const streams = await ctx.load.run<IdleResult>({ kind: 'idle-streams', concurrency: 256 });
      const after = await sample(ctx, [target], upstream);
      if (streams.opened === 0) throw new Error(`no stream opened (${streams.firstError ?? ''})`);
      const rssStreams = await settledRss(pid);
      await heapSnapshot(target, 'streams');
      const w = { workload: 'idle', target: target.kind };
      const notes = [s.capNote, streams.failed > 0 ? `${streams.failed} failed: ${streams.firstError}` : undefined].filter(Boolean).join('; ');
      return [
        { ...w, metric: 'streams_open', value: streams.opened, ...(notes ? { note: notes } : {}) },
        { ...w, metric: 'rss_KiB_per_stream', value: (rssStreams - rssSessions) / streams.opened / 1024 },
        { ...w, metric: 'rss_MiB_with_streams', value: rssStreams / 1024 / 1024 },
        { ...w, metric: 'proxy_cpu_ms_per_stream_open', value: ((after.proxyCpu - before.proxyCpu) / streams.opened) * 1000 },
        ...storeRows('idle', target, 'stream_open', streams.opened, before, after),
      ];
    } finally {
      await ctx.load.run<IdleResult>({ kind: 'idle-close' });
    }
  });
}

export interface ResumeSettings {
  events: number;
  reps: number;
}

/** 4. A GET with Last-Event-ID on the demo SDK replica: time to the first and to every replayed event. */
export function resumeWorkload(ctx: Context, kinds: readonly TargetName[], replica: Upstream, s: ResumeSettings): Promise<Row[]> {
  return eachTarget(ctx, kinds, replica, 'resume', async (target) => {
    const sources = () => countsBy([target.metricsUrl], 'mcp_gateway_continuations_total', 'source');
    const before = await sources();
    const { result, start, end } = await measured(ctx, [target], replica, (onMark) =>
      ctx.load.run<ResumeResult>({ kind: 'resume', url: target.url, events: s.events, reps: s.reps, timeoutMs: 10_000 }, onMark),
    );
    const done = result.firstEventMs.length;
    if (done === 0) throw new Error(`no resumption replayed ${s.events} events (${result.firstError ?? ''})`);
    const outcomes = [...new Set(result.resumption)].join(',');
    // Where the gateway says the continuations came from: its journal or the owner's own log.
    const served = delta(before, await sources());
    const from = served && served.size > 0 ? `; served from: ${[...served].map(([source, n]) => `${source} ${n}`).join(', ')}` : '';
    const note = `${done}/${s.reps} replayed ${s.events} events; Mcp-Resumption: ${outcomes}${from}${result.failed ? `; first failure: ${result.firstError}` : ''}`;
    const w = { workload: 'resume', target: target.kind };
    return [
      { ...w, metric: 'first_replayed_event_ms_p50', value: median(result.firstEventMs), note },
      { ...w, metric: `all_${s.events}_replayed_ms_p50`, value: median(result.allEventsMs) },
      ...storeRows('resume', target, 'resumption', done, start, end),
    ];
  });
}
