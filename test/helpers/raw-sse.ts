/**
 * SSE GET streams over plain node:http, light enough to hold a thousand of them in one process:
 * each request on a connection of its own (so that a balancer in front decides where it lands),
 * its response headers timed, its events parsed as they arrive, every socket closable at once.
 */
import { Agent, request, type ClientRequest, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import type { Teardown } from './gateway.js';
import { PROTOCOL_VERSION } from './http.js';
import { Collected } from './watch.js';

export interface RawEvent {
  id?: string;
  event?: string;
  data: string;
}

export interface RawStream {
  status: number;
  headers: IncomingHttpHeaders;
  /** performance.now() when the request was sent, and when its response headers arrived. */
  sentAt: number;
  headersAt: number;
  events: Collected<RawEvent>;
  /**
   * The gateway's priming events (CONTRACT.md §8 J1: an id and empty data), kept apart from
   * `events`: the SDK clients take their id as the stream's position and skip them as messages.
   */
  primed: RawEvent[];
  /** Resolves once the response (or the request) has closed. */
  ended: Promise<void>;
  /** The body of a response that is not SSE (first 4 KiB), once it ended. */
  text(): Promise<string>;
  close(): void;
}

/** One opener per test; every socket it made is destroyed on teardown. */
export function rawStreams(t: Teardown) {
  // No keep-alive: one connection per stream, none reused, no socket limit.
  const agent = new Agent({ keepAlive: false, maxSockets: Infinity });
  const requests = new Set<ClientRequest>();
  const closeAll = () => {
    for (const req of requests) req.destroy();
    requests.clear();
    agent.destroy();
  };
  t.teardown(closeAll);

  /** `extra`: more request headers (a credential, say). */
  function open(url: string, sessionId: string, lastEventId?: string, timeoutMs = 30_000, extra: Record<string, string> = {}): Promise<RawStream> {
    const headers: Record<string, string> = {
      ...extra,
      accept: 'text/event-stream',
      'mcp-session-id': sessionId,
      'mcp-protocol-version': PROTOCOL_VERSION,
    };
    if (lastEventId !== undefined) headers['last-event-id'] = lastEventId;
    return new Promise((resolve, reject) => {
      const req = request(url, { method: 'GET', headers, agent });
      requests.add(req);
      const timer = setTimeout(() => {
        req.destroy();
        reject(new Error(`no response headers within ${timeoutMs} ms`));
      }, timeoutMs);
      req.once('error', (err) => {
        clearTimeout(timer);
        requests.delete(req);
        reject(err);
      });
      req.once('close', () => requests.delete(req));
      req.once('response', (res) => {
        clearTimeout(timer);
        resolve(wrap(req, res, sentAt, performance.now()));
      });
      const sentAt = performance.now();
      req.end();
    });
  }

  return { open, closeAll };
}

function wrap(req: ClientRequest, res: IncomingMessage, sentAt: number, headersAt: number): RawStream {
  const events = new Collected<RawEvent>();
  const primed: RawEvent[] = [];
  const sse = (res.headers['content-type'] ?? '').startsWith('text/event-stream');
  let body = '';
  let buffer = '';
  const ended = new Promise<void>((resolve) => {
    res.once('end', () => resolve());
    res.once('close', () => resolve());
    req.once('close', () => resolve());
  });
  res.on('error', () => undefined);
  res.setEncoding('utf8');
  res.on('data', (chunk: string) => {
    if (!sse) {
      if (body.length < 4096) body += chunk;
      return;
    }
    buffer += chunk.replace(/\r\n?/g, '\n');
    for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
      const parsed = parseBlock(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (parsed && isPriming(parsed)) primed.push(parsed);
      else if (parsed) events.push(parsed);
    }
  });
  return {
    status: res.statusCode ?? 0,
    headers: res.headers,
    sentAt,
    headersAt,
    events,
    primed,
    ended,
    text: async () => {
      await ended;
      return body;
    },
    close: () => req.destroy(),
  };
}

/** One event block: field lines, comments skipped; undefined for a block of comments only. */
function parseBlock(block: string): RawEvent | undefined {
  const event: RawEvent = { data: '' };
  const data: string[] = [];
  let fields = 0;
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const name = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    fields++;
    if (name === 'id') event.id = value;
    else if (name === 'event') event.event = value;
    else if (name === 'data') data.push(value);
  }
  if (fields === 0) return undefined;
  event.data = data.join('\n');
  return event;
}

/** A priming event: an id, an empty data field and nothing else (no event type). */
export function isPriming(event: RawEvent): boolean {
  return event.id !== undefined && event.id !== '' && event.data === '' && event.event === undefined;
}

/** The ids of an SSE body's events. */
export const idsOf = (body: string): string[] => [...body.matchAll(/^id: ?(.+)$/gm)].map((m) => m[1]!.trim());

/** Reads an SSE body until the JSON-RPC result is in it (a continued stream may stay open after), then lets it go; the body read. */
export async function bodyUntilResult(response: Response): Promise<string> {
  const decoder = new TextDecoder();
  let body = '';
  for await (const chunk of response.body!) {
    body += decoder.decode(chunk as Uint8Array, { stream: true });
    if (body.includes('"result"')) break;
  }
  await response.body!.cancel().catch(() => undefined);
  return body;
}
