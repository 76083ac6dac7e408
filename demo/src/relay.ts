/**
 * A TCP relay in front of the gateway instances: what a load balancer is to a client. The demo cuts
 * its connections for real (the client sees its streams break, as on a network failure) and
 * chooses the instance that the next connections lead to.
 */
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';

export interface Relay {
  /** The relay's MCP endpoint: the gateway's path on the relay's port. */
  readonly url: string;
  /** The instance that new connections lead to. */
  readonly target: string;
  /** New connections lead to `name` (one of the instances given) from now on. */
  lead(name: string): void;
  /** Destroys every open connection, on both sides. */
  cut(): void;
  close(): Promise<void>;
}

/** `instances`: name to MCP endpoint URL; the first one leads at the start. */
export async function startRelay(instances: ReadonlyMap<string, string>, path: string): Promise<Relay> {
  const first = instances.keys().next();
  if (first.done) throw new Error('a relay needs at least one instance');
  let target = first.value;
  const open = new Set<Socket>();
  const server = createServer((client) => splice(client, new URL(instances.get(target)!), open));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  const cut = () => {
    for (const socket of open) socket.destroy();
  };
  return {
    url: `http://127.0.0.1:${port}${path}`,
    get target() {
      return target;
    },
    lead(name) {
      if (!instances.has(name)) throw new Error(`no instance ${name}`);
      target = name;
    },
    cut,
    close: async () => {
      cut();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/**
 * Connects `client` to `to` (its host and port) and relays bytes both ways; either side closing
 * closes the other. Both sockets are in `open` while they are, for a cut.
 */
export function splice(client: Socket, to: URL, open: Set<Socket>): void {
  const upstream = connect(Number(to.port), to.hostname);
  for (const socket of [client, upstream]) {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
    // A cut is the point: its resets are not errors.
    socket.on('error', () => undefined);
  }
  client.pipe(upstream);
  upstream.pipe(client);
  client.once('close', () => upstream.destroy());
  upstream.once('close', () => client.destroy());
}
