/**
 * What the MCP listener answers on a connection whose request Node's parser refused before any
 * route saw it (a header block over limits.headerBytes, a control byte in a header, a malformed
 * request line, headers that did not arrive in time). Replaces fastify's default handler, which
 * logs the error with Node's `rawPacket`: the raw request bytes, Authorization included.
 */
import type { Socket } from 'node:net';
import { STATUS_CODES } from 'node:http';
import { jsonRpcError } from '../errors.js';
import type { Logger } from '../logger.js';

interface ClientErrorAnswer {
  status: number;
  /** Said in the log line and in the JSON-RPC error's message. */
  what: string;
}

const ANSWERS: Record<string, ClientErrorAnswer> = {
  HPE_HEADER_OVERFLOW: { status: 431, what: 'request header block too large' },
  ERR_HTTP_REQUEST_TIMEOUT: { status: 408, what: 'request headers not received in time' },
};
const MALFORMED: ClientErrorAnswer = { status: 400, what: 'malformed request' };

export interface ClientErrorDeps {
  logger: Logger;
  /** Called for each refused request, with the status it got. */
  onRefused?: (status: number) => void;
}

/** fastify's `clientErrorHandler`: a clear 4xx, a log line with the parser's code only, the socket closed. */
export function clientErrorHandler(deps: ClientErrorDeps): (err: NodeJS.ErrnoException, socket: Socket) => void {
  return (err, socket) => {
    // A reset connection has nobody to answer (https://nodejs.org/api/http.html#event-clienterror).
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    const answer = (err.code !== undefined ? ANSWERS[err.code] : undefined) ?? MALFORMED;
    deps.logger.debug({ code: err.code, status: answer.status, client: socket.remoteAddress }, `client refused: ${answer.what}`);
    deps.onRefused?.(answer.status);
    if (socket.writable) {
      const body = jsonRpcError(-32600, `Bad request: ${answer.what}`);
      socket.write(
        `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status]}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
    }
    socket.destroy();
  };
}
