/** HTTP as bytes on a plain TCP socket: requests Node's own client refuses to send (bad headers, half a header block). */
import { connect, type Socket } from 'node:net';

/** Opens a socket to `url`'s host and port and resolves once connected. */
export function openSocket(url: string): Promise<Socket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => {
      socket.off('error', reject);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

/** Resolves with everything the peer sent once the socket closed (errors count as a close). */
export function readUntilClosed(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => undefined);
    socket.once('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
  });
}

/** Sends `bytes` and resolves with the whole answer, once the gateway closed the connection. */
export async function rawExchange(url: string, bytes: string | Buffer): Promise<string> {
  const socket = await openSocket(url);
  const answer = readUntilClosed(socket);
  socket.write(bytes);
  return answer;
}

/** The status code of a raw HTTP answer (0: none). */
export function rawStatus(answer: string): number {
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0);
}

/** One HTTP/1.x response as read off a socket. */
export interface RawResponse {
  status: number;
  /** Lower-case names; repeated fields joined with ', '. */
  headers: Record<string, string>;
  /** The body, de-chunked (latin1). */
  body: string;
  /** Whether its body was whole (by Content-Length, the last chunk, or the peer's close). */
  complete: boolean;
}

/** What a peer answered on one connection: interim (1xx) statuses apart, final responses in order. */
export interface RawAnswer {
  interim: number[];
  responses: RawResponse[];
  /** Bytes after the last response that are not one (0 when the answer parsed whole). */
  unparsed: number;
}

/** The responses in `text`, bytes as a peer sent them; `closed`: the peer closed after them. */
export function parseResponses(text: string, closed: boolean): RawAnswer {
  const answer: RawAnswer = { interim: [], responses: [], unparsed: 0 };
  let pos = 0;
  while (pos < text.length) {
    const headEnd = text.indexOf('\r\n\r\n', pos);
    const status = /^HTTP\/1\.[01] (\d{3})/.exec(text.slice(pos, pos + 12));
    if (status === null) break;
    const code = Number(status[1]);
    if (headEnd < 0) {
      answer.responses.push({ status: code, headers: {}, body: '', complete: false });
      return answer;
    }
    const headers: Record<string, string> = {};
    for (const line of text.slice(pos, headEnd).split('\r\n').slice(1)) {
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
    }
    pos = headEnd + 4;
    if (code < 200) {
      answer.interim.push(code);
      continue;
    }
    const body = readBody(text, pos, code, headers, closed);
    answer.responses.push({ status: code, headers, body: body.text, complete: body.complete });
    if (!body.complete) return answer;
    pos = body.end;
  }
  answer.unparsed = text.length - pos;
  return answer;
}

function readBody(text: string, start: number, status: number, headers: Record<string, string>, closed: boolean): { text: string; complete: boolean; end: number } {
  if (status === 204 || status === 304) return { text: '', complete: true, end: start };
  if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
    let pos = start;
    let body = '';
    for (;;) {
      const lineEnd = text.indexOf('\r\n', pos);
      if (lineEnd < 0) return { text: body, complete: false, end: text.length };
      const size = parseInt(text.slice(pos, lineEnd), 16);
      if (size === 0) {
        const trailersEnd = text.indexOf('\r\n', lineEnd + 2);
        // The last chunk, then trailer fields (none from Node), then the empty line.
        const end = text.startsWith('\r\n', lineEnd + 2) ? lineEnd + 4 : text.indexOf('\r\n\r\n', lineEnd + 2) + 4;
        return trailersEnd < 0 || end < 4 ? { text: body, complete: false, end: text.length } : { text: body, complete: true, end };
      }
      if (text.length < lineEnd + 2 + size + 2) return { text: body + text.slice(lineEnd + 2), complete: false, end: text.length };
      body += text.slice(lineEnd + 2, lineEnd + 2 + size);
      pos = lineEnd + 2 + size + 2;
    }
  }
  const length = headers['content-length'];
  if (length !== undefined) {
    const end = start + Number(length);
    return { text: text.slice(start, end), complete: text.length >= end, end: Math.min(end, text.length) };
  }
  return { text: text.slice(start), complete: closed, end: text.length };
}
