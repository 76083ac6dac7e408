/**
 * One line per request on the MCP endpoint, whoever answered it: a replica (forwarded), or the
 * gateway itself (its own answers, every resumption answer). The same call counts the answer in
 * mcp_gateway_requests_total, so that every counted request gets its line: method, path, status,
 * replica (or none), session (shortened), ms, how it ended, the resumption outcome and reason
 * where there is one, the GW_* code of the gateway's own answers, and the client's address.
 * Written at info level (log.level), when the answer has ended.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AnswerCode } from '../errors.js';
import { headerValue, SESSION_HEADER } from '../headers.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';

export type ResumptionOutcome = 'continued' | 'new_stream' | 'rejected' | 'stripped';

interface Entry {
  status?: number;
  replica?: string;
  session?: string;
  code?: AnswerCode;
  resumption?: ResumptionOutcome;
  reason?: string;
  written?: boolean;
}

export interface Answered {
  readonly status: number;
  /** The replica that answered, or NO_REPLICA. */
  readonly replica: string;
  /** The session, where the request did not name it (a new session's id). */
  readonly session?: string;
  readonly code?: AnswerCode;
}

export type RequestLog = ReturnType<typeof createRequestLog>;

export function createRequestLog(deps: { logger: Logger; metrics: Metrics }) {
  const { logger, metrics } = deps;
  const entries = new WeakMap<FastifyRequest, Entry>();
  const entryOf = (request: FastifyRequest): Entry => {
    let entry = entries.get(request);
    if (!entry) {
      entry = {};
      entries.set(request, entry);
    }
    return entry;
  };

  return {
    /** The answer's status line left: counted now, remembered for the line. */
    answered(request: FastifyRequest, answered: Answered): void {
      metrics.countRequest(request.method, answered.status, answered.replica);
      Object.assign(entryOf(request), answered);
    },

    /** A request carrying Last-Event-ID: counted in mcp_gateway_resumptions_total, named on the line. */
    resumption(request: FastifyRequest, outcome: ResumptionOutcome, reason: string): void {
      metrics.resumptions.inc({ outcome, reason });
      Object.assign(entryOf(request), { resumption: outcome, reason });
    },

    /** The answer ended (`end`: how); writes the request's line, once, if it was answered. */
    ended(request: FastifyRequest, reply: FastifyReply, end: string): void {
      const entry = entries.get(request);
      if (!entry || entry.status === undefined || entry.written) return;
      entry.written = true;
      if (!logger.isLevelEnabled('info')) return;
      const session = entry.session ?? headerValue(request.headers, SESSION_HEADER);
      logger.info(
        {
          method: request.method,
          path: request.url.split('?', 1)[0],
          status: entry.status,
          replica: entry.replica,
          session: session && shortId(session),
          ms: Math.round(reply.elapsedTime),
          end,
          ...(entry.resumption ? { resumption: entry.resumption, reason: entry.reason } : {}),
          ...(entry.code ? { code: entry.code } : {}),
          client: request.ip,
        },
        'request',
      );
    },
  };
}

/** Enough of a session id to follow it through the logs, not enough to use it. */
export function shortId(sessionId: string): string {
  return sessionId.length > 8 ? `${sessionId.slice(0, 8)}…` : sessionId;
}
