/**
 * The Origin policy of the MCP endpoint (CONTRACT.md R6, §9 Browsers): the gateway alone decides
 * which web origins may call it, and answers every preflight itself. A replica never sees an
 * `OPTIONS`, and its own `Access-Control-*` headers never reach the client (headers.ts drops
 * them), so that what a browser is allowed does not depend on which replica answered.
 *
 * With `security.allowedOrigins` unset nothing is granted: no answer carries CORS headers, so a
 * browser on another origin can not read any of them. Non-browser clients are not affected.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from './config/schema.js';
import type { Answering } from './answers.js';
import type { RequestLog } from './request-log.js';
import { headerValue } from './headers.js';
import { NO_REPLICA } from './metrics.js';

const ALLOW_METHODS = 'GET, POST, DELETE';

/**
 * What a browser client of any MCP era sends beyond the CORS-safelisted headers. `Mcp-Param-*`
 * names depend on the tool, so a requested one is granted by its prefix.
 */
const ALLOW_HEADERS = [
  'authorization',
  'content-type',
  'last-event-id',
  'mcp-method',
  'mcp-name',
  'mcp-protocol-version',
  'mcp-session-id',
];
const ALLOW_HEADER_PREFIX = 'mcp-param-';

/**
 * Response headers a browser client reads: the session, the gateway's resumption outcome, the
 * code of the gateway's own answers, the negotiated version, when to retry a 503, and the OAuth
 * challenge of a 401.
 */
const EXPOSE_HEADERS = 'Mcp-Session-Id, Mcp-Resumption, Mcp-Resumption-Reason, Mcp-Gateway-Error, MCP-Protocol-Version, Retry-After, WWW-Authenticate';

/** How long a browser may cache a preflight answer (it re-asks after this). */
const PREFLIGHT_MAX_AGE_SECONDS = '600';

/** A header name as RFC 9110 §5.6.2 defines a token; anything else in a request list is ignored. */
const TOKEN = /^[!#$%&'*+.^_`|~0-9a-z-]+$/;

export function createOriginPolicy(deps: { config: () => Config; requests: RequestLog; answer: Answering }) {
  return async function originPolicy(request: FastifyRequest, reply: FastifyReply) {
    const origin = headerValue(request.headers, 'origin');
    const allowed = deps.config().security.allowedOrigins;
    const granted = origin !== undefined && allowed !== undefined && allowed.includes(origin);
    if (origin !== undefined && allowed !== undefined && !granted) {
      return deps.answer(request, reply, 'GW_ORIGIN_FORBIDDEN');
    }
    if (granted) {
      // Set on the raw response: every answer merges them in, the gateway's own, a replica's
      // relayed response and an SSE stream alike, however it is written.
      const res = reply.raw;
      res.setHeader('access-control-allow-origin', origin);
      res.setHeader('access-control-expose-headers', EXPOSE_HEADERS);
      res.setHeader('vary', 'Origin');
    }
    if (request.method !== 'OPTIONS') return;
    // MCP gives OPTIONS no meaning: the gateway answers it, preflight or not.
    deps.requests.answered(request, { status: 204, replica: NO_REPLICA });
    reply.code(204).header('allow', `${ALLOW_METHODS}, OPTIONS`);
    if (granted) {
      reply.headers({
        'access-control-allow-methods': ALLOW_METHODS,
        'access-control-allow-headers': allowHeaders(headerValue(request.headers, 'access-control-request-headers')),
        'access-control-max-age': PREFLIGHT_MAX_AGE_SECONDS,
      });
    }
    void reply.send();
    deps.requests.ended(request, reply, 'answered');
    return reply;
  };
}

/** The fixed list, plus the `Mcp-Param-*` headers the preflight asks for. */
export function allowHeaders(requested: string | undefined): string {
  if (requested === undefined) return ALLOW_HEADERS.join(', ');
  const names = new Set(ALLOW_HEADERS);
  for (const part of requested.split(',')) {
    const name = part.trim().toLowerCase();
    if (name.startsWith(ALLOW_HEADER_PREFIX) && name.length > ALLOW_HEADER_PREFIX.length && TOKEN.test(name)) names.add(name);
  }
  return [...names].join(', ');
}
