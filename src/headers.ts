/**
 * Which headers cross the gateway. End-to-end headers pass, MCP's among them (CONTRACT.md R5);
 * hop-by-hop headers (RFC 9110 §7.6.1) and those named in `Connection` stay on their own hop.
 */
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';

const HOP_BY_HOP = new Set([
  // RFC 9110 §7.6.1, and Proxy-Connection of RFC 9112 Appendix C.2.2.
  'connection',
  'keep-alive',
  'proxy-connection',
  'te',
  'transfer-encoding',
  'upgrade',
  // Credentials for the proxy that asked for them (RFC 9110 §11.7): the gateway is none, and the
  // replica is not the one they are for.
  'proxy-authenticate',
  'proxy-authorization',
  // Announces trailer fields; the body is forwarded whole, without them.
  'trailer',
  // The connection-specific settings of an h2c upgrade (RFC 7540 §3.2.1), which is not forwarded.
  'http2-settings',
  // Met on the client's hop: Node's server answers 100-continue (and 417 to any other
  // expectation) before the gateway reads the body, which is whole before it is forwarded.
  'expect',
  // Recomputed for the body actually sent on each hop.
  'content-length',
  'host',
]);

/**
 * Headers that the gateway itself reads and the replica needs: a request whose `Connection` names
 * one of them (which RFC 9110 §7.6.1 forbids a sender) would be read one way by the gateway and
 * another by the replica, which would not get it.
 */
const NEEDED_BY_EVERY_HOP = new Set([
  'mcp-session-id',
  'mcp-protocol-version',
  'last-event-id',
  'mcp-method',
  'mcp-name',
  'accept',
  'content-type',
  'authorization',
  'origin',
]);

export const SESSION_HEADER = 'mcp-session-id';
export const LAST_EVENT_ID = 'last-event-id';

type AnyHeaders = IncomingHttpHeaders | Record<string, string | string[] | undefined>;

/** The header names that `Connection` lists (its options keep-alive and close among them); none for most requests. */
function namedInConnection(headers: AnyHeaders): Set<string> | undefined {
  const value = headers['connection'];
  if (value === undefined) return undefined;
  const list = (Array.isArray(value) ? value.join(',') : value).toLowerCase();
  if (list === 'keep-alive' || list === 'close') return undefined;
  return new Set(
    list
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
  );
}

/** The first header that `Connection` names and every hop needs, if any (GW_CONNECTION_NAMES_END_TO_END). */
export function endToEndNamedInConnection(headers: AnyHeaders): string | undefined {
  const named = namedInConnection(headers);
  if (named === undefined) return undefined;
  for (const name of named) if (NEEDED_BY_EVERY_HOP.has(name)) return name;
  return undefined;
}

/** End-to-end headers of `headers`, minus those in `drop` (lower-case names). */
export function endToEnd(headers: AnyHeaders, drop: readonly string[] = []): Record<string, string | string[]> {
  const connection = namedInConnection(headers);
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value === undefined) continue;
    const lower = name.toLowerCase();
    if (HOP_BY_HOP.has(lower) || connection?.has(lower) || (drop.length > 0 && drop.includes(lower))) continue;
    out[lower] = value;
  }
  return out;
}

/** Headers for the request to a replica, with the usual forwarding headers added. */
export function requestHeadersForReplica(
  incoming: IncomingHttpHeaders,
  client: { ip: string; protocol: string; host: string | undefined },
  drop: readonly string[] = [],
): Record<string, string | string[]> {
  const out = endToEnd(incoming, drop);
  // The client's own chain, unless its Connection named it: then it stays on the client's hop.
  const forwardedFor = out['x-forwarded-for'];
  out['x-forwarded-for'] = forwardedFor ? `${String(forwardedFor)}, ${client.ip}` : client.ip;
  out['x-forwarded-proto'] = client.protocol;
  if (client.host) out['x-forwarded-host'] = client.host;
  return out;
}

/**
 * Response headers that stay between the replicas and the gateway: the instance header
 * (health.instanceHeader) names a replica's process, which is nothing a client should see.
 */
export function replicaOnlyHeaders(config: { health: { instanceHeader?: string | undefined } }): readonly string[] {
  const name = config.health.instanceHeader;
  return name === undefined ? [] : [name.toLowerCase()];
}

/**
 * Headers for the response to the client. A replica's `Access-Control-*` headers stay behind: the
 * gateway alone grants browsers access (cors.ts).
 */
export function responseHeadersForClient(upstream: AnyHeaders, drop: readonly string[] = []): OutgoingHttpHeaders {
  const out = endToEnd(upstream, drop);
  for (const name in out) if (name.startsWith('access-control-')) delete out[name];
  return out;
}

export function headerValue(headers: AnyHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}
