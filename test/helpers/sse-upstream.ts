/**
 * A minimal MCP-shaped upstream whose SSE stream the test drives event by event: initialize gets a
 * session id, a GET opens a stream on which `emit` writes exactly when the test says so. As the
 * SDK's server does by default, a GET while the session's GET stream is open is answered 409; a
 * test that needs a replica serving several at once asks for it (`secondGet: 'concurrent'`).
 */
import { once } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import type { Teardown } from './gateway.js';
import { listenOnLoopback } from './http.js';

export interface ScriptedStream {
  emit(chunk: string): void;
  end(): void;
  /** Resolves when the gateway closes its request to this upstream. */
  closed: Promise<void>;
}

export interface ScriptedUpstream {
  url: string;
  /** Resolves with the next GET stream the gateway opens. */
  nextStream(): Promise<ScriptedStream>;
}

export interface ScriptedOptions {
  /** A GET while one is open: '409' as the SDK's server (the default), or another stream. */
  readonly secondGet?: '409' | 'concurrent';
}

export async function startScriptedUpstream(t: Teardown, sessionId = 'scripted-session', options: ScriptedOptions = {}): Promise<ScriptedUpstream> {
  const waiting: ((s: ScriptedStream) => void)[] = [];
  const ready: ScriptedStream[] = [];
  let open = 0;
  const server = createServer((req, res) => {
    if (req.method === 'POST') {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': sessionId });
      res.end('{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"scripted","version":"1"}}}');
      return;
    }
    if (req.headers['mcp-session-id'] !== sessionId) {
      // The gateway's health probe, or a stray request: answered as an SDK server would.
      res.writeHead(400, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request"}}');
      return;
    }
    if (open > 0 && options.secondGet !== 'concurrent') {
      res.writeHead(409, { 'content-type': 'application/json' });
      res.end('{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Conflict: Only one SSE stream is allowed per session"}}');
      return;
    }
    open++;
    res.once('close', () => open--);
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.flushHeaders();
    const stream = scripted(res);
    const waiter = waiting.shift();
    if (waiter) waiter(stream);
    else ready.push(stream);
  });
  const port = await listenOnLoopback(t, server);
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    nextStream: () => {
      const stream = ready.shift();
      return stream ? Promise.resolve(stream) : new Promise((resolve) => waiting.push(resolve));
    },
  };
}

function scripted(res: ServerResponse): ScriptedStream {
  return {
    emit: (chunk) => res.write(chunk),
    end: () => res.end(),
    closed: once(res, 'close').then(() => undefined),
  };
}

/** Reads an SSE body and hands out complete events (blank-line separated blocks) as they arrive. */
export { SseBlocks as SseReader } from '../../bench/lib/sse-blocks.js';
