/**
 * The shared cache of the 2026-07-28 era (src/eras/cache.ts): what is kept, under which key, for
 * how long, and within which bounds. Time is the cache's injected clock.
 */
import t from 'tap';
import { cacheKey, createResultCache, type CacheLimits } from '../../src/eras/cache.js';
import type { ModernMessage } from '../../src/eras/classify.js';

const META = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };

function message(method: string, params: Record<string, unknown> = {}, meta: Record<string, unknown> = META): ModernMessage {
  return { method, id: 1, params: { ...params, _meta: meta } };
}

function answer(result: Record<string, unknown>): Buffer {
  return Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, result }));
}

const PUBLIC = { tools: [], ttlMs: 1000, cacheScope: 'public', resultType: 'complete' };

function cacheWith(initial: Partial<CacheLimits> = {}) {
  let clock = 0;
  let limits: CacheLimits = { enabled: true, maxEntries: 10, maxBytes: 10_000, ...initial };
  const cache = createResultCache(() => limits, () => clock);
  return { cache, advance: (ms: number) => (clock += ms), reload: (next: Partial<CacheLimits>) => (limits = { ...limits, ...next }) };
}

t.test('the key: method, protocol version, declared capabilities and every parameter but _meta', async (t) => {
  const key = cacheKey(message('resources/read', { uri: 'a://1' }))!;
  t.equal(cacheKey(message('resources/read', { uri: 'a://1' }, { ...META, 'io.modelcontextprotocol/clientInfo': { name: 'x' } })), key, 'client info does not change it');
  t.equal(cacheKey(message('resources/read', { uri: 'a://1' }, { ...META, progressToken: 7 })), key, 'nor a progress token');
  t.not(cacheKey(message('resources/read', { uri: 'a://2' })), key, 'another uri does');
  t.not(cacheKey(message('resources/read', { uri: 'a://1' }, { ...META, 'io.modelcontextprotocol/clientCapabilities': { sampling: {} } })), key, 'other capabilities do');
  t.not(cacheKey(message('resources/read', { uri: 'a://1' }, { ...META, 'io.modelcontextprotocol/protocolVersion': '2027-01-01' })), key, 'another version does');
  t.equal(cacheKey(message('tools/list', { cursor: 'b', x: { q: 1, p: 2 } })), cacheKey(message('tools/list', { x: { p: 2, q: 1 }, cursor: 'b' })), 'key order does not');
  t.not(cacheKey(message('tools/list', { cursor: 'b' })), cacheKey(message('tools/list')), 'a page is its own entry');
  t.equal(cacheKey(message('tools/call', { name: 'x' })), undefined, 'a tool call is never cached');
  t.equal(cacheKey(message('resources/read', { uri: 'a://1', requestState: 's' })), undefined, 'nor a retry with requestState');
  t.equal(cacheKey(message('resources/read', { uri: 'a://1', inputResponses: {} })), undefined, 'nor one with inputResponses');
});

t.test('only a public, complete result with a positive ttlMs is kept, and served with the ttlMs that remains', async (t) => {
  const { cache, advance } = cacheWith();
  const offered: [string, Record<string, unknown>][] = [
    ['private', { ...PUBLIC, cacheScope: 'private' }],
    ['no scope', { tools: [], ttlMs: 1000 }],
    ['input_required', { ...PUBLIC, resultType: 'input_required' }],
    ['ttl 0', { ...PUBLIC, ttlMs: 0 }],
    ['ttl negative', { ...PUBLIC, ttlMs: -5 }],
    ['ttl not an integer', { ...PUBLIC, ttlMs: 1.5 }],
  ];
  for (const [name, result] of offered) {
    cache.offer(name, answer(result));
    t.equal(cache.answer(name, 2), undefined, `${name}: not kept`);
  }
  cache.offer('error', Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, error: { code: -1, message: 'x' } })));
  cache.offer('not json', Buffer.from('{'));
  t.same(cache.size(), { entries: 0, bytes: 0 }, 'nor an error, nor what is not JSON');

  cache.offer('k', answer(PUBLIC));
  advance(400);
  t.same(JSON.parse(cache.answer('k', 'req-2')!), { jsonrpc: '2.0', id: 'req-2', result: { ...PUBLIC, ttlMs: 600 } }, "the second request's id, 600 ms left");
  advance(600);
  t.equal(cache.answer('k', 3), undefined, 'gone once its ttlMs has passed');
  t.same(cache.size(), { entries: 0, bytes: 0 }, 'and dropped');
});

t.test('bounded by entries and by bytes, the least recently used out first', async (t) => {
  const { cache } = cacheWith({ maxEntries: 2 });
  cache.offer('a', answer(PUBLIC));
  cache.offer('b', answer(PUBLIC));
  t.ok(cache.answer('a', 1), 'a used');
  cache.offer('c', answer(PUBLIC));
  t.equal(cache.size().entries, 2, 'two entries at most');
  t.equal(cache.answer('b', 1), undefined, 'b, the least recently used, is out');
  t.ok(cache.answer('a', 1) && cache.answer('c', 1), 'a and c stay');

  const one = answer(PUBLIC).length;
  const bytes = cacheWith({ maxBytes: 2 * one });
  for (const key of ['a', 'b', 'c']) bytes.cache.offer(key, answer(PUBLIC));
  t.same(bytes.cache.size(), { entries: 2, bytes: 2 * one }, 'the bytes stay within maxBytes');
  const big = answer({ ...PUBLIC, tools: ['x'.repeat(3 * one)] });
  bytes.cache.offer('big', big);
  t.equal(bytes.cache.answer('big', 1), undefined, 'a result larger than maxBytes is not kept');
  t.equal(bytes.cache.size().entries, 2, 'and evicts nothing');
});

t.test('a reload: lower bounds apply from the next request on, and turned off the cache lets go of all', async (t) => {
  const { cache, reload } = cacheWith();
  for (const key of ['a', 'b', 'c']) cache.offer(key, answer(PUBLIC));
  reload({ maxEntries: 1 });
  t.ok(cache.answer('c', 1), 'the most recent stays');
  t.same(cache.size().entries, 1, 'the others are out');
  reload({ enabled: false });
  t.equal(cache.enabled(), false, 'off');
  t.same(cache.size(), { entries: 0, bytes: 0 }, 'nothing held');
});
