/**
 * The demo replica: a real MCP server on the SDK's Streamable HTTP transport, one transport and one
 * McpServer per session, every stream resumable through a bounded event log; or, with
 * `--no-event-store`, the SDK's default server that keeps none (its events carry no ids and it
 * cannot replay: what most MCP servers are); or, with `--renumber from-cursor|from-1`, a misbuilt
 * one whose event ids are a counter that a Last-Event-ID sets back (event-store.ts). The gateway's tests, demo and container image run it;
 * the gateway itself must not depend on anything here that a plain SDK server lacks (such as
 * /healthz).
 *
 *   node demo/dist/replica.js --id r1 --port 3001 [--host 127.0.0.1] [--max-events 10000 | --no-event-store | --renumber MODE]
 *
 * prints one JSON line `{"event":"listening",...}` on stdout and nothing else there.
 *
 * Tools: whoami, counter, counter_value, progress, emit, echo, and request_headers (the HTTP
 * headers of the request that carried the call, as the replica received them: what a proxy in
 * front of it forwarded).
 */
import { randomUUID } from 'node:crypto';
import { realpathSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';
import { BoundedEventStore, RenumberingEventStore, type Renumbering } from './event-store.js';

export interface ReplicaOptions {
  id: string;
  host?: string;
  /** 0 (the default) picks a free port. */
  port?: number;
  /** Bound of the event log shared by all sessions. */
  maxEvents?: number;
  /** false: no event log at all, the SDK's default (default true). */
  eventStore?: boolean;
  /** Instead of the event log: a counter that a Last-Event-ID sets back, replaying nothing (misbuilt). */
  renumber?: Renumbering;
  /** Answer POSTs with JSON instead of an SSE stream (no POST streams to resume then). */
  enableJsonResponse?: boolean;
}

export interface Replica {
  id: string;
  url: string;
  port: number;
  close(): Promise<void>;
  sessions(): number;
  /** The event log; undefined when the replica keeps none (eventStore: false). */
  events: BoundedEventStore | undefined;
  /** Calls of each tool so far, all sessions together: started, and answered with a result. */
  toolCalls(): ToolCalls;
}

export type ToolCalls = Record<string, { started: number; finished: number }>;

const MCP_PATH = '/mcp';
const DEFAULT_MAX_EVENTS = 10_000;
/** Caps on tool arguments, so that a test typo cannot keep a replica busy for hours. */
const MAX_STEPS = 10_000;
const MAX_INTERVAL_MS = 60_000;

export async function startReplica(opts: ReplicaOptions): Promise<Replica> {
  const { id, host = '127.0.0.1', port = 0, enableJsonResponse = false, eventStore = true } = opts;
  if (!eventStore && opts.maxEvents !== undefined) throw new RangeError('maxEvents bounds an event log: a replica without one takes none');
  const { renumber } = opts;
  if (renumber !== undefined && (!eventStore || opts.maxEvents !== undefined)) throw new RangeError('renumber replaces the event log: give neither eventStore: false nor maxEvents with it');
  const events = eventStore && renumber === undefined ? new BoundedEventStore({ maxEvents: opts.maxEvents ?? DEFAULT_MAX_EVENTS }) : undefined;
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  // Side-effect counter of the `counter` tool: per replica, which is per process when run as a CLI.
  const counter = { value: 0 };
  // How often each tool ran: a test can tell a call that ran once from one that a retry ran twice.
  const toolCalls: ToolCalls = {};

  // GET requests open on the MCP path (SSE streams): /healthz says, so that a test can wait until
  // a stream closed before resuming it (the SDK answers 409 while it still holds the stream).
  let getStreams = 0;

  async function openSession(): Promise<StreamableHTTPServerTransport> {
    // Known before initialize, so that the event log view can be scoped to it.
    const sessionId = randomUUID();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => sessionId,
      ...(events && { eventStore: events.scoped(sessionId) }),
      ...(renumber && { eventStore: new RenumberingEventStore(renumber) }),
      enableJsonResponse,
      onsessioninitialized: (sid) => {
        sessions.set(sid, transport);
      },
    });
    // Set before connect: McpServer chains its own handler after this one.
    transport.onclose = () => {
      sessions.delete(sessionId);
    };
    await buildMcpServer(id, counter, toolCalls).connect(transport);
    return transport;
  }

  async function handleMcp(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const sessionId = req.headers['mcp-session-id'];
    if (req.method === 'GET') {
      getStreams++;
      res.once('close', () => getStreams--);
    }
    if (typeof sessionId === 'string') {
      const transport = sessions.get(sessionId);
      // Same answer as the SDK gives for a session it does not hold (e.g. after a restart).
      if (transport === undefined) return sendJson(res, 404, rpcError(-32001, 'Session not found'));
      return transport.handleRequest(req, res);
    }
    if (req.method !== 'POST') {
      return sendJson(res, 400, rpcError(-32000, 'Bad Request: Mcp-Session-Id header is required'));
    }
    // The transport itself answers 400 to a non-initialize POST on a fresh session, so the body
    // need not be parsed here; a transport that did not get initialized is dropped at once.
    const transport = await openSession();
    await transport.handleRequest(req, res);
    if (transport.sessionId === undefined) await transport.close();
  }

  function handleDemo(req: IncomingMessage, res: ServerResponse, url: URL): void {
    if (url.pathname === '/healthz' && req.method === 'GET') {
      return sendJson(res, 200, { replica: id, sessions: sessions.size, getStreams, eventStore, toolCalls });
    }
    if (url.pathname === '/_demo/trim' && req.method === 'POST') {
      if (events === undefined) return sendJson(res, 409, { error: 'this replica keeps no event log (--no-event-store)' });
      const keep = Number(url.searchParams.get('keep') ?? Number.NaN);
      if (!Number.isInteger(keep) || keep < 0) {
        return sendJson(res, 400, { error: 'keep must be a non-negative integer' });
      }
      events.trim(keep);
      return sendJson(res, 200, { size: events.size });
    }
    sendJson(res, 404, { error: 'not found' });
  }

  // Names this process, so that a gateway probing it can tell a restart (health.instanceHeader).
  const instance = randomUUID();
  const server = createServer((req, res) => {
    res.setHeader('mcp-replica-instance', instance);
    const url = new URL(req.url ?? '/', 'http://replica');
    const handled = url.pathname === MCP_PATH ? handleMcp(req, res) : Promise.resolve(handleDemo(req, res, url));
    handled.catch(() => {
      if (!res.headersSent) sendJson(res, 500, rpcError(-32603, 'Internal error'));
      else res.destroy();
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const actualPort = (server.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  let closing: Promise<void> | undefined;
  return {
    id,
    url: `http://${urlHost}:${actualPort}${MCP_PATH}`,
    port: actualPort,
    events,
    sessions: () => sessions.size,
    toolCalls: () => structuredClone(toolCalls),
    close: () => {
      closing ??= (async () => {
        // Closing a transport ends its SSE streams and aborts its running tool calls.
        await Promise.all([...sessions.values()].map((t) => t.close()));
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeAllConnections();
        await closed;
      })();
      return closing;
    },
  };
}

function buildMcpServer(replica: string, counter: { value: number }, toolCalls: ToolCalls): McpServer {
  const mcp = new McpServer({ name: 'mcp-resume-gateway-demo', version: '0.1.0' }, { capabilities: { logging: {} } });
  // Every tool is counted when it starts and when it answers (a call aborted midway only starts).
  const register: McpServer['registerTool'] = (name, config, cb) => {
    const calls = (toolCalls[name] = { started: 0, finished: 0 });
    const counted = async (...args: unknown[]) => {
      calls.started++;
      const result = await (cb as (...a: unknown[]) => unknown)(...args);
      calls.finished++;
      return result;
    };
    return mcp.registerTool(name, config, counted as typeof cb);
  };
  const text = (t: string) => ({ content: [{ type: 'text' as const, text: t }] });
  const steps = z.number().int().min(0).max(MAX_STEPS);
  const intervalMs = z.number().int().min(0).max(MAX_INTERVAL_MS);

  register(
    'whoami',
    { description: 'The id of the replica that serves this session.', outputSchema: { replica: z.string() } },
    async () => ({ ...text(replica), structuredContent: { replica } }),
  );

  register(
    'counter',
    { description: 'Increments the replica-wide side-effect counter; returns the new value.' },
    async () => text(String(++counter.value)),
  );

  register(
    'counter_value',
    { description: 'The replica-wide side-effect counter, unchanged.' },
    async () => text(String(counter.value)),
  );

  register(
    'progress',
    {
      description: 'Sends notifications/progress every intervalMs, steps times, then answers.',
      inputSchema: { steps, intervalMs },
    },
    async (args, extra) => {
      const progressToken = extra._meta?.progressToken;
      for (let i = 1; i <= args.steps; i++) {
        await delay(args.intervalMs, undefined, { signal: extra.signal });
        if (progressToken !== undefined) {
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken, progress: i, total: args.steps },
          });
        }
      }
      return text(`done after ${args.steps} steps`);
    },
  );

  register(
    'emit',
    {
      description:
        'Sends count logging notifications (data {seq: 1..count, replica}) intervalMs apart, on the ' +
        "session's standalone GET stream ('get', the default) or on this request's own stream.",
      inputSchema: { count: steps, intervalMs, stream: z.enum(['get', 'request']).optional() },
    },
    async (args, extra) => {
      const onGet = (args.stream ?? 'get') === 'get';
      for (let seq = 1; seq <= args.count; seq++) {
        if (seq > 1) await delay(args.intervalMs, undefined, { signal: extra.signal });
        const params = { level: 'info' as const, logger: 'emit', data: { seq, replica } };
        // Without relatedRequestId the transport routes the message to the standalone GET stream.
        if (onGet) await mcp.sendLoggingMessage(params, extra.sessionId);
        else await extra.sendNotification({ method: 'notifications/message', params });
      }
      return text(`emitted ${args.count} on ${onGet ? 'get' : 'request'} stream`);
    },
  );

  register(
    'request_headers',
    {
      description: 'The HTTP headers of the request that carried this call, as JSON (names in lower case).',
      outputSchema: { headers: z.record(z.string(), z.union([z.string(), z.array(z.string())])) },
    },
    async (extra) => {
      const headers: Record<string, string | string[]> = {};
      for (const [name, value] of Object.entries(extra.requestInfo?.headers ?? {})) {
        if (typeof value === 'string' || Array.isArray(value)) headers[name.toLowerCase()] = value;
      }
      return { ...text(JSON.stringify(headers)), structuredContent: { headers } };
    },
  );

  register(
    'echo',
    { description: 'Answers with its input.', inputSchema: { text: z.string() } },
    async (args) => text(args.text),
  );

  return mcp;
}

function rpcError(code: number, message: string) {
  return { jsonrpc: '2.0', error: { code, message }, id: null };
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

const USAGE = `usage: node demo/dist/replica.js --id ID [options]
  --id ID             the replica's id: the whoami tool and GET /healthz answer it
  --host HOST         address to listen on (default: 127.0.0.1)
  --port N            port to listen on (default: 0, any free port; the listening line names it)
  --max-events N      events kept for resumption, all sessions together (default: ${DEFAULT_MAX_EVENTS});
                      a reconnect from an event no longer kept is refused, never replayed in part
  --no-event-store    keep no event log, as the SDK's default server: events carry no ids, a
                      dropped stream cannot be replayed (a gateway journal can make it resumable)
  --renumber MODE     misbuilt on purpose: event ids are a counter per stream, and a Last-Event-ID
                      replays nothing and sets it back, to the cursor (from-cursor) or to 1 (from-1)
  -h, --help          this text

Prints one JSON line {"event":"listening","id","url","port","pid","eventStore"} on stdout once it listens,
and nothing else there. SIGTERM or SIGINT closes it and exits 0.`;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      id: { type: 'string' },
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '0' },
      'max-events': { type: 'string' },
      'no-event-store': { type: 'boolean', default: false },
      renumber: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const port = Number(values.port);
  const maxEvents = values['max-events'] === undefined ? undefined : Number(values['max-events']);
  const eventStore = !values['no-event-store'];
  if (!values.id) throw new Error('--id is required (--help lists the options)');
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`bad --port ${values.port}`);
  if (maxEvents !== undefined && (!Number.isInteger(maxEvents) || maxEvents < 1)) throw new Error(`bad --max-events ${values['max-events']}`);
  if (maxEvents !== undefined && !eventStore) throw new Error('--max-events bounds the event log that --no-event-store turns off: give one of them');
  const renumber = values.renumber;
  if (renumber !== undefined && renumber !== 'from-cursor' && renumber !== 'from-1') throw new Error(`bad --renumber ${renumber}: from-cursor or from-1`);
  if (renumber !== undefined && (maxEvents !== undefined || !eventStore)) throw new Error('--renumber replaces the event log: give neither --max-events nor --no-event-store with it');

  const replica = await startReplica({ id: values.id, host: values.host, port, eventStore, ...(maxEvents !== undefined && { maxEvents }), ...(renumber && { renumber }) });
  const line = { event: 'listening', id: replica.id, url: replica.url, port: replica.port, pid: process.pid, eventStore };
  process.stdout.write(`${JSON.stringify(line)}\n`);

  const stop = () => {
    replica.close().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

/** True when this module is the process entry point (symlinked bins included). */
function isMain(): boolean {
  const entry = process.argv[1];
  if (entry === undefined) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(entry)).href;
  } catch {
    return false;
  }
}

if (isMain()) {
  main().catch((err: unknown) => {
    process.stderr.write(`replica: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
