/**
 * The answers the gateway gives itself, built from the registry in errors.ts: status, headers and
 * body defined once, for the proxy, the resumption and the server's error handler alike.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ServerResponse } from 'node:http';
import type { Config } from './config/schema.js';
import { answerSpec, jsonRpcError, type AnswerCode } from './errors.js';
import { NO_REPLICA } from './metrics.js';
import type { RequestLog } from './request-log.js';

/** The stable GW_* code of a gateway's own answer, also where CONTRACT.md fixes the body. */
export const GATEWAY_ERROR_HEADER = 'mcp-gateway-error';

export interface Answer {
  readonly code: AnswerCode;
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

export interface AnswerOptions {
  /** Fills the message's `%s` (the replica's id, fastify's reason). */
  readonly detail?: string;
  /** The Retry-After of the codes that invite a retry (upstream.retryAfterSeconds). */
  readonly retryAfterSeconds: number;
  /** Another 4xx than the code's own (GW_BAD_REQUEST carries the status fastify found). */
  readonly status?: number;
  /** The `error.data` of a body CONTRACT.md fixes (the reject mode's resumed and reason). */
  readonly data?: unknown;
  /** Headers of this answer beyond the registry's. */
  readonly headers?: Record<string, string>;
  /** The id of the JSON-RPC request answered, when the gateway read it; null otherwise. */
  readonly id?: string | number | null;
}

export function answerFor(code: AnswerCode, options: AnswerOptions): Answer {
  const spec = answerSpec(code);
  if (typeof spec.rpc !== 'number') throw new TypeError(`${code} is not an HTTP answer`);
  const headers: Record<string, string> = { 'content-type': 'application/json', [GATEWAY_ERROR_HEADER]: code };
  if (spec.retry) headers['retry-after'] = String(options.retryAfterSeconds);
  Object.assign(headers, options.headers);
  const message = spec.message.replace('%s', options.detail ?? '');
  const data = spec.fixed ? options.data : { code };
  return { code, status: options.status ?? spec.status, headers, body: jsonRpcError(spec.rpc, message, data, options.id) };
}

export type Answering = (request: FastifyRequest, reply: FastifyReply, code: AnswerCode, options?: Omit<AnswerOptions, 'retryAfterSeconds'>) => unknown;

/** Answers a request with one of the gateway's own answers: counted, sent, and its line logged. */
export function createAnswering(deps: { config: () => Config; requests: RequestLog }): Answering {
  return (request, reply, code, options = {}) => {
    const answer = answerFor(code, { ...options, retryAfterSeconds: deps.config().upstream.retryAfterSeconds });
    deps.requests.answered(request, { status: answer.status, replica: NO_REPLICA, code });
    const sent = sendAnswer(reply, answer);
    deps.requests.ended(request, reply, 'answered');
    return sent;
  };
}

/**
 * The answers fastify would give itself, given from the registry instead: GW_NOT_FOUND for a
 * method and path no route serves, and GW_SHUTTING_DOWN for a request that arrives on an open
 * connection once the listener closes (the listener is built with `return503OnClosing: false`:
 * fastify's own 503 is written before any hook runs, with a body and log line of its own). fastify
 * adds `Connection: close` to the latter. Register before the routes.
 */
export function answerUnrouted(instance: FastifyInstance, answer: Answering): void {
  let closing = false;
  instance.addHook('preClose', (done) => {
    closing = true;
    done();
  });
  instance.addHook('onRequest', (request, reply, done) => {
    if (closing) answer(request, reply, 'GW_SHUTTING_DOWN');
    else done();
  });
  instance.setNotFoundHandler((request, reply) => answer(request, reply, 'GW_NOT_FOUND'));
}

/** Sends an answer through fastify, or on the raw response once the route hijacked it. */
function sendAnswer(reply: FastifyReply, answer: Answer): unknown {
  if (reply.sent) return writeAnswer(reply.raw, answer);
  return reply.code(answer.status).headers(answer.headers).send(answer.body);
}

/** Writes an answer on a response that the route no longer owns (hijacked), unless one began. */
function writeAnswer(res: ServerResponse, answer: Answer): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  res.writeHead(answer.status, answer.headers);
  res.end(answer.body);
}
