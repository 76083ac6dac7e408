/**
 * The floor of any Node.js proxy on this machine, for benchmarks: node:http in front, an undici
 * Pool behind (as the gateway), bodies streamed both ways, nothing else. No routing, no store, no
 * metrics, no cursors: what remains of the gateway's cost above this line is its own work. Bodies
 * are relayed as the gateway relays them (write, pause on backpressure, end).
 *
 *   node build/bench/floor.js --port N --upstream http://127.0.0.1:PORT/mcp
 *
 * prints one JSON line `{"event":"listening","port":...}` on stdout once it listens.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { Pool, type Dispatcher } from 'undici';

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'host', 'content-length', 'te', 'trailer', 'upgrade']);

function endToEnd(headers: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const name in headers) {
    const value = headers[name];
    if (value !== undefined && !HOP_BY_HOP.has(name)) out[name] = value;
  }
  return out;
}

const { values } = parseArgs({ options: { port: { type: 'string', default: '0' }, upstream: { type: 'string' } } });
if (!values.upstream) throw new Error('--upstream URL is required');
const upstream = new URL(values.upstream);
const pool = new Pool(upstream.origin, { connections: 20_000, bodyTimeout: 0, headersTimeout: 0 });

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    pool
      .request({
        method: req.method as Dispatcher.HttpMethod,
        path: upstream.pathname,
        headers: endToEnd(req.headers),
        body: chunks.length > 0 ? Buffer.concat(chunks) : null,
      })
      .then(
        (answer) => {
          res.writeHead(answer.statusCode, endToEnd(answer.headers));
          // An SSE stream's headers leave at once; any other answer's with its body.
          if (String(answer.headers['content-type']).startsWith('text/event-stream')) res.flushHeaders();
          res.once('close', () => answer.body.destroy());
          answer.body.on('data', (chunk: Buffer) => {
            if (!res.write(chunk)) {
              answer.body.pause();
              res.once('drain', () => answer.body.resume());
            }
          });
          answer.body.once('end', () => res.end());
          answer.body.once('error', () => res.destroy());
        },
        () => {
          res.writeHead(502).end();
        },
      );
  });
});
server.keepAliveTimeout = 72_000;
process.once('SIGTERM', () => process.exit(0));
server.listen(Number(values.port), '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ event: 'listening', port: (server.address() as AddressInfo).port })}\n`);
});
