/**
 * Client -> gateway -> replica on real loopback sockets, for the parts of the gateway that move a
 * response body from the replica to the client (src/streams/relay.ts, src/streams/pipe.ts). The replica's
 * response is written by the test; the "gateway" is a bare HTTP server whose handler fetches from
 * the replica with node:http and hands the body and the client's response to the code under
 * test; the client is node:http too, so that it can stop reading (backpressure) or go away.
 */
import { once } from 'node:events';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Readable } from 'node:stream';
import type { Teardown } from './processes.js';

/** The replica's side of one request: what the test writes, and when the gateway closed it. */
export interface ReplicaSide {
  readonly res: ServerResponse;
  /** Resolves when the connection from the gateway closed (it went away or the response ended). */
  readonly closed: Promise<void>;
}

/** The client's side: the response from the gateway, its bytes so far, and its end. */
export interface ClientSide {
  readonly res: IncomingMessage;
  /** Everything received so far, as text. */
  text(): string;
  /** Resolves with everything received once the response ended or was cut (`aborted` says which). */
  readonly ended: Promise<{ body: string; aborted: boolean }>;
  /** Resolves once the text received so far includes `what`. */
  seen(what: string): Promise<void>;
  /** Stops reading: the gateway's writes back up (TCP flow control). */
  pause(): void;
  resume(): void;
  /** Goes away: destroys the connection. */
  destroy(): void;
}

export interface Chain<T> {
  readonly replica: ReplicaSide;
  /** Resolves once the gateway sent its response head. */
  readonly client: Promise<ClientSide>;
  /** What the gateway's handler returned (a Relay, say). */
  readonly handled: T;
  /** The gateway's response object, to look at what it holds in memory. */
  readonly gatewayRes: ServerResponse;
}

async function listen(t: Teardown, server: Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  return (server.address() as AddressInfo).port;
}

/**
 * Sets up the three parties and one request through them. `replicaHead` answers the gateway's
 * request (status and headers, flushed at once); `handle` runs in the gateway with the replica's
 * body and the client's response.
 */
export async function startChain<T>(
  t: Teardown,
  replicaHead: (res: ServerResponse) => void,
  handle: (body: Readable, res: ServerResponse) => T,
): Promise<Chain<T>> {
  let replica!: ReplicaSide;
  const replicaServer = createServer((req, res) => {
    req.resume();
    replicaHead(res);
    res.flushHeaders();
    replica = { res, closed: once(res, 'close').then(() => undefined) };
  });
  const replicaPort = await listen(t, replicaServer);

  let handled!: T;
  let gatewayRes!: ServerResponse;
  let ready!: () => void;
  let failed!: (err: Error) => void;
  const gatewayReady = new Promise<void>((resolve, reject) => {
    ready = resolve;
    failed = reject;
  });
  const gateway = createServer((_req, res) => {
    gatewayRes = res;
    const upstream = request({ host: '127.0.0.1', port: replicaPort, path: '/', agent: false }, (body) => {
      handled = handle(body, res);
      ready();
    });
    upstream.on('error', failed);
    upstream.end();
  });
  const gatewayPort = await listen(t, gateway);

  const client = new Promise<ClientSide>((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: gatewayPort, path: '/', agent: false }, (res) => resolve(clientSide(req, res)));
    req.on('error', reject);
    t.teardown(() => req.destroy());
    req.end();
  });
  // A failed request surfaces through `client` when the test awaits it.
  client.catch(() => undefined);
  await gatewayReady;
  return { replica, client, handled, gatewayRes };
}

function clientSide(req: ReturnType<typeof request>, res: IncomingMessage): ClientSide {
  let received = '';
  const waiters: { what: string; resolve: () => void }[] = [];
  res.setEncoding('utf8');
  res.on('data', (chunk: string) => {
    received += chunk;
    for (const w of waiters.splice(0)) {
      if (received.includes(w.what)) w.resolve();
      else waiters.push(w);
    }
  });
  // An error on a cut response is how it ends, not a failure of the test.
  res.on('error', () => undefined);
  req.on('error', () => undefined);
  const ended = new Promise<{ body: string; aborted: boolean }>((resolve) => {
    res.once('end', () => resolve({ body: received, aborted: false }));
    res.once('close', () => resolve({ body: received, aborted: !res.complete }));
  });
  return {
    res,
    text: () => received,
    ended,
    seen: (what) =>
      received.includes(what)
        ? Promise.resolve()
        : new Promise<void>((resolve, reject) => {
            waiters.push({ what, resolve });
            void ended.then(({ body }) => {
              if (!body.includes(what)) reject(new Error(`the response ended without ${JSON.stringify(what)}: ${JSON.stringify(body.slice(-500))}`));
            });
          }),
    pause: () => res.pause(),
    resume: () => res.resume(),
    destroy: () => req.destroy(),
  };
}

/** The replica writing as fast as the gateway takes it, in order, up to a total. */
export interface Flood {
  /** Bytes handed to the replica's socket so far. */
  readonly written: number;
  /** Whether the last write filled the replica's buffers and it waits for 'drain'. */
  readonly blocked: boolean;
  /** Resolves once every chunk was written and the response ended. */
  readonly finished: Promise<void>;
}

/**
 * Writes `count` chunks made by `chunk(i)` on the replica's response, respecting its backpressure
 * (waiting for 'drain' when a write returns false), then ends it.
 */
export function flood(res: ServerResponse, count: number, chunk: (i: number) => string): Flood {
  const state = { written: 0, blocked: false, finished: Promise.resolve() };
  state.finished = (async () => {
    for (let i = 0; i < count; i++) {
      const text = chunk(i);
      state.written += Buffer.byteLength(text);
      if (!res.write(text)) {
        state.blocked = true;
        const closed = await new Promise<boolean>((resolve) => {
          const onDrain = () => {
            res.off('close', onClose);
            resolve(false);
          };
          const onClose = () => {
            res.off('drain', onDrain);
            resolve(true);
          };
          res.once('drain', onDrain);
          res.once('close', onClose);
        });
        if (closed) throw new Error(`the replica's response closed after ${state.written} bytes`);
        state.blocked = false;
      }
    }
    res.end();
  })();
  state.finished.catch(() => undefined);
  return state;
}

/**
 * True once the gateway stopped taking the replica's body: its read buffer is full, so node no
 * longer reads from the socket and TCP holds the replica back.
 */
export function stoppedReading(body: Readable): boolean {
  return body.readableLength >= body.readableHighWaterMark;
}
