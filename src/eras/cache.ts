/**
 * The shared cache of the 2026-07-28 era (specification, server/utilities/caching): what the
 * specification lets a shared gateway keep. Only the results of the cacheable operations
 * (`server/discover`, the four lists, `resources/read`) that say `cacheScope: "public"` and a
 * positive `ttlMs`, with `resultType` `complete` (or none), kept for that `ttlMs` and served for
 * it with the `ttlMs` that remains, like an HTTP cache's `Age`. Never a `private` result, never an
 * `input_required` one, and a request carrying `inputResponses` or `requestState` (a multi-round
 * retry) is neither served from the cache nor stored.
 *
 * The key is the method, the protocol version, the client's declared capabilities and every
 * parameter but `_meta` (the `uri` of a read, the `cursor` of a page), so that a cached answer is
 * only ever served to a request that differs from the one that produced it in its id and in what
 * the result does not depend on (client info, log level, progress token). `Authorization` is not
 * in the key: the specification lets a public result be shared across authorization contexts.
 *
 * Bounded by entries and by bytes (the serialized results), least recently used out first. In
 * memory, per gateway instance: instances sharing a store do not share a cache.
 */
import { Transform, pipeline, type Readable } from 'node:stream';
import { isEventStream, type UpstreamResponse } from '../upstream/index.js';
import type { ModernMessage } from './classify.js';
import { PROTOCOL_VERSION_META_KEY } from './classify.js';

export const CACHEABLE_METHODS: ReadonlySet<string> = new Set([
  'server/discover',
  'tools/list',
  'prompts/list',
  'resources/list',
  'resources/templates/list',
  'resources/read',
]);
/** On an answer from the cache: `hit`. */
export const CACHE_HEADER = 'mcp-gateway-cache';
const CLIENT_CAPABILITIES_META_KEY = 'io.modelcontextprotocol/clientCapabilities';

export interface CacheLimits {
  enabled: boolean;
  maxEntries: number;
  maxBytes: number;
}

interface Entry {
  /** The result as the replica sent it, without `ttlMs`. */
  result: Record<string, unknown>;
  expiresAt: number;
  bytes: number;
}

/** The key of a request whose answer may come from the cache, or undefined when it may not. */
export function cacheKey(message: ModernMessage): string | undefined {
  if (!CACHEABLE_METHODS.has(message.method)) return undefined;
  const { _meta: meta, ...params } = message.params;
  if ('inputResponses' in params || 'requestState' in params) return undefined;
  const envelope = (meta ?? {}) as Record<string, unknown>;
  return canonical([message.method, envelope[PROTOCOL_VERSION_META_KEY], envelope[CLIENT_CAPABILITIES_META_KEY] ?? null, params]);
}

/** JSON with the keys of every object in order, so that equal parameters give equal keys. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

export type ResultCache = ReturnType<typeof createResultCache>;

export function createResultCache(limits: () => CacheLimits, now: () => number = Date.now) {
  // A Map iterates in insertion order: a hit is moved to the end, eviction takes from the start.
  const entries = new Map<string, Entry>();
  let bytes = 0;

  function drop(key: string): void {
    const entry = entries.get(key);
    if (entry === undefined) return;
    entries.delete(key);
    bytes -= entry.bytes;
  }

  function fit(): void {
    const { maxEntries, maxBytes } = limits();
    for (const key of entries.keys()) {
      if (entries.size <= maxEntries && bytes <= maxBytes) return;
      drop(key);
    }
  }

  function clear(): void {
    entries.clear();
    bytes = 0;
  }

  return {
    /** Whether the cache is on; turned off (a reload), it lets go of what it held. */
    enabled(): boolean {
      const on = limits().enabled;
      if (!on && entries.size > 0) clear();
      return on;
    },

    /** The answer to `id` from the cache: a JSON-RPC response body with the `ttlMs` that remains. */
    answer(key: string, id: string | number | null): string | undefined {
      // Bounds lowered by a reload apply from the next request on.
      fit();
      const entry = entries.get(key);
      if (entry === undefined) return undefined;
      const remaining = entry.expiresAt - now();
      if (remaining <= 0) {
        drop(key);
        return undefined;
      }
      entries.delete(key);
      entries.set(key, entry);
      return JSON.stringify({ jsonrpc: '2.0', id, result: { ...entry.result, ttlMs: remaining } });
    },

    /** Keeps the replica's JSON answer when the specification lets a shared cache keep it. */
    offer(key: string, body: Buffer): void {
      const result = publicResult(body);
      if (result === undefined) return;
      const { ttlMs, ...rest } = result;
      const size = body.length;
      const { maxBytes, maxEntries } = limits();
      if (size > maxBytes || maxEntries === 0) return;
      drop(key);
      entries.set(key, { result: rest, expiresAt: now() + (ttlMs as number), bytes: size });
      bytes += size;
      fit();
    },

    /** Entries and bytes held now. */
    size: () => ({ entries: entries.size, bytes }),
  };
}

/** The result of a JSON-RPC response that a shared cache may keep, or undefined. */
function publicResult(body: Buffer): Record<string, unknown> | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return undefined;
  const result = (parsed as Record<string, unknown>)['result'];
  if (result === null || typeof result !== 'object' || Array.isArray(result)) return undefined;
  const r = result as Record<string, unknown>;
  const resultType = r['resultType'];
  if (resultType !== undefined && resultType !== 'complete') return undefined;
  if (r['cacheScope'] !== 'public') return undefined;
  const ttlMs = r['ttlMs'];
  if (typeof ttlMs !== 'number' || !Number.isSafeInteger(ttlMs) || ttlMs <= 0) return undefined;
  return r;
}

/** A replica's JSON answer with its bytes handed to `done` once it reached the client (at most `maxBytes`). */
export function watchForCache(response: UpstreamResponse, maxBytes: number, done: (body: Buffer) => void): UpstreamResponse {
  if (response.statusCode !== 200 || isEventStream(response)) return response;
  return { ...response, body: capturing(response.body, maxBytes, done) } as UpstreamResponse;
}

/**
 * `source` as it flows, with its bytes handed to `done` once it ended, when they were at most
 * `maxBytes` (beyond that they are not kept).
 */
function capturing(source: Readable, maxBytes: number, done: (body: Buffer) => void): Readable {
  const chunks: Buffer[] = [];
  let size = 0;
  const tee = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      size += chunk.length;
      if (size <= maxBytes) chunks.push(chunk);
      callback(null, chunk);
    },
    flush(callback) {
      if (size <= maxBytes) done(Buffer.concat(chunks));
      callback();
    },
  });
  pipeline(source, tee, () => undefined);
  return tee;
}
