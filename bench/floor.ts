/**
 * The floor of any Node.js proxy on this machine, for benchmarks: node:http in front, an undici
 * Pool behind (as the gateway), bodies streamed both ways, nothing else. No routing, no store, no
 * metrics, no cursors: what remains of the gateway's cost above this line is its own work. Headers
 * are filtered and bodies relayed by the gateway's own code (src/headers.ts, src/streams/relay.ts).
 *
 *   node build/bench/floor.js --port N --upstream http://127.0.0.1:PORT/mcp
 *
 * prints one JSON line `{"event":"listening","port":...}` on stdout once it listens.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { Pool, type Dispatcher } from 'undici';
import { endToEnd } from '../src/headers.js';
import { relay } from '../src/streams/relay.js';
import { isEventStream } from '../src/upstream/index.js';

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
          if (isEventStream(answer)) res.flushHeaders();
          relay(answer.body, res);
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
