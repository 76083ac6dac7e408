/**
 * A minimal, fast MCP-shaped upstream for benchmarks (node:http, no SDK): what a replica does on
 * the wire and nothing else, so that a proxy's cost is not hidden behind the replica's.
 *
 *   node build/bench/upstream.js [--port 0] [--workers 1]
 *
 * prints one JSON line `{"event":"listening","port":...}` on stdout once every worker listens.
 *
 * - POST without Mcp-Session-Id (initialize): JSON result with a new `Mcp-Session-Id`.
 * - POST with one: JSON-RPC requests get a small JSON result with their id; notifications 202. A
 *   request whose arguments hold `"progress":N` is answered as an SSE stream instead: N progress
 *   notifications, then the result (a slow tool's call).
 * - GET with one: an SSE stream. `X-Bench-Sse: flood` writes small events with ids as fast as the
 *   socket takes them; `X-Bench-Sse: paced-R` writes R events a second, each without an id, with its
 *   number in the stream (`"seq"`: 1, 2, ...) and the time it was written (`"t"`: ms since the
 *   epoch, to the µs, read on this machine's one clock); `paced-R-renumbered` the same with ids,
 *   `1`, `2`, ... again on every stream whatever its Last-Event-ID: a misbuilt replica whose ids are
 *   a counter, not a log (CONTRACT.md §4 E6); anything else keeps the stream open and silent (idle).
 * - GET without one: 400, as an SDK server answers (the gateway's health probe sees it alive).
 * - DELETE: 200.
 * Sessions are not remembered: any worker of a cluster serves any session.
 *
 * In-process (bench/tail-latency.ts), `listen(0, { onStream })` hands each GET stream that is not
 * a flood to its caller, which writes its events on the caller's clock.
 */
import cluster from 'node:cluster';
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const INIT_RESULT = '{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"bench-upstream","version":"1"}}';
const CALL_RESULT = '{"content":[{"type":"text","text":"ok"}]}';
const BAD_REQUEST = '{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: Mcp-Session-Id header is required"}}';
/** Events written per res.write() while flooding: one syscall for many events, as a busy replica does. */
const FLOOD_BATCH = 32;

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function idOf(body: string): string | undefined {
  try {
    const message = JSON.parse(body) as { id?: unknown };
    return message.id === undefined || message.id === null ? undefined : JSON.stringify(message.id);
  } catch {
    return undefined;
  }
}

function json(res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

async function post(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = await readBody(req);
  const id = idOf(body);
  const session = req.headers['mcp-session-id'];
  if (typeof session !== 'string') {
    json(res, 200, `{"jsonrpc":"2.0","id":${id ?? 'null'},"result":${INIT_RESULT}}`, { 'mcp-session-id': `bench-${randomUUID()}` });
    return;
  }
  if (id === undefined) {
    res.writeHead(202).end();
    return;
  }
  const progress = /"progress":(\d+)/.exec(body);
  if (progress) return progressStream(res, id, Number(progress[1]));
  json(res, 200, `{"jsonrpc":"2.0","id":${id},"result":${CALL_RESULT}}`);
}

/** A call answered on its own SSE stream: `steps` progress notifications a millisecond apart, then its result. */
function progressStream(res: ServerResponse, id: string, steps: number): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders();
  let step = 0;
  const next = () => {
    if (res.destroyed) return;
    if (step++ < steps) {
      res.write(`event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":${id},"progress":${step},"total":${steps}}}\n\n`);
      setTimeout(next, 1);
      return;
    }
    res.end(`event: message\ndata: {"jsonrpc":"2.0","id":${id},"result":${CALL_RESULT}}\n\n`);
  };
  next();
}

/** Milliseconds since the epoch to the microsecond: comparable between processes of one machine. */
export function stamp(): number {
  return performance.timeOrigin + performance.now();
}

/**
 * Paced event `seq` of a stream, stamped with when it was written. Without an id, as the SDK's
 * default server (no event log) writes its events: this upstream cannot replay, and ids that
 * restart with each stream would make a replica that answers Last-Event-ID with a fresh counter.
 */
export function pacedEvent(seq: number, withId = false): string {
  return `${withId ? `id: ${seq}\n` : ''}data: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"seq":${seq},"t":${stamp().toFixed(3)}}}}\n\n`;
}

/**
 * Paced streams: one timer for all of them (thousands of streams, each with its own timer, would
 * measure the timers), each stream due every 1000/rate ms from a phase of its own, so that the
 * events of many streams arrive spread over time, as a fleet's do.
 */
const PACE_TICK_MS = 5;
const paced = new Set<{ res: ServerResponse; seq: number; every: number; due: number; ids: boolean }>();
let pacer: NodeJS.Timeout | undefined;

function pace(res: ServerResponse, rate: number, ids: boolean): void {
  const every = 1000 / rate;
  const stream = { res, seq: 0, every, due: performance.now() + Math.random() * every, ids };
  paced.add(stream);
  res.once('close', () => paced.delete(stream));
  pacer ??= setInterval(() => {
    const now = performance.now();
    for (const s of paced) {
      if (s.due > now) continue;
      // A stream late by more than one period (a stalled machine) catches up one event per tick.
      s.due = Math.max(s.due + s.every, now - s.every);
      s.res.write(pacedEvent(++s.seq, s.ids));
    }
    if (paced.size === 0) {
      clearInterval(pacer);
      pacer = undefined;
    }
  }, PACE_TICK_MS);
}

/** The flood's event `seq`, as written: an id line and a JSON-RPC notification. */
export function floodEvent(seq: number): string {
  return `id: ${seq}\ndata: {"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"seq":${seq}}}}\n\n`;
}

function flood(res: ServerResponse): void {
  let seq = 0;
  const write = () => {
    while (!res.destroyed) {
      let chunk = '';
      for (let i = 0; i < FLOOD_BATCH; i++) {
        seq++;
        chunk += floodEvent(seq);
      }
      if (!res.write(chunk)) {
        res.once('drain', write);
        return;
      }
    }
  };
  write();
}

export interface UpstreamOptions {
  /** A GET stream that is not a flood, open (its headers sent): its events are the caller's. */
  onStream?: (res: ServerResponse, sessionId: string) => void;
}

const RENUMBERED = '-renumbered';

function get(req: IncomingMessage, res: ServerResponse, options: UpstreamOptions): void {
  const session = req.headers['mcp-session-id'];
  if (typeof session !== 'string') return json(res, 400, BAD_REQUEST);
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders();
  const mode = req.headers['x-bench-sse'];
  if (mode === 'flood') flood(res);
  else if (typeof mode === 'string' && mode.startsWith('paced-')) {
    const renumbered = mode.endsWith(RENUMBERED);
    pace(res, Number(mode.slice('paced-'.length, renumbered ? -RENUMBERED.length : undefined)), renumbered);
  }
  else options.onStream?.(res, session);
}

function handle(req: IncomingMessage, res: ServerResponse, options: UpstreamOptions): void {
  if (req.method === 'POST') {
    post(req, res).catch(() => res.destroy());
  } else if (req.method === 'GET') {
    get(req, res, options);
  } else if (req.method === 'DELETE') {
    json(res, 200, '{}');
  } else {
    json(res, 405, '{}');
  }
}

/** Listens on 127.0.0.1:port (0: a free one); resolves with the port and a way to close it. */
export async function listen(port: number, options: UpstreamOptions = {}): Promise<{ port: number; close: () => Promise<void> }> {
  const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => handle(req, res, options));
  // Idle SSE streams stay open for as long as the benchmark holds them.
  server.requestTimeout = 0;
  server.headersTimeout = 0;
  server.maxRequestsPerSocket = 0;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  return { port: (server.address() as AddressInfo).port, close };
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { port: { type: 'string', default: '0' }, workers: { type: 'string', default: '1' } } });
  const workers = Number(values.workers);
  const port = Number(values.port);
  if (workers <= 1) {
    const { port: actual } = await listen(port);
    process.stdout.write(`${JSON.stringify({ event: 'listening', port: actual, pid: process.pid })}\n`);
    return;
  }
  if (cluster.isPrimary) {
    // The cluster shares one listening socket among the workers, so the port must be known first.
    if (port === 0) throw new Error('--workers > 1 needs a --port');
    let ready = 0;
    for (let i = 0; i < workers; i++) {
      cluster.fork().on('message', () => {
        if (++ready === workers) process.stdout.write(`${JSON.stringify({ event: 'listening', port, pid: process.pid })}\n`);
      });
    }
    for (const signal of ['SIGTERM', 'SIGINT'] as const) {
      process.once(signal, () => {
        for (const worker of Object.values(cluster.workers ?? {})) worker?.kill('SIGKILL');
        process.exit(0);
      });
    }
    return;
  }
  await listen(port);
  process.send?.('listening');
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().catch((err: unknown) => {
    process.stderr.write(`bench upstream: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
