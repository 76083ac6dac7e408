/** Small tools for load tests: bounded concurrency, percentiles, and what Redis and processes used. */
import { readFile } from 'node:fs/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Redis } from 'ioredis';
import type { Registry } from 'prom-client';

/** Runs `fn` over `items`, at most `limit` at a time; results in the order of `items`. */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) results[i] = await fn(items[i] as T, i);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

/** Nearest-rank percentiles of `values` (ms), rounded to 0.1. */
export function percentiles(values: readonly number[], ps: readonly number[] = [50, 90, 99, 100]): Record<string, number> {
  const sorted = [...values].sort((a, b) => a - b);
  const out: Record<string, number> = {};
  for (const p of ps) {
    const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
    out[p === 100 ? 'max' : `p${p}`] = Math.round((sorted[rank - 1] ?? Number.NaN) * 10) / 10;
  }
  return out;
}

/** `INFO commandstats` as calls per command (lower case), read over a connection of its own. */
export async function commandStats(redisUrl: string): Promise<Map<string, number>> {
  const client = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await client.connect();
    const info = await client.info('commandstats');
    const calls = new Map<string, number>();
    for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(match[1]!, Number(match[2]));
    return calls;
  } finally {
    client.disconnect();
  }
}

/** after - before, per key, without zeros and without `skip`. */
export function difference(before: Map<string, number>, after: Map<string, number>, skip: readonly string[] = []): Map<string, number> {
  const out = new Map<string, number>();
  for (const [key, value] of after) {
    const delta = value - (before.get(key) ?? 0);
    if (delta !== 0 && !skip.includes(key)) out.set(key, delta);
  }
  return out;
}

/** Store operations done by the gateways so far, by `op` (the count of their duration histogram). */
export async function storeOps(registries: readonly Registry[]): Promise<Map<string, number>> {
  const ops = new Map<string, number>();
  for (const registry of registries) {
    const metric = await registry.getSingleMetric('mcp_gateway_store_duration_seconds')?.get();
    for (const sample of metric?.values ?? []) {
      if (!(sample as { metricName?: string }).metricName?.endsWith('_count')) continue;
      const op = String(sample.labels['op']);
      ops.set(op, (ops.get(op) ?? 0) + sample.value);
    }
  }
  return ops;
}

/** "a=1 b=2", largest first. */
export function describeCounts(counts: Map<string, number>): string {
  return [...counts].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k}=${v}`).join(' ');
}

export function sum(counts: Map<string, number>): number {
  let total = 0;
  for (const value of counts.values()) total += value;
  return total;
}

/** Resident set size of another process in bytes (Linux /proc); undefined where unavailable. */
export async function processRss(pid: number): Promise<number | undefined> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => undefined);
  const kb = status?.match(/^VmRSS:\s+(\d+) kB/m)?.[1];
  return kb === undefined ? undefined : Number(kb) * 1024;
}

/**
 * A full garbage collection, so that heap figures compare live objects rather than garbage. The
 * flag only exposes `gc` to contexts created after it is set, hence the new context.
 */
export function collectGarbage(): void {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}

export function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** CPU time a process has used so far, in ms (Linux /proc/PID/schedstat); undefined where unavailable. */
export async function processCpuMs(pid: number): Promise<number | undefined> {
  const schedstat = await readFile(`/proc/${pid}/schedstat`, 'utf8').catch(() => undefined);
  const ns = schedstat?.split(' ')[0];
  return ns === undefined ? undefined : Number(ns) / 1e6;
}

/** CPU time redis-server has used so far, in ms (`INFO cpu`, user plus system). */
export async function redisCpuMs(redisUrl: string): Promise<number> {
  const client = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await client.connect();
    const info = await client.info('cpu');
    const seconds = (name: string) => Number(info.match(new RegExp(`^${name}:([0-9.]+)`, 'm'))?.[1] ?? Number.NaN);
    return (seconds('used_cpu_user') + seconds('used_cpu_sys')) * 1000;
  } finally {
    client.disconnect();
  }
}
