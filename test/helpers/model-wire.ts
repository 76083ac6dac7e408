/**
 * Raw HTTP for the model-based test, which must control every connection itself: each request
 * gets its own TCP connection (no keep-alive pool, so a balancer's pin applies to it and a cut
 * leaves no stale pooled socket behind), every wait is bounded, and SSE bodies are parsed into
 * events as they arrive, so that the test waits on what a client has received instead of sleeping.
 */
import { request, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';

export interface WireEvent {
  id: string | undefined;
  event: string | undefined;
  data: string | undefined;
}

export interface WireResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** One request on a fresh connection; resolves with the whole body, rejects after `timeoutMs`. */
export function wireRequest(
  url: string,
  options: { method: string; headers?: Record<string, string>; body?: string; timeoutMs: number },
): Promise<WireResponse> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: options.method, headers: options.headers ?? {}, agent: false });
    const timer = setTimeout(
      () => req.destroy(new Error(`${options.method} ${url} took longer than ${options.timeoutMs} ms`)),
      options.timeoutMs,
    );
    req.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    req.once('response', (res) => {
      readAll(res).then(
        (body) => {
          clearTimeout(timer);
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body });
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(err instanceof Error ? err : new Error(String(err)));
        },
      );
    });
    req.end(options.body);
  });
}

function readAll(res: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let body = '';
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => (body += chunk));
    res.once('end', () => resolve(body));
    res.once('error', reject);
    res.once('aborted', () => reject(new Error('response aborted')));
  });
}

/** Either an open SSE stream, or the complete answer when the response is anything else. */
export type WireGet =
  | { kind: 'stream'; status: number; headers: IncomingHttpHeaders; stream: WireStream }
  | { kind: 'answer'; response: WireResponse };

/**
 * A GET on a fresh connection. A 200 `text/event-stream` answer resolves as soon as its headers
 * are in, its body read in the background; any other answer is read whole. Both bounded.
 */
export function wireGet(url: string, headers: Record<string, string>, timeoutMs: number): Promise<WireGet> {
  return wireOpen(url, { method: 'GET', headers, timeoutMs });
}

/**
 * Any request on a fresh connection, answered as wireGet answers: a 200 `text/event-stream` body
 * (a GET stream, or a POST answered with its own stream) is read as it arrives.
 */
export function wireOpen(
  url: string,
  options: { method: string; headers: Record<string, string>; body?: string; timeoutMs: number; cutAtPriming?: boolean },
): Promise<WireGet> {
  const { method, headers, body, timeoutMs } = options;
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers, agent: false });
    const timer = setTimeout(() => req.destroy(new Error(`${method} ${url} was not answered within ${timeoutMs} ms`)), timeoutMs);
    req.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    req.once('response', (res) => {
      const status = res.statusCode ?? 0;
      const sse = String(res.headers['content-type'] ?? '').startsWith('text/event-stream');
      if (status === 200 && sse) {
        clearTimeout(timer);
        resolve({ kind: 'stream', status, headers: res.headers, stream: new WireStream(res, () => req.destroy(), options.cutAtPriming === true) });
        return;
      }
      readAll(res).then(
        (text) => {
          clearTimeout(timer);
          resolve({ kind: 'answer', response: { status, headers: res.headers, body: text } });
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(err instanceof Error ? err : new Error(String(err)));
        },
      );
    });
    req.end(body);
  });
}

/** A priming event as it arrived: `after`, how many of the stream's other events came before it. */
export interface PrimingEvent extends WireEvent {
  readonly after: number;
}

/** An SSE body being read: its events so far, whether it ended, and bounded waits on both. */
export class WireStream {
  readonly events: WireEvent[] = [];
  /**
   * The gateway's priming events (CONTRACT.md §8 J1: an id and empty data), kept apart from
   * `events` as the SDK clients skip them as messages, each with where it came among them: a
   * client takes its cursor as its place all the same.
   */
  readonly primed: PrimingEvent[] = [];
  #ended = false;
  #closedByUs = false;
  readonly #waiters = new Set<() => void>();
  readonly #parser = new SseBlockParser((event) => {
    // Nothing reaches a client after its connection broke, not even the rest of a chunk.
    if (this.#closedByUs) return;
    if (isPriming(event)) this.primed.push({ ...event, after: this.events.length });
    else this.events.push(event);
    if (this.cutAtPriming && isPriming(event)) this.close();
    this.#wake();
  });

  /**
   * `cutAtPriming`: the connection breaks right after the first priming event, before whatever
   * follows it (in the same chunk or not).
   */
  constructor(
    res: IncomingMessage,
    private readonly destroy: () => void,
    private readonly cutAtPriming = false,
  ) {
    res.on('data', (chunk: Buffer) => this.#parser.push(chunk));
    const end = () => {
      if (this.#ended) return;
      this.#ended = true;
      this.#wake();
    };
    res.once('end', end);
    res.once('close', end);
    res.once('error', end);
    res.once('aborted', end);
  }

  get ended(): boolean {
    return this.#ended;
  }

  /** True when the end came from close() rather than from the other side. */
  get closedByUs(): boolean {
    return this.#closedByUs;
  }

  /** Drops the connection, as a client that goes away does. */
  close(): void {
    if (!this.#ended) this.#closedByUs = true;
    this.destroy();
  }

  /**
   * Resolves true as soon as `done()` holds (checked now, at every event and at the end of the
   * stream), false if it still does not after `timeoutMs`.
   */
  until(done: () => boolean, timeoutMs: number): Promise<boolean> {
    if (done()) return Promise.resolve(true);
    return new Promise((resolve) => {
      const check = () => {
        if (done()) finish(true);
      };
      const finish = (value: boolean) => {
        clearTimeout(timer);
        this.#waiters.delete(check);
        resolve(value);
      };
      const timer = setTimeout(() => finish(done()), timeoutMs);
      this.#waiters.add(check);
    });
  }

  #wake(): void {
    for (const waiter of [...this.#waiters]) waiter();
  }
}

/**
 * The event-stream format (WHATWG HTML §9.2.6) on bytes: CR, LF and CRLF line ends (also split
 * across chunks), a leading BOM, comments, one optional space after the colon. Every block with at
 * least one known field is reported with the fields it carried; comment-only blocks (keep-alives)
 * are not.
 */
export class SseBlockParser {
  readonly #decoder = new TextDecoder('utf-8');
  #buffer = '';
  #first = true;
  #pendingCr = false;
  #current: WireEvent = blank();
  #fields = 0;

  constructor(private readonly onEvent: (event: WireEvent) => void) {}

  push(chunk: Uint8Array): void {
    let text = this.#decoder.decode(chunk, { stream: true });
    if (this.#first && text.length > 0) {
      this.#first = false;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (this.#pendingCr && text.startsWith('\n')) text = text.slice(1);
    this.#pendingCr = false;
    this.#buffer += text;
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.#buffer);
      if (!match) break;
      // A CR at the very end may be the first half of a CRLF split across chunks.
      if (match[0] === '\r' && match.index === this.#buffer.length - 1) {
        this.#line(this.#buffer.slice(0, match.index));
        this.#buffer = '';
        this.#pendingCr = true;
        break;
      }
      this.#line(this.#buffer.slice(0, match.index));
      this.#buffer = this.#buffer.slice(match.index + match[0].length);
    }
  }

  #line(line: string): void {
    if (line === '') {
      if (this.#fields > 0) this.onEvent(this.#current);
      this.#current = blank();
      this.#fields = 0;
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (name === 'data') this.#current.data = this.#current.data === undefined ? value : `${this.#current.data}\n${value}`;
    else if (name === 'id') this.#current.id = value;
    else if (name === 'event') this.#current.event = value;
    else if (name !== 'retry') return;
    this.#fields++;
  }
}

function blank(): WireEvent {
  return { id: undefined, event: undefined, data: undefined };
}

/** A priming event: an id, an empty data field and nothing else. */
export function isPriming(event: WireEvent): boolean {
  return event.id !== undefined && event.id !== '' && event.data === '' && event.event === undefined;
}

/** The events of a complete SSE body, its priming events left out (as WireStream keeps them apart). */
export function parseSseBody(body: string): WireEvent[] {
  const events: WireEvent[] = [];
  const parser = new SseBlockParser((e) => {
    if (!isPriming(e)) events.push(e);
  });
  parser.push(new TextEncoder().encode(`${body}\n\n`));
  return events;
}
