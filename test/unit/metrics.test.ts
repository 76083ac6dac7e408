/**
 * Series counted in plain numbers on the hot path (metrics.ts) read on /metrics as prom-client's
 * own: every count on every scrape, cumulative between scrapes, the names and labels of CONTRACT.md §6.
 */
import { Registry } from 'prom-client';
import t from 'tap';
import { createMetrics } from '../../src/metrics.js';

function series(text: string, name: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) if (line.startsWith(`${name}{`)) out[line.slice(name.length, line.lastIndexOf(' '))] = Number(line.slice(line.lastIndexOf(' ') + 1));
  return out;
}

t.test('mcp_gateway_requests_total: every answer counted, cumulative across scrapes', async (t) => {
  const registry = new Registry();
  const metrics = createMetrics(registry);
  metrics.countRequest('POST', 200, 'r1');
  metrics.countRequest('POST', 200, 'r1');
  metrics.countRequest('GET', 404, 'none');
  t.same(series(await registry.metrics(), 'mcp_gateway_requests_total'), {
    '{method="POST",status="200",replica="r1"}': 2,
    '{method="GET",status="404",replica="none"}': 1,
  });
  metrics.countRequest('POST', 200, 'r1');
  t.same(series(await registry.metrics(), 'mcp_gateway_requests_total'), {
    '{method="POST",status="200",replica="r1"}': 3,
    '{method="GET",status="404",replica="none"}': 1,
  }, 'the next scrape adds what came since');
});

t.test('the timers observe once each, on their series', async (t) => {
  const registry = new Registry();
  const metrics = createMetrics(registry);
  metrics.upstreamTimer('r1')();
  metrics.storeTimer('touchSession')();
  metrics.storeTimer('touchSession')();
  const text = await registry.metrics();
  t.same(series(text, 'mcp_gateway_upstream_duration_seconds_count'), { '{replica="r1"}': 1 });
  t.same(series(text, 'mcp_gateway_store_duration_seconds_count'), { '{op="touchSession"}': 2 });
});
