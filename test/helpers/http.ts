/** Raw MCP over HTTP, for tests that look at bytes, headers and statuses rather than the SDK's view. */
import { once } from 'node:events';
import type { Server } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import type { Teardown } from './processes.js';

export const MCP_ACCEPT = 'application/json, text/event-stream';
export const PROTOCOL_VERSION = '2025-06-18';

export const SESSION_NOT_FOUND = '{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}';

export function initializeBody(id: number | string = 1): string {
  return JSON.stringify({
    jsonrpc: '2.0',
    id,
    method: 'initialize',
    params: { protocolVersion: PROTOCOL_VERSION, capabilities: {}, clientInfo: { name: 'raw-test', version: '1.0.0' } },
  });
}

export function toolCallBody(name: string, args: Record<string, unknown> = {}, id: number | string = 2): string {
  return JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });
}

export function post(url: string, body: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: MCP_ACCEPT, 'mcp-protocol-version': PROTOCOL_VERSION, ...headers },
    body,
  });
}

/** Initializes a session with raw requests (with `headers` on each, a credential say); returns its id. */
export async function rawSession(url: string, headers: Record<string, string> = {}): Promise<string> {
  const response = await post(url, initializeBody(), headers);
  await response.text();
  const sessionId = response.headers.get('mcp-session-id');
  if (response.status !== 200 || !sessionId) throw new Error(`initialize answered ${response.status} without a session`);
  const initialized = await post(url, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), { ...headers, 'mcp-session-id': sessionId });
  await initialized.text();
  return sessionId;
}

/** A loopback port that nothing listens on (it refuses connections). */
export async function refusingPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (!address || typeof address === 'string') throw new Error('no port');
  return address.port;
}

/** Listens on a free loopback port until the test ends (its connections closed then): the port. */
export async function listenOnLoopback(t: Teardown, server: Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return (server.address() as AddressInfo).port;
}
