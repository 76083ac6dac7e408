/**
 * The two halves of a test server run as a child process (the SDK v2 replica, the HTTP+SSE
 * replica): in the child, an HTTP server on loopback that prints one JSON line
 * `{"event":"listening",...}` when ready; in the test, spawning it and reading that line.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { jsonLine, readyLine, spawnProcess, type Proc, type Teardown } from './processes.js';

/** In the child: serves `serve` on `port` (0: any) and announces it; a failure is a 500. */
export function listenChild(what: string, id: string, port: number, serve: (req: IncomingMessage, res: ServerResponse) => Promise<void>): void {
  const http = createServer((req, res) => {
    serve(req, res).catch((err: unknown) => {
      process.stderr.write(`${what} ${id}: ${String(err)}\n`);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  http.listen(port, '127.0.0.1', () => {
    const address = http.address();
    const bound = typeof address === 'object' && address ? address.port : 0;
    process.stdout.write(`${JSON.stringify({ event: 'listening', id, port: bound, url: `http://127.0.0.1:${bound}/mcp`, pid: process.pid })}\n`);
  });
}

/** In the test: runs `mainJs --id <id>` and waits for its listening line. */
export async function spawnChild(t: Teardown, mainJs: string, what: string, id: string): Promise<{ url: string; origin: string; proc: Proc }> {
  const proc = spawnProcess(process.execPath, [mainJs, '--id', id], { stdio: ['ignore', 'pipe', 'pipe'], t });
  const { url } = await readyLine(proc, `${what} ${id}`, (line) => {
    const entry = jsonLine(line);
    if (entry?.['event'] !== 'listening') throw new Error('not a listening line');
    return { url: String(entry['url']) };
  });
  proc.child.stdout?.resume();
  return { url, origin: new URL(url).origin, proc };
}
