/**
 * One line per request on the MCP endpoint, whoever answered it: a replica (forwarded), or the
 * gateway itself (its own answers, every resumption answer). The same call counts the answer in
 * mcp_gateway_requests_total, so that every counted request gets its line: method, path, status,
 * replica (or none), session (its keyed fingerprint), ms, how it ended, the resumption outcome and reason
 * where there is one, the GW_* code of the gateway's own answers, the trace id when traces are on,
 * and the client's address.
 *
 * The lines are an access log with a switch of their own, log.requests (off by default, read per
 * request so that SIGHUP turns them on and off), written at info level whatever log.level says.
 * They are the one thing logged per request, so they skip the logger's object path: every field is
 * a value the gateway chose or a client string escaped here, the line is built as one string with
 * the logger's envelope and written to its destination, still scrubbed of secrets (logger.ts).
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { symbols } from 'pino';
import type { Config } from './config/schema.js';
import type { AnswerCode } from './errors.js';
import { headerValue, SESSION_HEADER } from './headers.js';
import { LogSecrets, type Logger, type SessionFingerprint } from './logger.js';
import { NO_REPLICA, type Metrics } from './metrics.js';
import type { Tracing } from './tracing/index.js';

export type ResumptionOutcome = 'continued' | 'new_stream' | 'rejected' | 'stripped';

/** What the line of one request needs, gathered as it is answered; one shape for every request. */
class Entry {
  status = 0;
  replica = '';
  session: string | undefined = undefined;
  code: AnswerCode | undefined = undefined;
  resumption: ResumptionOutcome | undefined = undefined;
  reason = '';
  written = false;
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

/** pino's numeric info level, as its lines carry it. */
const INFO = 30;

export interface RequestLogDeps {
  config: () => Config;
  logger: Logger;
  /** Where answers are counted (the MCP listener's); none for the admin listener's lines. */
  metrics?: Pick<Metrics, 'countRequest' | 'countResumption'>;
  secrets?: LogSecrets | undefined;
  /** How a session is named on a line; unset (the admin listener's lines): never named. */
  session?: SessionFingerprint | undefined;
  /** Where the trace id of a line and the resumption decision's event come from; unset: traces off. */
  tracing?: Pick<Tracing, 'traceId' | 'answered' | 'resumption'> | undefined;
}

export function createRequestLog(deps: RequestLogDeps) {
  const { logger, metrics, tracing } = deps;
  const secrets = deps.secrets ?? new LogSecrets();
  const entries = new WeakMap<FastifyRequest, Entry>();
  /** The entry of a request whose line will be written; none while log.requests is off. */
  const entryOf = (request: FastifyRequest): Entry | undefined => {
    let entry = entries.get(request);
    if (entry === undefined && deps.config().log.requests) {
      entry = new Entry();
      entries.set(request, entry);
    }
    return entry;
  };
  /** Field order and envelope as the logger writes them: {"level","time",pid,hostname,service,...,"msg"}. */
  const requestLine = (fields: string): string => `{"level":${INFO},"time":${Date.now()}${chindings(logger)}${fields},"msg":"request"}\n`;
  const write = (line: string): void => {
    const stream = (logger as unknown as Record<symbol, { write(line: string): void }>)[symbols.streamSym];
    stream?.write(secrets.scrub(line));
  };

  return {
    /** The answer's status line left: counted now, remembered for the line. */
    answered(request: FastifyRequest, answered: Answered): void {
      metrics?.countRequest(request.method, answered.status, answered.replica);
      tracing?.answered(request, answered);
      const entry = entryOf(request);
      if (entry === undefined) return;
      entry.status = answered.status;
      entry.replica = answered.replica;
      if (answered.session !== undefined) entry.session = answered.session;
      if (answered.code !== undefined) entry.code = answered.code;
    },

    /** A request carrying Last-Event-ID: counted in mcp_gateway_resumptions_total, named on the line. */
    resumption(request: FastifyRequest, outcome: ResumptionOutcome, reason: string): void {
      metrics?.countResumption(outcome, reason);
      tracing?.resumption(request, outcome, reason);
      const entry = entryOf(request);
      if (entry === undefined) return;
      entry.resumption = outcome;
      entry.reason = reason;
    },

    /** The answer ended (`end`: how); writes the request's line, once, if it was answered. */
    ended(request: FastifyRequest, reply: FastifyReply, end: string): void {
      const entry = entries.get(request);
      if (entry === undefined || entry.status === 0 || entry.written) return;
      entry.written = true;
      const sessionId = entry.session ?? headerValue(request.headers, SESSION_HEADER);
      const session = sessionId === undefined ? undefined : deps.session?.(sessionId);
      const query = request.url.indexOf('?');
      const path = query < 0 ? request.url : request.url.slice(0, query);
      let fields = `,"method":${JSON.stringify(request.method)},"path":${JSON.stringify(path)},"status":${entry.status},"replica":${JSON.stringify(entry.replica)}`;
      if (session !== undefined) fields += `,"session":"${session}"`;
      fields += `,"ms":${Math.round(reply.elapsedTime)},"end":${JSON.stringify(end)}`;
      if (entry.resumption !== undefined) fields += `,"resumption":"${entry.resumption}","reason":${JSON.stringify(entry.reason)}`;
      if (entry.code !== undefined) fields += `,"code":"${entry.code}"`;
      const traceId = tracing?.traceId(request);
      if (traceId !== undefined) fields += `,"trace":"${traceId}"`;
      write(requestLine(`${fields},"client":${JSON.stringify(request.ip)}`));
    },

    /**
     * A request Node's parser refused before any route saw it (clients/errors.ts): its line, with
     * no method, path or session, for none was read. Counted by the caller, where there is a metric
     * for refused clients (the MCP listener's mcp_gateway_client_refused_total).
     */
    refused(refused: { readonly status: number; readonly code: AnswerCode }, client: string | undefined): void {
      if (!deps.config().log.requests) return;
      const from = client === undefined ? '' : `,"client":${JSON.stringify(client)}`;
      write(requestLine(`,"status":${refused.status},"replica":"${NO_REPLICA}","end":"refused","code":"${refused.code}"${from}`));
    },
  };
}

/** The logger's bindings as it writes them (`,"pid":…,"hostname":…,"service":…`). */
function chindings(logger: Logger): string {
  return (logger as unknown as Record<symbol, string>)[symbols.chindingsSym] ?? '';
}
