/**
 * An MCP server of the 2024-11-05 HTTP+SSE transport on the SDK v1 (`SSEServerTransport`), run
 * as a child process by legacy-replicas.ts: `GET /sse` opens a session's stream, whose endpoint
 * event names `POST <messages>?sessionId=` (`--messages`, default /legacy/messages: not the
 * gateway's own path, so that a test sees the gateway learn it). Prints one JSON line
 * `{"event":"listening",...}` when ready. `GET /control/state` answers `{ sessions, posts }`: the
 * sessions open now and the messages posted to this process.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseArgs } from 'node:util';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { listenChild } from './child-server.js';

const { values } = parseArgs({
  options: { id: { type: 'string' }, port: { type: 'string', default: '0' }, messages: { type: 'string', default: '/legacy/messages' } },
});
const id = values.id ?? 'legacy';
const messagesPath = values.messages ?? '/legacy/messages';
const transports = new Map<string, SSEServerTransport>();
let posts = 0;

async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://replica');
  if (req.method === 'GET' && url.pathname === '/control/state') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ sessions: transports.size, posts }));
    return;
  }
  if (req.method === 'GET' && url.pathname === '/sse') {
    const transport = new SSEServerTransport(messagesPath, res);
    transports.set(transport.sessionId, transport);
    res.once('close', () => transports.delete(transport.sessionId));
    const server = new McpServer({ name: `legacy-replica-${id}`, version: '1.0.0' });
    server.registerTool('whoami', { description: 'the id of the replica that answers' }, async () => ({ content: [{ type: 'text', text: id }] }));
    await server.connect(transport);
    return;
  }
  if (req.method === 'POST' && url.pathname === messagesPath) {
    posts++;
    const transport = transports.get(url.searchParams.get('sessionId') ?? '');
    if (!transport) {
      res.writeHead(404).end('unknown session');
      return;
    }
    await transport.handlePostMessage(req, res);
    return;
  }
  res.writeHead(404).end();
}

listenChild('legacy replica', id, Number(values.port), serve);
