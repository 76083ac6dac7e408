/**
 * A round-robin TCP balancer in front of the gateway instances, the topology where a reconnect
 * lands on another instance. It can cut every open connection at once, and a test can choose
 * where the next connections go.
 */
import { once } from 'node:events';
import { createServer, type Socket } from 'node:net';
import { splice } from '../../demo/src/relay.js';
import type { Teardown } from './gateway.js';

export interface Balancer {
  /** Base URL with the MCP path, e.g. http://127.0.0.1:40123/mcp */
  url: string;
  /** Destroys every open connection on both sides (like a load balancer restart). */
  cut(): void;
  /** From now on, new connections go to backends[index] only; undefined: round robin again. */
  pin(index: number | undefined): void;
  /**
   * From now on, new connections are accepted but wait, connected to no backend and their bytes
   * unread, until resume(): a client that reconnects is kept waiting for as long as a test needs.
   */
  pause(): void;
  /** Connects the waiting connections (to their backends, in order) and new ones at once again. */
  resume(): void;
  /** Connections accepted so far, by backend index. */
  readonly accepted: number[];
  /** Refuses from now on: the listener closes and every connection, waiting or not, is destroyed. */
  stop(): Promise<void>;
}

export async function startBalancer(t: Teardown, backends: readonly string[], path = '/mcp'): Promise<Balancer> {
  const targets = backends.map((b) => new URL(b));
  const open = new Set<Socket>();
  const accepted = targets.map(() => 0);
  let next = 0;
  let pinned: number | undefined;
  let waiting: (() => void)[] | undefined;
  const server = createServer((client) => {
    if (waiting === undefined) forward(client);
    else {
      open.add(client);
      client.once('close', () => open.delete(client));
      client.on('error', () => undefined);
      waiting.push(() => {
        if (!client.destroyed) forward(client);
      });
    }
  });
  const forward = (client: Socket): void => {
    const index = pinned ?? next++ % targets.length;
    accepted[index]!++;
    splice(client, targets[index]!, open);
  };
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  const stop = async () => {
    waiting = undefined;
    for (const socket of open) socket.destroy();
    // Closed once: a second close (the teardown after stop) only reports it was.
    await new Promise((resolve) => server.close(resolve));
  };
  t.teardown(stop);
  return {
    url: `http://127.0.0.1:${port}${path}`,
    cut: () => {
      for (const socket of open) socket.destroy();
    },
    pin: (index) => {
      pinned = index;
    },
    pause: () => {
      waiting ??= [];
    },
    resume: () => {
      const queued = waiting ?? [];
      waiting = undefined;
      for (const connect of queued) connect();
    },
    accepted,
    stop,
  };
}
