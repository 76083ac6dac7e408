/**
 * The shared cache of the 2026-07-28 era through the gateway, on real SDK v2 processes (the
 * conformance fixture, test/conformance/server-main.ts: its tools/list and test://static-text are
 * public for a minute, test://static-binary private).
 */
import t from 'tap';
import { metricValue, startGateway } from '../helpers/gateway.js';
import { MCP_ACCEPT } from '../helpers/http.js';
import type { Teardown } from '../helpers/processes.js';
import { spawnConformanceServer } from '../conformance/run.js';

const META = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };

async function fleet(t: Teardown, cache?: Record<string, unknown>) {
  const urls = await Promise.all([1, 2].map((i) => spawnConformanceServer(t, '2026', { id: `c${i}` })));
  return startGateway(t, { replicas: urls.map((url, i) => ({ id: `c${i + 1}`, url })), ...(cache ? { cache } : {}) });
}

let nextId = 1;
async function call(url: string, method: string, params: Record<string, unknown> = {}) {
  const id = nextId++;
  const response = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: MCP_ACCEPT,
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': method,
      ...(typeof params['uri'] === 'string' ? { 'mcp-name': params['uri'] } : {}),
    },
    body: JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: META } }),
  });
  const body = (await response.json()) as { id: number; result?: Record<string, unknown>; error?: unknown };
  return { id, status: response.status, cache: response.headers.get('mcp-gateway-cache'), body };
}

const counted = (gw: Awaited<ReturnType<typeof fleet>>, result: string) => metricValue(gw.registry, 'mcp_gateway_cache_requests_total', { result });

t.test('a public result is answered from the cache for its ttlMs; a private one never', async (t) => {
  const gw = await fleet(t, { enabled: true });
  const first = await call(gw.url, 'tools/list');
  t.equal(first.cache, null, 'the first tools/list reaches a replica');
  t.equal(first.body.result?.['cacheScope'], 'public', 'the replica says the list is public');
  const second = await call(gw.url, 'tools/list');
  t.equal(second.cache, 'hit', 'the second is answered from the cache');
  t.equal(second.body.id, second.id, 'with its own id');
  t.same(second.body.result?.['tools'], first.body.result?.['tools'], 'and the same tools');
  const ttl = second.body.result?.['ttlMs'] as number;
  t.ok(ttl > 0 && ttl <= (first.body.result?.['ttlMs'] as number), 'its ttlMs is what remains of the first');

  const read = { uri: 'test://static-text' };
  t.equal((await call(gw.url, 'resources/read', read)).cache, null, 'a public read is forwarded once');
  t.equal((await call(gw.url, 'resources/read', read)).cache, 'hit', 'then answered from the cache');
  t.equal((await call(gw.url, 'resources/read', { uri: 'test://template/7/data' })).cache, null, 'another uri is another entry');

  for (let i = 0; i < 2; i++) {
    const binary = await call(gw.url, 'resources/read', { uri: 'test://static-binary' });
    t.equal(binary.body.result?.['cacheScope'], 'private', 'the replica says the read is private');
    t.equal(binary.cache, null, `a private result is never kept (${i + 1})`);
  }

  const retry = await call(gw.url, 'resources/read', { ...read, requestState: 'anything' });
  t.equal(retry.cache, null, 'a retry with requestState is never answered from the cache');
  t.equal(await counted(gw, 'hit'), 2, 'two hits counted');
  t.equal(await counted(gw, 'miss'), 5, 'five misses');
  t.equal(await counted(gw, 'bypass'), 1, 'one bypass');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_cache_entries'), 2, 'the two public results are held');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: 'none' }), 2, 'the hits are answers of the gateway itself');
});

t.test('off by default: every request reaches a replica', async (t) => {
  const gw = await fleet(t);
  for (let i = 0; i < 2; i++) t.equal((await call(gw.url, 'tools/list')).cache, null, `tools/list ${i + 1} forwarded`);
  t.equal(await metricValue(gw.registry, 'mcp_gateway_cache_requests_total'), 0, 'nothing counted');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_requests_total', { replica: 'none' }), 0, 'no answer of the gateway itself');
});
