/**
 * An MCP server that does what the MCP authorization rules ask of a server, run as a child process
 * by auth-replicas.ts: the SDK's Streamable HTTP transport (no event log, as by default) behind the
 * SDK's own bearer middleware (`requireBearerAuth`), every session bound to the user of its
 * `initialize`. A request without a valid token gets 401 with its `WWW-Authenticate`; one with
 * another user's token, for a session, gets 403. The tokens are AUTH_TOKENS (auth-replicas.ts).
 * Prints one JSON line `{"event":"listening",...}` when ready.
 *
 * Tools: `emit` (count logging notifications {seq} on the session's GET stream, intervalMs apart)
 * and `progress` (steps progress notifications on the call's own stream, then `done`).
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AuthInfo } from '@modelcontextprotocol/sdk/server/auth/types.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import { InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';
import { AUTH_TOKENS } from './auth-tokens.js';
import { listenChild } from './child-server.js';

const { values } = parseArgs({ options: { id: { type: 'string' }, port: { type: 'string', default: '0' } } });
const id = values.id ?? 'auth';

const sessions = new Map<string, { transport: StreamableHTTPServerTransport; user: string }>();

function mcpServer(): McpServer {
  const mcp = new McpServer({ name: `auth-replica-${id}`, version: '1.0.0' }, { capabilities: { logging: {} } });
  mcp.registerTool(
    'emit',
    { description: 'count logging notifications on the GET stream', inputSchema: { count: z.number().int().min(1).max(1000), intervalMs: z.number().int().min(0).max(1000) } },
    async ({ count, intervalMs }, extra) => {
      for (let seq = 1; seq <= count; seq++) {
        if (seq > 1) await delay(intervalMs);
        await mcp.sendLoggingMessage({ level: 'info', logger: 'emit', data: { seq } }, extra.sessionId);
      }
      return { content: [{ type: 'text', text: `emitted ${count}` }] };
    },
  );
  mcp.registerTool(
    'progress',
    { description: 'steps progress notifications on this call, then done', inputSchema: { steps: z.number().int().min(1).max(1000), intervalMs: z.number().int().min(0).max(1000) } },
    async ({ steps, intervalMs }, extra) => {
      const progressToken = extra._meta?.progressToken;
      for (let step = 1; step <= steps; step++) {
        await delay(intervalMs);
        if (progressToken !== undefined) await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress: step, total: steps } });
      }
      return { content: [{ type: 'text', text: `done after ${steps} steps` }] };
    },
  );
  return mcp;
}

const verifier = {
  async verifyAccessToken(token: string) {
    const user = AUTH_TOKENS[token];
    if (user === undefined) throw new InvalidTokenError('unknown token');
    return { token, clientId: user, scopes: [], expiresAt: Math.floor(Date.now() / 1000) + 3600 };
  },
};
const bearer = requireBearerAuth({ verifier });

/** The middleware as an Express app would run it: the few response methods it uses, on node:http. */
function authenticate(req: IncomingMessage & { auth?: AuthInfo }, res: ServerResponse): Promise<boolean> {
  const express = Object.assign(res, {
    set: (name: string, value: string) => (res.setHeader(name, value), express),
    status: (code: number) => ((res.statusCode = code), express),
    json: (body: unknown) => (res.setHeader('content-type', 'application/json'), res.end(JSON.stringify(body)), express),
  });
  return new Promise((resolve) => {
    void (bearer as unknown as (req: unknown, res: unknown, next: () => void) => Promise<void>)(req, express, () => resolve(true)).then(() => resolve(false));
  });
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  if (req.method !== 'POST') return undefined;
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

listenChild('auth replica', id, Number(values.port), async (req: IncomingMessage & { auth?: AuthInfo }, res) => {
  if (!(await authenticate(req, res))) return;
  const user = req.auth!.clientId;
  const body = await readJson(req);
  const sessionId = req.headers['mcp-session-id'];
  if (typeof sessionId === 'string') {
    const session = sessions.get(sessionId);
    if (session === undefined) {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }));
      return;
    }
    if (session.user !== user) {
      res
        .writeHead(403, { 'content-type': 'application/json', 'www-authenticate': 'Bearer error="insufficient_scope", error_description="the session belongs to another user"' })
        .end(JSON.stringify({ error: 'insufficient_scope', error_description: 'the session belongs to another user' }));
      return;
    }
    await session.transport.handleRequest(req, res, body);
    return;
  }
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    onsessioninitialized: (sid) => {
      sessions.set(sid, { transport, user });
    },
  });
  transport.onclose = () => {
    if (transport.sessionId !== undefined) sessions.delete(transport.sessionId);
  };
  await mcpServer().connect(transport);
  await transport.handleRequest(req, res, body);
});
