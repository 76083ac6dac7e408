/**
 * How one store operation runs on the client: after a connection attempt in flight settles,
 * bounded by one deadline, and failing as StoreError whatever went wrong.
 */

import type { Cluster, Redis } from 'ioredis';
import { StoreError } from '../../errors.js';
import type { ConnectionOptions } from './connection.js';

/**
 * Bounds a whole operation, whatever ioredis does inside it: a cluster follows MOVED and ASK
 * with one command timeout per hop, and a script it has to load (NOSCRIPT) takes two commands.
 */
async function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    // After the event loop stalled (a GC pause, a burst of work), Node runs expired timers before
    // it reads the sockets: a reply that already arrived would lose to its own deadline. The
    // rejection waits for the next check phase, after the sockets were read.
    timer = setTimeout(() => setImmediate(() => reject(new Error(`no reply within ${ms} ms`))), ms);
  });
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}

/** Events that end a connection attempt, one way or the other. */
const SETTLED_EVENTS = ['ready', 'close', 'end'] as const;

/** Runs one operation named `op` (the name its StoreError carries). */
export type Runner = <T>(op: string, command: () => Promise<T>) => Promise<T>;

export function createRunner(client: Redis | Cluster, opts: Pick<ConnectionOptions, 'cluster' | 'commandTimeoutMs'>): Runner {
  let attempt: Promise<void> | null = null;
  const cluster = opts.cluster ? (client as Cluster) : undefined;

  /**
   * Without an offline queue, a command sent while a connection is being set up would fail even
   * though it is about to be ready (the first command after start-up, for one). So a command
   * waits for a connection attempt in flight, up to one command timeout; at any other time it goes
   * out at once, and fails at once if there is no connection.
   */
  function attemptSettled(): Promise<void> {
    if (client.status !== 'connecting' && client.status !== 'connect') return Promise.resolve();
    attempt ??= new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        for (const event of SETTLED_EVENTS) client.off(event, done);
        attempt = null;
        resolve();
      };
      const timer = setTimeout(done, opts.commandTimeoutMs);
      for (const event of SETTLED_EVENTS) client.once(event, done);
    });
    return attempt;
  }

  return async function run<T>(op: string, command: () => Promise<T>): Promise<T> {
    try {
      await attemptSettled();
      // The cluster's own queue (see connection.ts) is for its node connections, never for callers.
      if (cluster && cluster.status !== 'ready') throw new Error(`the cluster connection is ${cluster.status}`);
      return await withDeadline(command(), opts.commandTimeoutMs);
    } catch (cause) {
      throw new StoreError(op, { cause });
    }
  };
}
