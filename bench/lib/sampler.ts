/**
 * The one sampler of every workload, single-path and fleet alike: at each edge of a measured
 * window, the CPU of the proxies (one, or a gateway's instances on one store), of the load
 * generator, the upstream and Redis, and the store's commands and the gateway's store operations.
 */
import { treeCpuSeconds } from './procs.js';
import type { Context, Row } from './context.js';
import { kindOf, REDIS_KINDS, type Target, type Upstream } from './targets.js';

/** What the OS and the store said at one edge of a measured window, over a group of proxies. */
export interface Sample {
  at: number;
  /** The CPU seconds of every proxy of the group, summed. */
  proxyCpu: number;
  loadCpu: number;
  upstreamCpu: number;
  /** The store's CPU seconds, for targets on Redis (0 otherwise). */
  redisCpu: number;
  redis: Map<string, number> | undefined;
  storeOps: Map<string, number> | undefined;
  /** mcp_gateway_lease_renewal_lateness_seconds over the group: by lease, the cumulative count at each bucket bound. */
  leaseLateness: Map<string, Map<number, number>> | undefined;
  /** mcp_gateway_resumption_decision_seconds over the group: by phase (queued, decided), the cumulative count at each bucket bound. */
  resumptionTimes: Map<string, Map<number, number>> | undefined;
}

/** A gateway histogram's cumulative buckets summed over `metricsUrls`: by the value of `label`, the count at each bound `le`. */
export async function bucketsBy(metricsUrls: readonly (string | undefined)[], metric: string, label: string): Promise<Map<string, Map<number, number>> | undefined> {
  const urls = metricsUrls.filter((url): url is string => url !== undefined);
  if (urls.length === 0) return undefined;
  const out = new Map<string, Map<number, number>>();
  for (const url of urls) {
    const text = await (await fetch(url)).text();
    for (const m of text.matchAll(new RegExp(`^${metric}_bucket\\{(?=[^}]*${label}="([^"]+)")(?=[^}]*le="([^"]+)")[^}]*\\} (\\d+)`, 'gm'))) {
      const buckets = out.get(m[1]!) ?? new Map<number, number>();
      const le = m[2] === '+Inf' ? Infinity : Number(m[2]);
      buckets.set(le, (buckets.get(le) ?? 0) + Number(m[3]));
      out.set(m[1]!, buckets);
    }
  }
  return out;
}

/**
 * Of the observations between two samples of one histogram's buckets: how many, the bound under
 * which a share `q` of them fell (a bucket's upper bound, Infinity past the last), and the
 * highest bucket any reached.
 */
export function bucketQuantile(before: Map<number, number> | undefined, after: Map<number, number> | undefined, q: number): { count: number; atMost: number; highest: number } {
  const bounds = [...(after?.keys() ?? [])].sort((a, b) => a - b);
  const cum = bounds.map((le) => (after!.get(le) ?? 0) - (before?.get(le) ?? 0));
  const count = cum[cum.length - 1] ?? 0;
  const at = (share: number) => bounds[cum.findIndex((c) => c >= share)] ?? Infinity;
  return { count, atMost: count === 0 ? 0 : at(q * count), highest: count === 0 ? 0 : at(count) };
}

/** The samples of a gateway's counter `metric` summed by the value of `label`. */
export async function countsBy(metricsUrls: readonly (string | undefined)[], metric: string, label: string): Promise<Map<string, number> | undefined> {
  const urls = metricsUrls.filter((url): url is string => url !== undefined);
  if (urls.length === 0) return undefined;
  const counts = new Map<string, number>();
  for (const url of urls) {
    const text = await (await fetch(url)).text();
    for (const m of text.matchAll(new RegExp(`^${metric}\\{[^}]*${label}="([^"]+)"[^}]*\\} (\\d+)`, 'gm'))) {
      counts.set(m[1]!, (counts.get(m[1]!) ?? 0) + Number(m[2]));
    }
  }
  return counts;
}

/** One sample of `group`: a single proxy, or the instances of a gateway on one store. */
export async function sample(ctx: Context, group: readonly Target[], upstream: Upstream): Promise<Sample> {
  const kind = kindOf(group[0]!.kind);
  const onRedis = REDIS_KINDS.includes(kind) && ctx.redis !== undefined;
  const [proxyCpus, loadCpu, upstreamCpu, redisCpu, redis, ops, leaseLateness, resumptionTimes] = await Promise.all([
    Promise.all(group.map((target) => (target.pid === undefined ? 0 : treeCpuSeconds(target.pid)))),
    treeCpuSeconds(ctx.load.pid),
    treeCpuSeconds(upstream.child.pid),
    onRedis ? treeCpuSeconds(ctx.redis!.pid) : 0,
    REDIS_KINDS.includes(kind) ? ctx.redis?.commandStats() : undefined,
    countsBy(group.map((target) => target.metricsUrl), 'mcp_gateway_store_duration_seconds_count', 'op'),
    bucketsBy(group.map((target) => target.metricsUrl), 'mcp_gateway_lease_renewal_lateness_seconds', 'lease'),
    bucketsBy(group.map((target) => target.metricsUrl), 'mcp_gateway_resumption_decision_seconds', 'phase'),
  ]);
  const proxyCpu = proxyCpus.reduce((a, b) => a + b, 0);
  return { at: performance.now(), proxyCpu, loadCpu, upstreamCpu, redisCpu, redis, storeOps: ops, leaseLateness, resumptionTimes };
}

/** after - before per key, without zeros and without our own INFO calls. */
export function delta(before: Map<string, number> | undefined, after: Map<string, number> | undefined): Map<string, number> | undefined {
  if (before === undefined || after === undefined) return undefined;
  const out = new Map<string, number>();
  for (const [key, value] of after) {
    const d = value - (before.get(key) ?? 0);
    if (d !== 0 && key !== 'info') out.set(key, d);
  }
  return out;
}

function total(counts: Map<string, number>): number {
  let sum = 0;
  for (const v of counts.values()) sum += v;
  return sum;
}

/** "evalsha=2.00 get=1.00" per unit, largest first. */
function breakdown(counts: Map<string, number>, per: number): string {
  return [...counts]
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k}=${(v / per).toFixed(2)}`)
    .join(' ');
}

/** Runs `body` with samples of `group` taken at the marks the load generator sends. */
export async function measured<R>(ctx: Context, group: readonly Target[], upstream: Upstream, body: (onMark: (which: 'start' | 'end') => void) => Promise<R>) {
  const marks: Partial<Record<'start' | 'end', Promise<Sample>>> = {};
  const result = await body((which) => {
    marks[which] = sample(ctx, group, upstream);
  });
  if (!marks.start || !marks.end) throw new Error('the load generator sent no window marks');
  const [start, end] = await Promise.all([marks.start, marks.end]);
  return { result, start, end, wall: (end.at - start.at) / 1000 };
}

/** Store cost rows of one window: Redis commands (INFO commandstats) and the gateway's store ops. */
export function storeRows(workload: string, target: Pick<Target, 'kind'>, unit: string, per: number, start: Sample, end: Sample): Row[] {
  const rows: Row[] = [];
  if (per <= 0) return rows;
  const redis = delta(start.redis, end.redis);
  if (redis) rows.push({ workload: 'store-cost', target: target.kind, metric: `redis_cmds_per_${unit} (${workload})`, value: total(redis) / per, note: breakdown(redis, per) });
  const ops = delta(start.storeOps, end.storeOps);
  if (ops) rows.push({ workload: 'store-cost', target: target.kind, metric: `store_ops_per_${unit} (${workload})`, value: total(ops) / per, note: breakdown(ops, per) });
  return rows;
}
