/** The one sampler of bench/ (bench/lib/sampler.ts): what it reads of a group of proxies. */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { admittedRows } from '../../bench/lib/fleet-workloads.js';
import { bucketQuantile, bucketsBy, countsBy, delta, storeRows, type Sample } from '../../bench/lib/sampler.js';

async function metricsServer(t: Test, body: string): Promise<string> {
  const server = createServer((_req, res) => res.end(body));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`;
}

t.test("a group's counters are summed over its instances, by label", async (t) => {
  const one = await metricsServer(t, 'mcp_gateway_store_duration_seconds_count{op="record"} 3\nmcp_gateway_store_duration_seconds_count{op="lookup"} 1\n');
  const two = await metricsServer(t, 'mcp_gateway_store_duration_seconds_count{op="record"} 4\n');
  const counts = await countsBy([one, undefined, two], 'mcp_gateway_store_duration_seconds_count', 'op');
  t.strictSame(Object.fromEntries(counts ?? []), { record: 7, lookup: 1 });
  t.equal(await countsBy([undefined], 'mcp_gateway_store_duration_seconds_count', 'op'), undefined, 'no metrics to read: no counts');
});

t.test('store rows: per unit, without zeros and without the INFO calls of the sampler', async (t) => {
  const edge = (redis: Record<string, number>, ops: Record<string, number>): Sample => ({
    at: 0, proxyCpu: 0, loadCpu: 0, upstreamCpu: 0, redisCpu: 0, redis: new Map(Object.entries(redis)), storeOps: new Map(Object.entries(ops)), leaseLateness: undefined, resumptionTimes: undefined,
  });
  const start = edge({ evalsha: 10, info: 1, get: 5 }, { record: 2 });
  const end = edge({ evalsha: 30, info: 9, get: 5 }, { record: 12 });
  t.strictSame(Object.fromEntries(delta(start.redis, end.redis) ?? []), { evalsha: 20 });
  t.strictSame(storeRows('streams', { kind: 'gateway-redis-journal' }, 'event', 10, start, end), [
    { workload: 'store-cost', target: 'gateway-redis-journal', metric: 'redis_cmds_per_event (streams)', value: 2, note: 'evalsha=2.00' },
    { workload: 'store-cost', target: 'gateway-redis-journal', metric: 'store_ops_per_event (streams)', value: 1, note: 'record=1.00' },
  ]);
});

t.test("a histogram's buckets are summed over the group, by label; a window's quantile is a bucket bound", async (t) => {
  const name = 'mcp_gateway_lease_renewal_lateness_seconds';
  const one = await metricsServer(t, `${name}_bucket{le="0.1",lease="stream"} 5\n${name}_bucket{le="1",lease="stream"} 8\n${name}_bucket{le="+Inf",lease="stream"} 10\n${name}_bucket{le="0.1",lease="instance"} 2\n${name}_bucket{le="1",lease="instance"} 2\n${name}_bucket{le="+Inf",lease="instance"} 2\n${name}_count{lease="stream"} 10\n`);
  const two = await metricsServer(t, `${name}_bucket{lease="stream",le="0.1"} 0\n${name}_bucket{lease="stream",le="1"} 0\n${name}_bucket{lease="stream",le="+Inf"} 90\n`);
  const after = await bucketsBy([one, two], name, 'lease');
  t.strictSame(Object.fromEntries(after?.get('stream') ?? []), { 0.1: 5, 1: 8, Infinity: 100 }, 'summed, whatever the labels order');
  t.strictSame(Object.fromEntries(after?.get('instance') ?? []), { 0.1: 2, 1: 2, Infinity: 2 });
  const before = new Map([[0.1, 5], [1, 5], [Infinity, 5]]);
  t.strictSame(bucketQuantile(before, after?.get('stream'), 0.99), { count: 95, atMost: Infinity, highest: Infinity }, 'most of the window past the last bound');
  t.strictSame(bucketQuantile(undefined, after?.get('instance'), 0.99), { count: 2, atMost: 0.1, highest: 0.1 });
  t.strictSame(bucketQuantile(undefined, undefined, 0.99), { count: 0, atMost: 0, highest: 0 }, 'nothing observed');
});

t.test("the storm's admitted decisions, by phase, over the window only", async (t) => {
  const buckets = (counts: [number, number][]) => new Map(counts);
  const edge = (times: Sample['resumptionTimes']): Sample => ({
    at: 0, proxyCpu: 0, loadCpu: 0, upstreamCpu: 0, redisCpu: 0, redis: undefined, storeOps: undefined, leaseLateness: undefined, resumptionTimes: times,
  });
  const start = edge(new Map([['decided', buckets([[0.1, 5], [1, 5], [Infinity, 5]])]]));
  // In the window: 100 decided, 98 within 0.1 s, one more within 1 s, one past the last bound; 10 queued within 0.1 s.
  const end = edge(new Map([
    ['decided', buckets([[0.1, 103], [1, 104], [Infinity, 105]])],
    ['queued', buckets([[0.1, 10], [1, 10], [Infinity, 10]])],
  ]));
  const rows = Object.fromEntries(admittedRows({ workload: 'storm', target: 'gateway-redis-journal' }, start, end).map((r) => [r.metric, r.value]));
  t.strictSame(rows, { admitted_decided_p50_ms: 100, admitted_decided_p99_ms: 1000, admitted_queued_p50_ms: 100, admitted_queued_p99_ms: 100 });
});
