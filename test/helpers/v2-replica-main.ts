/**
 * An MCP server on the TypeScript SDK v2 (`@modelcontextprotocol/server`), run as a child process
 * by v2-replicas.ts: `createMcpHandler` serves the 2026-07-28 era and, statelessly, 2025-era
 * clients, on plain node:http. Prints one JSON line `{"event":"listening",...}` when ready.
 *
 * Besides its MCP endpoint it answers, for the tests:
 * - `GET /control/state`: `{ seen, openStreams }`, the standard headers of every MCP POST it
 *   received (in order) and the number of SSE responses it is writing now;
 * - `POST /control/tools-changed`: publishes notifications/tools/list_changed to its listeners.
 *
 * Tasks (the Tasks extension, SEP-2663), kept in this process's memory as an SDK v2 author keeps
 * them: the tool `start-task` answers `resultType: "task"` (with `ttlMs` from its argument, null
 * when asked; in an SSE stream after a progress notification when the call asks for progress); `tasks/get`, `tasks/update` (sets `statusMessage`) and `tasks/cancel` act on a task
 * of this process and answer -32602 for any other. Every task names the replica that holds it in
 * `holder`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseArgs } from 'node:util';
import { randomUUID } from 'node:crypto';
import { createMcpHandler, McpServer, ProtocolError, ProtocolErrorCode } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { listenChild } from './child-server.js';

const { values } = parseArgs({ options: { id: { type: 'string' }, port: { type: 'string', default: '0' } } });
const id = values.id ?? 'v2';

interface HeldTask {
  taskId: string;
  status: 'working' | 'completed' | 'cancelled';
  statusMessage: string;
  ttlMs: number | null;
  createdAt: string;
  lastUpdatedAt: string;
  pollIntervalMs: number;
  holder: string;
}
const tasks = new Map<string, HeldTask>();
const TaskParams = z.object({ taskId: z.string() }).passthrough();

function heldTask(taskId: string): HeldTask {
  const task = tasks.get(taskId);
  if (!task) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Failed to retrieve task: Task not found`);
  return task;
}

function factory(): McpServer {
  const server = new McpServer({ name: `v2-replica-${id}`, version: '1.0.0' });
  server.registerTool('whoami', { description: 'the id of the replica that answers' }, async () => ({
    content: [{ type: 'text', text: id }],
  }));
  server.registerTool(
    'count',
    { description: 'reports progress up to n as it counts, then answers with the replica id', inputSchema: z.object({ n: z.number().int().min(1).max(100) }) },
    async ({ n }, ctx) => {
      const progressToken = ctx.mcpReq._meta?.progressToken;
      if (progressToken !== undefined) {
        for (let i = 1; i <= n; i++) await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken, progress: i, total: n } });
      }
      return { content: [{ type: 'text', text: `${id}:${n}` }] };
    },
  );
  server.registerTool(
    'start-task',
    { description: 'starts a task held in this process', inputSchema: z.object({ ttlMs: z.number().int().nullable().optional() }) },
    async ({ ttlMs }, ctx) => {
      // Asked for progress, it answers with an SSE stream: one notification, then the task.
      const progressToken = ctx.mcpReq._meta?.progressToken;
      if (progressToken !== undefined) await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken, progress: 1, total: 1 } });
      const now = new Date().toISOString();
      const task: HeldTask = {
        taskId: randomUUID(),
        status: 'working',
        statusMessage: 'started',
        ttlMs: ttlMs === undefined ? 60_000 : ttlMs,
        createdAt: now,
        lastUpdatedAt: now,
        pollIntervalMs: 50,
        holder: id,
      };
      tasks.set(task.taskId, task);
      return { resultType: 'task', ...task, content: [] } as never;
    },
  );
  server.server.setRequestHandler('tasks/get', { params: TaskParams }, async ({ taskId }) => ({ ...heldTask(taskId) }));
  server.server.setRequestHandler('tasks/update', { params: TaskParams.extend({ statusMessage: z.string() }) }, async ({ taskId, statusMessage }) => {
    const task = heldTask(taskId);
    task.statusMessage = statusMessage;
    task.lastUpdatedAt = new Date().toISOString();
    return { ...task };
  });
  server.server.setRequestHandler('tasks/cancel', { params: TaskParams }, async ({ taskId }) => {
    const task = heldTask(taskId);
    task.status = 'cancelled';
    task.lastUpdatedAt = new Date().toISOString();
    return { ...task };
  });
  return server;
}

const handler = createMcpHandler(factory, { keepAliveMs: 0 });
const seen: Record<string, string>[] = [];
let openStreams = 0;

const MIRRORED = ['mcp-protocol-version', 'mcp-method', 'mcp-name', 'mcp-session-id'];

async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', `http://${req.headers.host ?? '127.0.0.1'}`);
  if (url.pathname === '/control/state') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ seen, openStreams }));
    return;
  }
  if (url.pathname === '/control/tools-changed') {
    handler.notify.toolsChanged();
    res.writeHead(204).end();
    return;
  }
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const record: Record<string, string> = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (typeof value === 'string' && (MIRRORED.includes(name) || name.startsWith('mcp-param-'))) record[name] = value;
  }
  if (req.method === 'POST') seen.push(record);
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (typeof value === 'string') headers.set(name, value);
    else if (Array.isArray(value)) for (const v of value) headers.append(name, v);
  }
  const aborted = new AbortController();
  res.once('close', () => aborted.abort());
  const method = req.method ?? 'GET';
  const response = await handler.fetch(
    new Request(url, { method, headers, body: method === 'GET' || method === 'HEAD' ? undefined : Buffer.concat(chunks), signal: aborted.signal }),
  );
  const out: Record<string, string> = { 'x-replica-id': id };
  response.headers.forEach((value, name) => {
    out[name] = value;
  });
  res.writeHead(response.status, out);
  if (!response.body) {
    res.end();
    return;
  }
  const sse = response.headers.get('content-type')?.startsWith('text/event-stream') ?? false;
  if (sse) openStreams++;
  const reader = response.body.getReader();
  // The client (here: the gateway) closing the connection cancels the exchange.
  res.once('close', () => void reader.cancel().catch(() => undefined));
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done || res.destroyed) break;
      res.write(value);
    }
    res.end();
  } catch {
    res.destroy();
  } finally {
    if (sse) openStreams--;
  }
}

listenChild('v2 replica', id, Number(values.port), serve);
