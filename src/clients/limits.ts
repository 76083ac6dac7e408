/**
 * Bounds on what clients hold of the MCP listener: the time a request's header block may take to
 * arrive (a silent or half-sent request holds a socket and a parser for nothing), and the number of
 * open client connections. Neither bounds a request once its headers are in: an SSE response stays
 * open as long as its stream (R5). Both can change while running (SIGHUP).
 */
import type { Server } from 'node:http';
import type { Config } from '../config/schema.js';
import type { Metrics } from '../metrics.js';

/**
 * How often Node looks for requests whose headers are late (fixed when the server is made): a
 * late header block is closed at most this long after its bound.
 */
export const HEADERS_CHECK_INTERVAL_MS = 1000;

/** Applies `limits` to a listening or not yet listening server; counts connections over the limit. */
export function applyClientLimits(server: Server, limits: Config['limits']): void {
  // Node closes a connection whose request has not sent all its headers in time, answering 408
  // through the client error handler, which counts it.
  server.headersTimeout = limits.headersTimeoutMs;
  // requestTimeout 0: nothing cuts a request after its headers (SSE). Node wants headersTimeout
  // below any non-zero requestTimeout; with 0 there is none.
  server.requestTimeout = 0;
  server.maxConnections = limits.clientConnections;
}

/** Counts every connection Node drops for being over `maxConnections`. */
export function countDroppedConnections(server: Server, metrics: Metrics): void {
  server.on('drop', () => metrics.clientsRefused.inc({ reason: 'connection_limit' }));
}

/** The refusal reason of a request Node's parser refused, by the status it was answered with. */
export function refusalReason(status: number): string {
  if (status === 408) return 'headers_timeout';
  if (status === 431) return 'header_overflow';
  return 'malformed';
}
