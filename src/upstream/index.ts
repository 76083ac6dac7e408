/**
 * Connections to the replicas: two undici Pools per replica, one for GETs (SSE streams, each
 * holding its connection for as long as it lasts, within the replica's stream budget: budget.ts)
 * and one for every other request, so that requests answered with JSON never wait behind streams
 * (CONTRACT.md §7). Whose fault a failed request was is faults.ts; the probes' two questions
 * (refused? cut?) are answered here.
 */
import { isDeepStrictEqual } from 'node:util';
import { EventEmitter } from 'node:events';
import { Pool, type Dispatcher } from 'undici';
import type { ReplicaConfig } from '../config/schema.js';
import { errorCodes } from './faults.js';
import { StreamBudgets, type BudgetEvents } from './budget.js';

export { StreamBudgetExceeded } from './budget.js';

export interface UpstreamOptions {
  connectTimeoutMs: number;
  headersTimeoutMs: number;
  /** Connections per replica for requests that are not GETs. */
  connections: number;
  /** GETs (SSE streams) in flight per replica at the most: their pool's size. */
  maxStreams: number;
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

/** A request whose client left before it was sent: never sent (CONTRACT.md §7). */
export class ClientGone extends Error {
  readonly code = 'CLIENT_GONE';

  constructor() {
    super('the client left before the request was sent');
    this.name = 'ClientGone';
  }
}

type PoolKind = 'streams' | 'requests';

export class Upstreams {
  readonly #pools = new Map<string, Pool>();
  readonly budgets: StreamBudgets;

  constructor(
    private options: UpstreamOptions,
    events: BudgetEvents = { changed: () => undefined, exceeded: () => undefined },
  ) {
    this.budgets = new StreamBudgets(options.maxStreams, events);
  }

  /**
   * Sends a request. A GET takes a place in its replica's stream budget first, given back when its
   * response body closes (or it failed): StreamBudgetExceeded when there is none.
   */
  async send(replica: ReplicaConfig, request: UpstreamRequest): Promise<UpstreamResponse> {
    if (request.method !== 'GET') return this.#request('requests', replica, request);
    const giveBack = await this.budgets.acquire(replica.id);
    try {
      // Room may have been made while the client waited: one that left meanwhile is not sent.
      if (request.signal?.aborted) throw new ClientGone();
      const response = await this.#request('streams', replica, request);
      response.body.once('close', giveBack);
      return response;
    } catch (err) {
      giveBack();
      throw err;
    }
  }

  #request(kind: PoolKind, replica: ReplicaConfig, request: UpstreamRequest): Promise<UpstreamResponse> {
    return this.#pool(kind, replica).request({
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
    this.budgets.resize(options.maxStreams);
    const old = [...this.#pools.values()];
    this.#pools.clear();
    for (const pool of old) void pool.close().catch(() => undefined);
  }

  /** Forgets the pools of replicas no longer configured, closing their connections. */
  async retain(ids: ReadonlySet<string>): Promise<void> {
    const gone = [...this.#pools].filter(([key]) => !ids.has(key.split(' ')[1] ?? ''));
    for (const [key] of gone) this.#pools.delete(key);
    await Promise.all(gone.map(([, pool]) => pool.destroy()));
  }

  async close(): Promise<void> {
    const pools = [...this.#pools.values()];
    this.#pools.clear();
    await Promise.all(pools.map((pool) => pool.destroy()));
  }

  #pool(kind: PoolKind, replica: ReplicaConfig): Pool {
    const { origin } = parsed(replica);
    const key = `${kind} ${replica.id} ${origin}`;
    let pool = this.#pools.get(key);
    if (!pool) {
      pool = new Pool(origin, {
        // The stream budget bounds the GETs in flight: a GET never waits for a connection.
        connections: kind === 'streams' ? this.options.maxStreams : this.options.connections,
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
