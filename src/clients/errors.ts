/**
 * What a listener (MCP or admin) answers on a connection whose request Node's parser refused
 * before any route saw it (a header block over limits.headerBytes, a control byte in a header, a
 * malformed request line, headers that did not arrive in time). Replaces fastify's default handler, which
 * logs the error with Node's `rawPacket`: the raw request bytes, Authorization included.
 */
import type { Socket } from 'node:net';
import { STATUS_CODES } from 'node:http';
import type { AnswerCode } from '../errors.js';
import { answerFor } from '../answers.js';
import type { Logger } from '../logger.js';
import type { RequestLog } from '../request-log.js';

interface ClientErrorAnswer {
  code: AnswerCode;
  /** Said in the log line and in the JSON-RPC error's message. */
  what: string;
}

const ANSWERS: Record<string, ClientErrorAnswer> = {
  HPE_HEADER_OVERFLOW: { code: 'GW_HEADERS_TOO_LARGE', what: 'request header block too large' },
  ERR_HTTP_REQUEST_TIMEOUT: { code: 'GW_HEADERS_TIMEOUT', what: 'request headers not received in time' },
};
const MALFORMED: ClientErrorAnswer = { code: 'GW_MALFORMED_REQUEST', what: 'malformed request' };

export interface ClientErrorDeps {
  logger: Logger;
  /** Where the refused request gets its line, as every answer (log.requests). */
  requests: Pick<RequestLog, 'refused'>;
  /** Called for each refused request, with the status it got. */
  onRefused?: (status: number) => void;
}

/**
 * fastify's `clientErrorHandler`: a clear 4xx, a debug line with the parser's code only, the
 * request line, the socket closed.
 */
export function clientErrorHandler(deps: ClientErrorDeps): (err: NodeJS.ErrnoException, socket: Socket) => void {
  return (err, socket) => {
    // A reset connection has nobody to answer (https://nodejs.org/api/http.html#event-clienterror).
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    const refused = (err.code !== undefined ? ANSWERS[err.code] : undefined) ?? MALFORMED;
    // No retry invited: nothing of these answers is a 503.
    const answer = answerFor(refused.code, { detail: refused.what, retryAfterSeconds: 0 });
    deps.logger.debug({ code: err.code, status: answer.status, client: socket.remoteAddress }, `client refused: ${refused.what}`);
    deps.requests.refused(answer, socket.remoteAddress);
    deps.onRefused?.(answer.status);
    if (socket.writable) {
      const headers = Object.entries(answer.headers).map(([name, value]) => `${name}: ${value}\r\n`);
      socket.write(
        `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status]}\r\nConnection: close\r\n${headers.join('')}Content-Length: ${Buffer.byteLength(answer.body)}\r\n\r\n${answer.body}`,
      );
    }
    socket.destroy();
  };
}
