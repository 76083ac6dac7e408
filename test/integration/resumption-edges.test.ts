/**
 * §5 at its edges, on the wire: what the gateway answers to a Last-Event-ID that it cannot or must
 * not resume, byte for byte. Real Redis, two SDK demo replicas, and two gateway instances on one
 * store (the default signal mode, and reject mode), spoken to with raw HTTP.
 */
import { randomInt, randomUUID } from 'node:crypto';
import { request as httpRequest, type IncomingHttpHeaders, type IncomingMessage } from 'node:http';
import { connect as netConnect } from 'node:net';
import t from 'tap';
import type { Test } from 'tap';
import { metricValue, startGateway, type RunningGateway } from '../helpers/gateway.js';
import { post, PROTOCOL_VERSION, rawSession, SESSION_NOT_FOUND, toolCallBody } from '../helpers/http.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';

const CURSOR = /^1\.[A-Za-z0-9_-]{16}\.[0-9a-z]+\.[A-Za-z0-9_-]{11}\.[A-Za-z0-9_-]{22}$/;
/** Bounds on failure, not expected durations. */
const EVENT_TIMEOUT_MS = bound(5_000);
const STREAM_DEADLINE_MS = bound(5_000);

const redis = await startRedisServer(t);
const replicas = await spawnReplicas(t, 2);
// The owner's own log replays (§5 alone): with the journal, test/integration/journal*.test.ts.
const journalOff = { enabled: false };
const shared = { store: { type: 'redis', url: redis.url }, replicas: replicas.map((r) => ({ id: r.id, url: r.url })), resumption: { journal: journalOff } };
const signal = await startGateway(t, shared);
const reject = await startGateway(t, { ...shared, resumption: { mode: 'reject', journal: journalOff } });

// ---------------------------------------------------------------------------------------------
// What the client sees, computed here rather than taken from the gateway's code.

/** Each byte of the value as the server reads it (latin1) outside 0x20-0x7E becomes '?'; 128 at most. */
function echoed(value: string): string {
  const bytes = Buffer.from(value, 'latin1');
  let out = '';
  for (const b of bytes) out += b >= 0x20 && b <= 0x7e ? String.fromCharCode(b) : '?';
  return out.slice(0, 128);
}

/** A JSON string literal of printable ASCII: only `"` and `\` need escaping. */
function jsonLiteral(ascii: string): string {
  return `"${ascii.replace(/["\\]/g, (c) => `\\${c}`)}"`;
}

function expectedSignal(reason: string, value: string): string {
  return (
    '{"jsonrpc":"2.0","method":"notifications/gateway/stream_reset","params":{"resumed":false,' +
    `"reason":"${reason}","lastEventId":${jsonLiteral(echoed(value))}}}`
  );
}

function expectedReject(reason: string): string {
  return (
    '{"jsonrpc":"2.0","id":null,"error":{"code":-32010,"message":"Last-Event-ID cannot be resumed; reconnect without it",' +
    `"data":{"resumed":false,"reason":"${reason}"}}}`
  );
}

/** The parts of a cursor: [version, incarnation, seq (base36), session tag, mac]. */
function parts(cursor: string): string[] {
  return cursor.split('.');
}

/** `cursor` with the character at `index` replaced by another one of the cursor alphabet. */
function alter(cursor: string, index: number): string {
  const c = cursor[index];
  const other = c === 'A' ? 'B' : c === '1' ? '2' : c === '0' ? '1' : 'A';
  return `${cursor.slice(0, index)}${other}${cursor.slice(index + 1)}`;
}

/** Printable ASCII of `length`, not starting or ending with a space (HTTP trims those). */
function randomPrintable(length: number): string {
  let s = '';
  for (let i = 0; i < length; i++) {
    const edge = i === 0 || i === length - 1;
    s += String.fromCharCode(randomInt(edge ? 0x21 : 0x20, 0x7f));
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP.

/**
 * Every status this file's own requests were answered with, as read off the wire, and what the
 * request was: the last test checks that none is a 5xx.
 */
const answered: { request: string; status: number }[] = [];

interface SseEvent {
  id?: string;
  event?: string;
  data?: string;
}

/** Complete SSE events of a body as they arrive; comment-only blocks (keepalives) are skipped. */
class EventStream {
  readonly #chunks: AsyncIterator<Buffer>;
  readonly #decoder = new TextDecoder();
  #buffer = '';

  constructor(body: IncomingMessage) {
    this.#chunks = body[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  }

  /** The next event, or undefined once the body ended; rejects after `timeoutMs` without one. */
  async next(timeoutMs = EVENT_TIMEOUT_MS): Promise<SseEvent | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no SSE event within ${timeoutMs} ms (buffered: ${JSON.stringify(this.#buffer)})`)), timeoutMs);
    });
    try {
      return await Promise.race([this.#next(), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  async #next(): Promise<SseEvent | undefined> {
    for (;;) {
      const end = this.#buffer.indexOf('\n\n');
      if (end >= 0) {
        const block = this.#buffer.slice(0, end);
        this.#buffer = this.#buffer.slice(end + 2);
        const event = parseBlock(block);
        if (event) return event;
        continue;
      }
      const chunk = await this.#chunks.next().catch(() => ({ done: true as const, value: undefined }));
      if (chunk.done) return undefined;
      this.#buffer += this.#decoder.decode(chunk.value, { stream: true });
    }
  }
}

function parseBlock(block: string): SseEvent | undefined {
  const event: SseEvent = {};
  let fields = 0;
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    fields++;
    if (name === 'data') event.data = event.data === undefined ? value : `${event.data}\n${value}`;
    else if (name === 'id' || name === 'event') event[name] = value;
  }
  return fields > 0 ? event : undefined;
}

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  events: EventStream;
  text(): Promise<string>;
  close(): void;
}

/**
 * A GET through node:http, which writes header values as latin1 bytes, so that a value with bytes
 * outside ASCII reaches the gateway exactly as written here.
 */
function get(t: Test, url: string, headers: Record<string, string>): Promise<Answer> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const req = httpRequest({
      host: target.hostname,
      port: target.port,
      path: target.pathname,
      method: 'GET',
      headers: { accept: 'text/event-stream', 'mcp-protocol-version': PROTOCOL_VERSION, ...headers },
      agent: false,
    });
    req.once('error', reject);
    req.once('response', (res) => {
      answered.push({ request: `GET ${JSON.stringify(headers)}`, status: res.statusCode ?? 0 });
      req.on('error', () => undefined);
      res.on('error', () => undefined);
      const close = () => req.destroy();
      t.teardown(close);
      resolve({
        status: res.statusCode ?? 0,
        headers: res.headers,
        events: new EventStream(res),
        text: async () => {
          const chunks: Buffer[] = [];
          for await (const chunk of res) chunks.push(chunk as Buffer);
          return Buffer.concat(chunks).toString('utf8');
        },
        close,
      });
    });
    req.end();
  });
}

/**
 * A plain GET stream; a 409 (the replica has not yet seen an earlier stream close) is asked again.
 * Past the deadline the last answer is returned, for the caller's check to name.
 */
async function plainGet(t: Test, url: string, sessionId: string): Promise<Answer> {
  let answer: Answer | undefined;
  await waitFor('a GET stream the replica does not refuse with 409', STREAM_DEADLINE_MS, async () => {
    answer = await get(t, url, { 'mcp-session-id': sessionId });
    if (answer.status !== 409) return true;
    await answer.text();
    return false;
  }).catch(() => undefined);
  if (!answer) throw new Error(`GET ${url} was never answered`);
  return answer;
}

/** Writes `head` (a whole request head) on a fresh connection; resolves with the status line. */
function rawStatus(url: string, head: Buffer): Promise<string> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = netConnect(Number(target.port), target.hostname);
    let received = Buffer.alloc(0);
    const done = () => {
      socket.destroy();
      const line = received.toString('latin1').split('\r\n')[0] ?? '';
      answered.push({ request: `raw ${JSON.stringify(head.toString('latin1').slice(0, 200))}`, status: Number(line.split(' ')[1]) });
      if (line.startsWith('HTTP/')) resolve(line);
      else reject(new Error(`no status line, got ${JSON.stringify(received.toString('latin1'))}`));
    };
    socket.setTimeout(5_000, done);
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      if (received.includes('\r\n')) done();
    });
    socket.on('error', done);
    socket.on('close', done);
    socket.on('connect', () => socket.write(head));
  });
}

function requestHead(url: string, lines: (string | Buffer)[]): Buffer {
  const target = new URL(url);
  const all = [`GET ${target.pathname} HTTP/1.1`, `Host: ${target.host}`, 'Accept: text/event-stream', ...lines];
  return Buffer.concat([...all.flatMap((l) => [Buffer.isBuffer(l) ? l : Buffer.from(l, 'latin1'), Buffer.from('\r\n')]), Buffer.from('\r\n')]);
}

interface JsonRpcMessage {
  id?: number | string;
  method?: string;
  result?: { content?: { type: string; text?: string }[]; structuredContent?: Record<string, unknown>; isError?: boolean };
  params?: { data?: { seq?: number; replica?: string } };
}

let nextId = 100;

/** A tools/call by raw POST; resolves with the HTTP response and the JSON-RPC response to it. */
async function call(url: string, sessionId: string, name: string, args: Record<string, unknown> = {}, headers: Record<string, string> = {}) {
  const id = nextId++;
  const response = await post(url, toolCallBody(name, args, id), { 'mcp-session-id': sessionId, ...headers });
  answered.push({ request: `tools/call ${name} ${JSON.stringify(headers)}`, status: response.status });
  const body = await response.text();
  const messages: JsonRpcMessage[] = (response.headers.get('content-type') ?? '').startsWith('text/event-stream')
    ? body
        .split('\n\n')
        .map(parseBlock)
        .filter((e): e is SseEvent => e?.data !== undefined)
        .map((e) => JSON.parse(e.data!) as JsonRpcMessage)
    : response.status === 200
      ? [JSON.parse(body) as JsonRpcMessage]
      : [];
  const message = messages.find((m) => m.id === id);
  return { response, body, message };
}

async function owner(url: string, sessionId: string): Promise<string> {
  const { message } = await call(url, sessionId, 'whoami');
  const replica = message?.result?.structuredContent?.['replica'];
  if (typeof replica !== 'string') throw new Error(`whoami answered ${JSON.stringify(message)}`);
  return replica;
}

/** The logging notification of the demo's `emit` tool that `event` carries: its seq. */
function emitted(event: SseEvent | undefined): number | undefined {
  if (event?.data === undefined) return undefined;
  const message = JSON.parse(event.data) as JsonRpcMessage;
  return message.method === 'notifications/message' ? message.params?.data?.seq : undefined;
}

/** Opens a plain GET stream on the session, emits `count` events on it and reads their cursors. */
async function streamWithCursors(t: Test, gateway: RunningGateway, sessionId: string, count: number) {
  const stream = await plainGet(t, gateway.url, sessionId);
  if (stream.status !== 200) throw new Error(`plain GET answered ${stream.status}`);
  const emit = await call(gateway.url, sessionId, 'emit', { count, intervalMs: 0 });
  if (emit.response.status !== 200) throw new Error(`emit answered ${emit.response.status}`);
  const cursors: string[] = [];
  for (let i = 0; i < count; i++) {
    const event = await stream.events.next();
    if (!event?.id) throw new Error(`event ${i + 1} of ${count} has no id: ${JSON.stringify(event)}`);
    cursors.push(event.id);
  }
  return { stream, cursors };
}

async function resumptions(gateway: RunningGateway, outcome: string, reason: string): Promise<number> {
  return metricValue(gateway.registry, 'mcp_gateway_resumptions_total', { outcome, reason });
}

function streamsOpen(gateway: RunningGateway, replica: string): Promise<number> {
  return metricValue(gateway.registry, 'mcp_gateway_sse_streams_open', { replica });
}

function mediaType(value: string | undefined): string | undefined {
  return value?.split(';')[0]?.trim().toLowerCase();
}

/** Checks a `new-stream` answer and its first event; returns that event's cursor. */
async function checkSignal(t: Test, answer: Answer, reason: string, value: string, label: string): Promise<string | undefined> {
  t.equal(answer.status, 200, `${label}: 200`);
  t.equal(mediaType(answer.headers['content-type']), 'text/event-stream', `${label}: an event stream`);
  t.equal(answer.headers['mcp-resumption'], 'new-stream', `${label}: Mcp-Resumption: new-stream`);
  t.equal(answer.headers['mcp-resumption-reason'], reason, `${label}: Mcp-Resumption-Reason: ${reason}`);
  if (answer.status !== 200) return undefined;
  const first = await answer.events.next();
  t.match(first?.id, CURSOR, `${label}: the signal carries a gateway cursor`);
  t.equal(first?.data, expectedSignal(reason, value), `${label}: the signal's data, byte for byte`);
  return first?.id;
}

// ---------------------------------------------------------------------------------------------

t.test('POST with Last-Event-ID: removed before the replica, the call runs, the answer says stripped', async (t) => {
  const other = await rawSession(signal.url);
  const { stream, cursors } = await streamWithCursors(t, signal, other, 1);
  stream.close();
  const session = await rawSession(signal.url);
  const before = await resumptions(signal, 'stripped', 'post_request');

  for (const value of [cursors[0]!, '42']) {
    const { response, message } = await call(signal.url, session, 'request_headers', {}, { 'last-event-id': value });
    t.equal(response.status, 200, `${value}: 200`);
    t.equal(response.headers.get('mcp-resumption'), 'stripped', `${value}: Mcp-Resumption: stripped`);
    t.equal(response.headers.get('mcp-resumption-reason'), 'post_request', `${value}: Mcp-Resumption-Reason: post_request`);
    const seen = message?.result?.structuredContent?.['headers'] as Record<string, string> | undefined;
    t.equal(seen?.['mcp-session-id'], session, `${value}: the call ran on the replica, which reports its headers`);
    t.notOk(seen && 'last-event-id' in seen, `${value}: the replica never saw Last-Event-ID`);
  }
  t.equal(await resumptions(signal, 'stripped', 'post_request'), before + 2, 'both counted as stripped/post_request');

  // The body's intent is never dropped, even for the request that creates the session.
  const init = await post(
    signal.url,
    JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: PROTOCOL_VERSION, capabilities: {}, clientInfo: { name: 'raw-test', version: '1.0.0' } },
    }),
    { 'last-event-id': '42' },
  );
  await init.text();
  t.equal(init.status, 200, 'initialize with Last-Event-ID: 200');
  t.ok(init.headers.get('mcp-session-id'), 'initialize with Last-Event-ID: a session was created');
  t.equal(init.headers.get('mcp-resumption'), 'stripped', 'initialize with Last-Event-ID: stripped');
  t.equal(await resumptions(signal, 'stripped', 'post_request'), before + 3, 'counted too');

  const empty = await call(signal.url, session, 'request_headers', {}, { 'last-event-id': '' });
  t.equal(empty.response.status, 200, 'empty on a POST: 200');
  t.equal(empty.response.headers.get('mcp-resumption'), null, 'empty on a POST: no Mcp-Resumption');
  t.equal(empty.response.headers.get('mcp-resumption-reason'), null, 'empty on a POST: no Mcp-Resumption-Reason');
  const seen = empty.message?.result?.structuredContent?.['headers'] as Record<string, string> | undefined;
  t.equal(seen?.['mcp-session-id'], session, 'empty on a POST: the call ran');
  t.notOk(seen && 'last-event-id' in seen, 'empty on a POST: the replica never saw the header');
  t.equal(await resumptions(signal, 'stripped', 'post_request'), before + 3, 'an empty value is not counted');
});

t.test('GET with an empty Last-Event-ID is a plain GET', async (t) => {
  const session = await rawSession(signal.url);
  const total = () => metricValue(signal.registry, 'mcp_gateway_resumptions_total');
  const before = await total();
  const stream = await get(t, signal.url, { 'mcp-session-id': session, 'last-event-id': '' });
  t.equal(stream.status, 200, '200');
  t.equal(mediaType(stream.headers['content-type']), 'text/event-stream', 'an event stream');
  t.equal(stream.headers['mcp-resumption'], undefined, 'no Mcp-Resumption');
  t.equal(stream.headers['mcp-resumption-reason'], undefined, 'no Mcp-Resumption-Reason');
  await call(signal.url, session, 'emit', { count: 2, intervalMs: 0 });
  const first = await stream.events.next();
  const second = await stream.events.next();
  t.equal(emitted(first), 1, 'the first event is the first emitted one: no signal');
  t.equal(emitted(second), 2, 'then the second');
  t.equal(first?.id === undefined ? undefined : parts(first.id)[2], '1', 'numbered from 1');
  t.match(second?.id, CURSOR, 'with gateway cursors');
  t.equal(await total(), before, 'no resumption counted');
  stream.close();
});

t.test('foreign cursors on a GET of a live session: new stream, foreign_cursor, the value echoed', async (t) => {
  const session = await rawSession(signal.url);
  const { stream, cursors } = await streamWithCursors(t, signal, session, 1);
  stream.close();
  const valid = cursors[0]!;
  const dots = [...valid].flatMap((c, i) => (c === '.' ? [i] : []));
  const altered = [0, 2, dots[1]! + 1, dots[2]! + 1, dots[3]! + 1, valid.length - 1].map((i) => alter(valid, i));
  const values = [
    ...altered,
    '868476be-1-1',
    '_GET_stream_123',
    randomUUID(),
    '42',
    'a"b\\c d',
    ...[1, 64, 127, 128, 129, 1000, 4096, 8192].map(randomPrintable),
    'caf\u00e9',
    'a\tb',
    // UTF-8 bytes of "é", which the server reads as two latin1 characters.
    'caf\u00c3\u00a9',
    '\u00e9'.repeat(200),
    Array.from({ length: 0x80 }, (_, i) => String.fromCharCode(0x80 + i)).join(''),
  ];
  const before = await resumptions(signal, 'new_stream', 'foreign_cursor');
  const incarnations = new Set<string>();
  for (const [i, value] of values.entries()) {
    const label = `value ${i} (${JSON.stringify(value.slice(0, 24))}${value.length > 24 ? `…, ${value.length} chars` : ''})`;
    const answer = await get(t, signal.url, { 'mcp-session-id': session, 'last-event-id': value });
    const cursor = await checkSignal(t, answer, 'foreign_cursor', value, label);
    if (cursor) incarnations.add(parts(cursor)[1]!);
    answer.close();
  }
  t.equal(incarnations.size, values.length, 'every signal opened a new incarnation');
  t.equal(await resumptions(signal, 'new_stream', 'foreign_cursor'), before + values.length, 'each counted as new_stream/foreign_cursor');

  // Bytes that HTTP itself does not allow in a field value, and a value over the header limit:
  // a clean 4xx from the HTTP layer, never a 5xx.
  for (const [label, bytes] of [
    ['a control byte', Buffer.from([0x61, 0x01, 0x62])],
    ['DEL', Buffer.from([0x61, 0x7f, 0x62])],
    ['NUL', Buffer.from([0x61, 0x00, 0x62])],
  ] as const) {
    const head = requestHead(signal.url, [`Mcp-Session-Id: ${session}`, Buffer.concat([Buffer.from('Last-Event-ID: '), bytes])]);
    t.equal(await rawStatus(signal.url, head), 'HTTP/1.1 400 Bad Request', `${label}: 400`);
  }
  const huge = requestHead(signal.url, [`Mcp-Session-Id: ${session}`, `Last-Event-ID: ${'a'.repeat(17 * 1024)}`]);
  t.equal(await rawStatus(signal.url, huge), 'HTTP/1.1 431 Request Header Fields Too Large', 'over the header limit: 431');

  const after = await call(signal.url, session, 'echo', { text: 'still here' });
  t.equal(after.response.status, 200, 'the gateway still serves the session');
  t.equal(after.message?.result?.content?.[0]?.text, 'still here', 'and the call ran');
});

t.test('a valid cursor of another session: session_mismatch', async (t) => {
  const a = await rawSession(signal.url);
  const b = await rawSession(signal.url);
  const { stream, cursors } = await streamWithCursors(t, signal, a, 1);
  stream.close();
  const before = await resumptions(signal, 'new_stream', 'session_mismatch');
  const answer = await get(t, signal.url, { 'mcp-session-id': b, 'last-event-id': cursors[0]! });
  await checkSignal(t, answer, 'session_mismatch', cursors[0]!, 'signal mode');
  answer.close();
  t.equal(await resumptions(signal, 'new_stream', 'session_mismatch'), before + 1, 'counted as new_stream/session_mismatch');

  const rejectedBefore = await resumptions(reject, 'rejected', 'session_mismatch');
  const rejected = await get(t, reject.url, { 'mcp-session-id': b, 'last-event-id': cursors[0]! });
  t.equal(rejected.status, 410, 'reject mode: 410');
  t.equal(rejected.headers['mcp-resumption-reason'], 'session_mismatch', 'reject mode: the reason');
  t.equal(await rejected.text(), expectedReject('session_mismatch'), 'reject mode: the body');
  t.equal(await resumptions(reject, 'rejected', 'session_mismatch'), rejectedBefore + 1, 'reject mode: counted');
});

t.test('a cursor of a GET stream that a newer plain GET superseded: superseded', async (t) => {
  const session = await rawSession(signal.url);
  const first = await streamWithCursors(t, signal, session, 1);
  first.stream.close();
  const second = await plainGet(t, signal.url, session);
  t.equal(second.status, 200, 'the second plain GET opens');
  const before = await resumptions(signal, 'new_stream', 'superseded');
  const answer = await get(t, signal.url, { 'mcp-session-id': session, 'last-event-id': first.cursors[0]! });
  const cursor = await checkSignal(t, answer, 'superseded', first.cursors[0]!, 'signal mode');
  t.not(cursor && parts(cursor)[1], parts(first.cursors[0]!)[1], 'the signal is of a new incarnation');
  answer.close();
  t.equal(await resumptions(signal, 'new_stream', 'superseded'), before + 1, 'counted as new_stream/superseded');

  const rejected = await get(t, reject.url, { 'mcp-session-id': session, 'last-event-id': first.cursors[0]! });
  t.equal(rejected.status, 410, 'reject mode: 410');
  t.equal(rejected.headers['mcp-resumption-reason'], 'superseded', 'reject mode: the reason');
  t.equal(await rejected.text(), expectedReject('superseded'), 'reject mode: the body');
  second.close();
});

t.test('unknown session, or none: 404 Session not found, counted as rejected/session_unknown in both modes', async (t) => {
  const session = await rawSession(signal.url);
  const { stream, cursors } = await streamWithCursors(t, signal, session, 1);
  stream.close();
  const ended = await rawSession(signal.url);
  const endedCursors = await streamWithCursors(t, signal, ended, 1);
  endedCursors.stream.close();
  const deleted = await fetch(signal.url, { method: 'DELETE', headers: { 'mcp-session-id': ended, 'mcp-protocol-version': PROTOCOL_VERSION } });
  await deleted.text();
  t.equal(deleted.status, 200, 'DELETE ends a session');

  const cases: [string, Record<string, string>][] = [
    ['an unknown session, a valid cursor', { 'mcp-session-id': randomUUID(), 'last-event-id': cursors[0]! }],
    ['an unknown session, a legacy id', { 'mcp-session-id': randomUUID(), 'last-event-id': '42' }],
    ['no session, a valid cursor', { 'last-event-id': cursors[0]! }],
    ['no session, a legacy id', { 'last-event-id': '42' }],
    ['a session ended with DELETE, its own cursor', { 'mcp-session-id': ended, 'last-event-id': endedCursors.cursors[0]! }],
  ];
  for (const gateway of [signal, reject]) {
    const mode = gateway === signal ? 'signal' : 'reject';
    const before = await resumptions(gateway, 'rejected', 'session_unknown');
    for (const [label, headers] of cases) {
      const answer = await get(t, gateway.url, headers);
      t.equal(answer.status, 404, `${mode}, ${label}: 404`);
      t.equal(mediaType(answer.headers['content-type']), 'application/json', `${mode}, ${label}: JSON`);
      t.equal(await answer.text(), SESSION_NOT_FOUND, `${mode}, ${label}: Session not found`);
    }
    t.equal(await resumptions(gateway, 'rejected', 'session_unknown'), before + cases.length, `${mode}: each counted`);
  }
});

t.test('reject mode: a foreign cursor gets 410 with the exact body', async (t) => {
  const session = await rawSession(reject.url);
  const before = await resumptions(reject, 'rejected', 'foreign_cursor');
  for (const value of ['42', 'caf\u00e9', randomPrintable(8192)]) {
    const answer = await get(t, reject.url, { 'mcp-session-id': session, 'last-event-id': value });
    const label = JSON.stringify(value.slice(0, 16));
    t.equal(answer.status, 410, `${label}: 410`);
    t.equal(answer.headers['cache-control'], 'no-store', `${label}: Cache-Control: no-store`);
    t.equal(answer.headers['mcp-resumption'], 'rejected', `${label}: Mcp-Resumption: rejected`);
    t.equal(answer.headers['mcp-resumption-reason'], 'foreign_cursor', `${label}: Mcp-Resumption-Reason: foreign_cursor`);
    t.equal(await answer.text(), expectedReject('foreign_cursor'), `${label}: the body`);
  }
  t.equal(await resumptions(reject, 'rejected', 'foreign_cursor'), before + 3, 'counted as rejected/foreign_cursor');
  t.equal(await resumptions(reject, 'new_stream', 'foreign_cursor'), 0, 'never as a new stream');
});

t.test('after a signal the stream goes on as a fresh GET stream from the owner, nothing replayed', async (t) => {
  const session = await rawSession(signal.url);
  const replica = await owner(signal.url, session);
  // Three events on the first incarnation: a replay after the first would bring seq 2 and 3.
  const first = await streamWithCursors(t, signal, session, 3);
  first.stream.close();
  const second = await plainGet(t, signal.url, session);
  t.equal(second.status, 200, 'a newer plain GET supersedes the first');
  second.close();

  const stale = first.cursors[0]!;
  for (const [reason, value] of [
    ['superseded', stale],
    ['foreign_cursor', alter(stale, stale.length - 1)],
  ] as const) {
    await waitFor(`no stream open to ${replica}`, STREAM_DEADLINE_MS, async () => (await streamsOpen(signal, replica)) === 0);
    const answer = await get(t, signal.url, { 'mcp-session-id': session, 'last-event-id': value });
    const cursor = await checkSignal(t, answer, reason, value, reason);
    const incarnation = cursor && parts(cursor)[1];
    t.equal(cursor && parts(cursor)[2], '1', `${reason}: the signal is the first event of its incarnation`);
    t.not(incarnation, parts(stale)[1], `${reason}: a new incarnation`);
    await waitFor(`the fresh GET stream to ${replica}`, STREAM_DEADLINE_MS, async () => (await streamsOpen(signal, replica)) === 1);

    await call(signal.url, session, 'emit', { count: 2, intervalMs: 0 });
    await call(signal.url, session, 'emit', { count: 1, intervalMs: 0 });
    const events = [await answer.events.next(), await answer.events.next(), await answer.events.next()];
    t.same(
      events.map(emitted),
      [1, 2, 1],
      `${reason}: exactly the events emitted after the signal, in order (a replay would bring seq 2 and 3 first)`,
    );
    t.same(
      events.map((e) => e?.id && parts(e.id).slice(1, 3)),
      [
        [incarnation, '2'],
        [incarnation, '3'],
        [incarnation, '4'],
      ],
      `${reason}: under cursors of the signal's incarnation, numbered on from it`,
    );
    t.ok(
      events.every((e) => e?.id !== undefined && CURSOR.test(e.id)),
      `${reason}: gateway cursors`,
    );
    answer.close();
  }
});

t.test('a continuation at the head: continued, then live events numbered on', async (t) => {
  const session = await rawSession(signal.url);
  const replica = await owner(signal.url, session);
  const first = await streamWithCursors(t, signal, session, 3);
  first.stream.close();
  await waitFor(`no stream open to ${replica}`, STREAM_DEADLINE_MS, async () => (await streamsOpen(signal, replica)) === 0);
  const head = first.cursors[2]!;
  const [, incarnation, seq] = parts(head);
  t.equal(seq, '3', 'the head is at 3');

  // Then from the new head through the other instance: gateways that share a store continue
  // each other's streams.
  let at = head;
  for (const gateway of [signal, reject]) {
    const mode = gateway === signal ? 'signal' : 'reject';
    const before = await resumptions(gateway, 'continued', 'none');
    const headSeq = parseInt(parts(at)[2]!, 36);
    const answer = await get(t, gateway.url, { 'mcp-session-id': session, 'last-event-id': at });
    t.equal(answer.status, 200, `${mode}: 200`);
    t.equal(mediaType(answer.headers['content-type']), 'text/event-stream', `${mode}: an event stream`);
    t.equal(answer.headers['mcp-resumption'], 'continued', `${mode}: Mcp-Resumption: continued`);
    t.equal(answer.headers['mcp-resumption-reason'], undefined, `${mode}: no Mcp-Resumption-Reason`);
    // J1: the owner's continuation begins with the client's own position, before any event.
    t.same(await answer.events.next(), { id: at, data: '' }, `${mode}: a priming event for the cursor it continues after first`);
    await call(signal.url, session, 'emit', { count: 2, intervalMs: 0 });
    const events = [await answer.events.next(), await answer.events.next()];
    t.same(events.map(emitted), [1, 2], `${mode}: nothing replayed, then the live events`);
    t.same(
      events.map((e) => e?.id && parts(e.id).slice(1, 3)),
      [
        [incarnation, (headSeq + 1).toString(36)],
        [incarnation, (headSeq + 2).toString(36)],
      ],
      `${mode}: numbered on from the head (${headSeq}), same incarnation`,
    );
    t.equal(await resumptions(gateway, 'continued', 'none'), before + 1, `${mode}: counted as continued/none`);
    answer.close();
    at = events[1]?.id ?? at;
  }
});

t.test('a signal whose fresh stream the owner refuses supersedes nothing: the live GET stream stays resumable', async (t) => {
  const session = await rawSession(signal.url);
  const replica = await owner(signal.url, session);
  const live = await streamWithCursors(t, signal, session, 1);
  const [, incarnation] = parts(live.cursors[0]!);

  // The live stream holds the session's one standalone stream on the replica: the owner answers
  // the signal's fresh GET with 409, and the signal stream ends after the notification.
  const answer = await get(t, signal.url, { 'mcp-session-id': session, 'last-event-id': '42' });
  await checkSignal(t, answer, 'foreign_cursor', '42', 'a stray GET with a legacy id');
  t.equal(await answer.events.next(), undefined, 'the signal stream ends: no fresh stream was opened');

  await call(signal.url, session, 'emit', { count: 2, intervalMs: 0 });
  const events = [await live.stream.events.next(), await live.stream.events.next()];
  t.same(events.map(emitted), [1, 2], 'the live stream goes on');
  t.same(
    events.map((e) => e?.id && parts(e.id).slice(1, 3)),
    [
      [incarnation, '2'],
      [incarnation, '3'],
    ],
    'under its own incarnation',
  );

  // The cursors it keeps issuing must stay resumable (E4: only a GET stream that was opened
  // supersedes it; here none was).
  live.stream.close();
  await waitFor(`no stream open to ${replica}`, STREAM_DEADLINE_MS, async () => (await streamsOpen(signal, replica)) === 0);
  const resumed = await get(t, signal.url, { 'mcp-session-id': session, 'last-event-id': events[1]!.id! });
  t.equal(resumed.status, 200, 'resumed: 200');
  t.equal(resumed.headers['mcp-resumption'], 'continued', 'resumed: Mcp-Resumption: continued');
  t.equal(resumed.headers['mcp-resumption-reason'], undefined, 'resumed: no Mcp-Resumption-Reason');
  resumed.close();
});

t.test('never a 5xx', async (t) => {
  t.ok(answered.length > 0, `${answered.length} answers seen`);
  t.same(answered.filter((a) => a.status >= 500), [], 'none of the requests above was answered with a 5xx');
});
