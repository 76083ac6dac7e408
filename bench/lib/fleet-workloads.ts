/**
 * The workloads MCP fleets do (bench/fleet-load.ts drives the clients): tool calls at a fixed rate
 * (open loop), many GET streams at a modest rate each through two gateway instances on Redis, and
 * a reconnection storm of those streams onto the other instance. Latency is compared with the
 * upstream reached directly in the same round (`added_*`), and with the Node.js floor.
 */
import type { FleetJob, OpenLoopResult, StormResult, StreamsMeasureResult, StreamsOpenResult } from '../fleet-load.js';
import type { Context, Row } from './context.js';
import { bucketQuantile, measured, storeRows, type Sample } from './sampler.js';
import { kindOf, REDIS_KINDS, startTarget, type Target, type TargetName, type Upstream } from './targets.js';
import { eachTarget } from './workloads.js';

export type OpenLoopSettings = Omit<Extract<FleetJob, { kind: 'open-loop' }>, 'kind' | 'url'>;

/**
 * `added_<metric>`: each target's figure less the same figure of the upstream reached directly in
 * the same round (and `over_floor_<metric>`: less the Node.js floor's).
 */
function addedRows(rows: Row[], metrics: readonly string[]): Row[] {
  const out = [...rows];
  for (const base of ['direct', 'node-floor'] as const) {
    for (const metric of metrics) {
      const ref = rows.find((r) => r.target === base && r.metric === metric);
      if (!ref || !Number.isFinite(ref.value)) continue;
      for (const r of rows) {
        if (r.metric !== metric || r.target === base || r.target === 'direct') continue;
        out.push({ workload: r.workload, target: r.target, metric: `${base === 'direct' ? 'added' : 'over_floor'}_${metric}`, value: r.value - ref.value });
      }
    }
  }
  return out;
}

/** 1. tools/call at a fixed rate over many sessions, a share of them answered on an SSE stream. */
export async function openLoopWorkload(ctx: Context, kinds: readonly TargetName[], upstream: Upstream, s: OpenLoopSettings): Promise<Row[]> {
  const rows = await eachTarget(ctx, kinds, upstream, 'open-loop', async (target) => {
    const { result, start, end, wall } = await measured(ctx, [target], upstream, (onMark) =>
      ctx.load.run<OpenLoopResult>({ kind: 'open-loop', url: target.url, ...s }, onMark),
    );
    if (result.requests === 0) throw new Error(`no call succeeded (${result.firstError ?? 'no error'})`);
    const w = { workload: 'open-loop', target: target.kind };
    const errorNote = result.errors > 0 ? `${result.errors} errors (${result.unanswered} unanswered at the end), first: ${result.firstError}` : undefined;
    const out: Row[] = [
      { ...w, metric: 'calls_per_s', value: result.requests / result.seconds, note: errorNote ?? `${s.rate}/s offered over ${s.sessions} sessions, ${Math.round(s.sseShare * 100)} % as SSE` },
      { ...w, metric: 'p50_ms', value: result.latenciesMs.p50 },
      { ...w, metric: 'p99_ms', value: result.latenciesMs.p99 },
      { ...w, metric: 'p999_ms', value: result.latenciesMs.p999 },
      { ...w, metric: 'loadgen_cpu_share', value: (end.loadCpu - start.loadCpu) / wall, note: 'of one core' },
    ];
    if (target.pid !== undefined) out.push({ ...w, metric: 'proxy_cpu_us_per_call', value: ((end.proxyCpu - start.proxyCpu) / result.requests) * 1e6 });
    if (end.redisCpu > start.redisCpu) {
      out.push({ ...w, metric: 'redis_cpu_us_per_call', value: ((end.redisCpu - start.redisCpu) / result.requests) * 1e6 });
      out.push({ ...w, metric: 'proxy_and_redis_cpu_us_per_call', value: ((end.proxyCpu - start.proxyCpu + end.redisCpu - start.redisCpu) / result.requests) * 1e6 });
    }
    out.push(...storeRows('open-loop', target, 'call', result.requests, start, end));
    return out;
  });
  return addedRows(rows, ['p50_ms', 'p99_ms', 'p999_ms']);
}

export interface StreamsSettings {
  streams: number;
  rate: number;
  warmupMs: number;
  durationMs: number;
  /** The gateway on Redis runs this many instances, the streams spread over them (storm: onto the next). */
  instances: number;
  stormTimeoutMs: number;
  /** The upstream numbers its paced events anew on every stream (a misbuilt replica, E6). */
  renumbered?: boolean;
}

/** Gateways on Redis run as `instances` processes on the one store; every other target as one. */
async function startGroup(ctx: Context, kind: TargetName, upstream: Upstream, instances: number): Promise<Target[]> {
  const count = REDIS_KINDS.includes(kindOf(kind)) ? instances : 1;
  const group: Target[] = [];
  try {
    for (let i = 0; i < count; i++) group.push(await startTarget(kind, { ...ctx.proxy, upstreams: [upstream] }));
  } catch (err) {
    await Promise.all(group.map((t) => t.stop()));
    throw err;
  }
  return group;
}

/**
 * 2. Many streams at a modest rate, and 3. their reconnection storm (gateways with the journal:
 * the only targets that can continue a stream through another instance).
 */
export async function streamsWorkload(ctx: Context, kinds: readonly TargetName[], upstream: Upstream, s: StreamsSettings): Promise<Row[]> {
  const rows: Row[] = [];
  for (const kind of kinds) {
    let group: Target[] = [];
    try {
      group = await startGroup(ctx, kind, upstream, s.instances);
      const opened = await ctx.load.run<StreamsOpenResult>({ kind: 'streams-open', urls: group.map((t) => t.url), count: s.streams, rate: s.rate, concurrency: 64, renumbered: s.renumbered === true });
      if (opened.opened === 0) throw new Error(`no stream opened (${opened.firstError ?? ''})`);
      const w = { workload: 'streams', target: kind };
      const m = await measured(ctx, group, upstream, (onMark) =>
        ctx.load.run<StreamsMeasureResult>({ kind: 'streams-measure', warmupMs: s.warmupMs, durationMs: s.durationMs }, onMark),
      );
      const events = m.result.events;
      const proxy = ((m.end.proxyCpu - m.start.proxyCpu) / events) * 1e6;
      const redis = ((m.end.redisCpu - m.start.redisCpu) / events) * 1e6;
      const failedNote = opened.failed > 0 ? `; ${opened.failed} failed to open: ${opened.firstError}` : '';
      rows.push(
        { ...w, metric: 'streams_open', value: m.result.streamsOpen, note: `${group.length} instance(s), ${s.rate} events/s each${s.renumbered ? ', upstream ids renumbered on every stream' : ''}${failedNote}` },
        { ...w, metric: 'events_per_s', value: events / m.result.seconds },
        { ...w, metric: 'p50_ms', value: m.result.latenciesMs.p50 },
        { ...w, metric: 'p99_ms', value: m.result.latenciesMs.p99 },
        { ...w, metric: 'lost', value: m.result.lost, note: 'since the streams opened' },
        { ...w, metric: 'repeated', value: m.result.repeated },
        { ...w, metric: 'upstream_cpu_us_per_event', value: ((m.end.upstreamCpu - m.start.upstreamCpu) / events) * 1e6 },
        ...storeRows('streams', { kind }, 'event', events, m.start, m.end),
      );
      if (group[0]!.pid !== undefined) {
        rows.push({ ...w, metric: 'proxy_cpu_us_per_event', value: proxy, note: `${(((m.end.proxyCpu - m.start.proxyCpu) / m.wall) * 100).toFixed(0)} % of a core` });
        rows.push({ ...w, metric: 'proxy_and_redis_cpu_us_per_event', value: proxy + redis, ...(redis > 0 ? { note: `Redis ${redis.toFixed(1)}` } : {}) });
      }
      if (kindOf(kind) === 'gateway-redis-journal' && group.length > 1) {
        const storm = await measured(ctx, group, upstream, (onMark) =>
          ctx.load.run<StormResult>({ kind: 'streams-storm', timeoutMs: s.stormTimeoutMs, settleMs: 2000 }, onMark),
        );
        const r = storm.result;
        const sw = { workload: 'storm', target: kind };
        const outcomes = Object.entries(r.outcomes).map(([k, v]) => `${k}: ${v}`).join(', ');
        rows.push(
          { ...sw, metric: 'streams', value: r.streams, note: outcomes },
          { ...sw, metric: 'retried', value: r.unavailable, note: '503 (asked again after its Retry-After) or a connection reset (after 1 s)' },
          { ...sw, metric: 'all_continued_ms', value: r.allContinuedMs, note: r.silent > 0 ? `${r.silent} without an event within ${s.stormTimeoutMs} ms` : 'from the cut to the first event on every stream' },
          { ...sw, metric: 'decision_p50_ms', value: r.decisionMs.p50 },
          { ...sw, metric: 'decision_p99_ms', value: r.decisionMs.p99 },
          { ...sw, metric: 'lost', value: r.lost },
          {
            ...sw,
            metric: 'signalled',
            value: r.signalled,
            note: `stream_reset (resumed: false): could not go on, said so${r.signalled > 0 ? `; by reason: ${Object.entries(r.signalReasons).map(([k, v]) => `${k} ${v}`).join(', ')}` : ''}`,
          },
          { ...sw, metric: 'repeated', value: r.repeated, ...(r.firstRepeat ? { note: `first: ${r.firstRepeat}` } : {}) },
          { ...sw, metric: 'proxy_and_redis_cpu_s', value: storm.end.proxyCpu - storm.start.proxyCpu + storm.end.redisCpu - storm.start.redisCpu },
          ...leaseRows(sw, storm.start, storm.end),
          ...admittedRows(sw, storm.start, storm.end),
        );
      }
      ctx.log(`  streams ${kind}: done`);
    } catch (err) {
      ctx.log(`  streams ${kind}: FAILED ${(err as Error).message.split('\n')[0]}`);
      rows.push({ workload: 'streams', target: kind, metric: 'failed', value: Number.NaN, note: (err as Error).message.split('\n')[0]! });
    } finally {
      await ctx.load.run({ kind: 'streams-close' }).catch(() => undefined);
      await Promise.all(group.map((t) => t.stop()));
    }
  }
  return addedRows(rows, ['p50_ms', 'p99_ms']);
}

/**
 * How late the lease renewals of the storm's window landed against their schedule, by lease
 * (docs/journal.md#instance-liveness): p99 and the highest, each as the bound of its histogram
 * bucket. A stream's renewal later than two thirds of the lease let its lease lapse.
 */
export function leaseRows(w: Pick<Row, 'workload' | 'target'>, start: Sample, end: Sample): Row[] {
  return ['instance', 'stream'].flatMap((lease) => {
    const q = bucketQuantile(start.leaseLateness?.get(lease), end.leaseLateness?.get(lease), 0.99);
    const note = `${q.count} renewals; the highest at most ${q.highest * 1000} ms (bucket bound)`;
    return [{ ...w, metric: `${lease}_lease_renewal_late_p99_ms`, value: q.atMost * 1000, note }];
  });
}

/**
 * The storm's admitted decisions as the gateway timed them (mcp_gateway_resumption_decision_seconds):
 * decided, from a decision's turn to its response headers, and queued, from its arrival to its turn;
 * p50 and p99 as the bound of their histogram bucket. The client's decision_p99_ms holds these and
 * more: the wait in the listener's backlog and for a busy loop to read the request, and each 503.
 */
export function admittedRows(w: Pick<Row, 'workload' | 'target'>, start: Sample, end: Sample): Row[] {
  return ['decided', 'queued'].flatMap((phase) => {
    const before = start.resumptionTimes?.get(phase);
    const after = end.resumptionTimes?.get(phase);
    const p50 = bucketQuantile(before, after, 0.5);
    const p99 = bucketQuantile(before, after, 0.99);
    const note = `${p99.count} admitted; at most (bucket bound); the highest at most ${p99.highest * 1000} ms`;
    return [
      { ...w, metric: `admitted_${phase}_p50_ms`, value: p50.atMost * 1000, note },
      { ...w, metric: `admitted_${phase}_p99_ms`, value: p99.atMost * 1000, note },
    ];
  });
}
