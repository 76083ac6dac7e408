/**
 * Connections to the replicas: one undici Pool per replica. Whose fault a failed request was is
 * fleet/faults.ts; the probes' two questions (refused? cut?) are answered here.
 */
import { isDeepStrictEqual } from 'node:util';
import { EventEmitter } from 'node:events';
import { Pool, type Dispatcher } from 'undici';
import type { ReplicaConfig } from './config/schema.js';
import { errorCodes } from './fleet/faults.js';

export interface UpstreamOptions {
  connectTimeoutMs: number;
  headersTimeoutMs: number;
  connections: number;
}

export interface UpstreamRequest {
  method: string;
  /** Path and query on the replica. */
  path: string;
  headers: Record<string, string | string[]>;
  body?: Buffer | undefined;
  signal?: UpstreamAbort | undefined;
}

export type UpstreamResponse = Dispatcher.ResponseData;

/**
 * Cancels a request to a replica: the response body is destroyed, or the request aborted before
 * its answer came. An EventEmitter, which undici takes as a signal as it takes an AbortSignal:
 * an AbortController and its signal's listeners cost more per request than routing it.
 */
export class UpstreamAbort extends EventEmitter {
  aborted = false;

  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.emit('abort');
  }
}

export class Upstreams {
  readonly #pools = new Map<string, Pool>();

  constructor(private options: UpstreamOptions) {}

  send(replica: ReplicaConfig, request: UpstreamRequest): Promise<UpstreamResponse> {
    return this.#pool(replica).request({
      method: request.method as Dispatcher.HttpMethod,
      path: request.path,
      headers: request.headers,
      body: request.body ?? null,
      signal: request.signal,
      // An SSE stream may stay silent for as long as it likes (R5): no body timeout at all.
      bodyTimeout: 0,
    });
  }

  /**
   * New timeouts and pool sizes (a reload): requests from now on go through new pools; the old
   * ones close once their requests, open SSE streams included, are over.
   */
  reconfigure(options: UpstreamOptions): void {
    if (isDeepStrictEqual(options, this.options)) return;
    this.options = options;
    const old = [...this.#pools.values()];
    this.#pools.clear();
    for (const pool of old) void pool.close().catch(() => undefined);
  }

  /** Forgets the pools of replicas no longer configured, closing their connections. */
  async retain(ids: ReadonlySet<string>): Promise<void> {
    const gone = [...this.#pools].filter(([key]) => !ids.has(key.split(' ')[0] ?? ''));
    for (const [key] of gone) this.#pools.delete(key);
    await Promise.all(gone.map(([, pool]) => pool.destroy()));
  }

  async close(): Promise<void> {
    const pools = [...this.#pools.values()];
    this.#pools.clear();
    await Promise.all(pools.map((pool) => pool.destroy()));
  }

  #pool(replica: ReplicaConfig): Pool {
    const { origin } = parsed(replica);
    const key = `${replica.id} ${origin}`;
    let pool = this.#pools.get(key);
    if (!pool) {
      pool = new Pool(origin, {
        connections: this.options.connections,
        connect: { timeout: this.options.connectTimeoutMs },
        // A JSON-answered tools/call sends its headers only when the tool is done.
        headersTimeout: this.options.headersTimeoutMs,
        bodyTimeout: 0,
      });
      this.#pools.set(key, pool);
    }
    return pool;
  }
}

/** The path on the replica for a client request: the replica's endpoint plus the client's query. */
export function replicaPath(replica: ReplicaConfig, clientUrl: string): string {
  const endpoint = parsed(replica);
  const query = clientUrl.indexOf('?');
  return endpoint.pathname + (query >= 0 ? clientUrl.slice(query) : endpoint.search);
}

// A replica's URL, parsed once per (frozen) configuration entry rather than once per request.
const urls = new WeakMap<ReplicaConfig, URL>();
function parsed(replica: ReplicaConfig): URL {
  let url = urls.get(replica);
  if (!url) {
    url = new URL(replica.url);
    urls.set(replica, url);
  }
  return url;
}

/** Nothing listens at the replica's address: the connection was refused. */
export function isRefused(err: unknown): boolean {
  return errorCodes(err).includes('ECONNREFUSED');
}

/** The connection was cut under the request (a process being killed closes its connections so). */
export function isReset(err: unknown): boolean {
  return errorCodes(err).some((code) => code === 'ECONNRESET' || code === 'EPIPE' || code === 'UND_ERR_SOCKET');
}

export function describeUpstreamError(err: unknown): string {
  const codes = errorCodes(err);
  return codes[0] ?? (err instanceof Error ? err.message : String(err));
}

/**
 * Throws away a replica's response body that will not be read. Destroying an undici body whose
 * request was aborted emits 'error': without a listener that would end the process.
 */
export function discard(response: UpstreamResponse): void {
  response.body.on('error', () => undefined);
  response.body.destroy();
}

/** Whether the replica answered with an SSE stream. */
export function isEventStream(response: UpstreamResponse): boolean {
  const type = response.headers['content-type'];
  return (Array.isArray(type) ? type[0] : type)?.toLowerCase().startsWith('text/event-stream') ?? false;
}
