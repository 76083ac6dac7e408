/**
 * What every client of the load generator does with an MCP endpoint: the headers of a session's
 * requests, initialize, and requests a few at a time.
 */
import { Pool, type Dispatcher } from 'undici';

export const PROTOCOL_VERSION = '2025-06-18';
export const ACCEPT_BOTH = 'application/json, text/event-stream';

export function jsonRpc(id: number | undefined, method: string, params: unknown): string {
  return JSON.stringify(id === undefined ? { jsonrpc: '2.0', method, params } : { jsonrpc: '2.0', id, method, params });
}

const INITIALIZE = jsonRpc(0, 'initialize', {
  protocolVersion: PROTOCOL_VERSION,
  capabilities: {},
  clientInfo: { name: 'gateway-bench', version: '1' },
});
const INITIALIZED = jsonRpc(undefined, 'notifications/initialized', {});

export function pools(url: string, connections: number): { pool: Pool; path: string } {
  const u = new URL(url);
  // No pipelining: one request per connection at a time, as MCP clients send them.
  return { pool: new Pool(u.origin, { connections, pipelining: 1, keepAliveTimeout: 60_000, headersTimeout: 0, bodyTimeout: 0 }), path: u.pathname };
}

export function headers(session?: string, extra: Record<string, string> = {}): Record<string, string> {
  const h: Record<string, string> = { 'content-type': 'application/json', accept: ACCEPT_BOTH, ...extra };
  if (session !== undefined) {
    h['mcp-session-id'] = session;
    h['mcp-protocol-version'] = PROTOCOL_VERSION;
  }
  return h;
}

/** initialize + notifications/initialized; resolves with the session id. */
export async function initialize(pool: Dispatcher, path: string): Promise<string> {
  const res = await pool.request({ path, method: 'POST', headers: headers(), body: INITIALIZE });
  await res.body.text();
  const session = res.headers['mcp-session-id'];
  if (res.statusCode !== 200 || typeof session !== 'string') throw new Error(`initialize answered ${res.statusCode}`);
  const note = await pool.request({ path, method: 'POST', headers: headers(session), body: INITIALIZED });
  await note.body.text();
  return session;
}

/** Runs `fn` over `items`, `limit` at a time. */
export async function mapLimit<T>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < items.length; i = next++) await fn(items[i]!, i);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}
