/**
 * keepInstanceAlive for Redis (docs/journal.md#instance-liveness): the renewals run on a thread of
 * their own (liveness-thread.ts) with a connection of their own, so that neither the instance's
 * event loop nor the queue of record writes on the store's connection delays them. This side
 * beats every period, telling the thread that the loop still runs.
 */
import { Worker } from 'node:worker_threads';
import type { InstanceLiveness, LivenessOptions } from '../types.js';
import type { ConnectionOptions } from './connection.js';

/** What the thread is started with. */
export interface LivenessThreadData {
  connection: ConnectionOptions;
  key: string;
  ttlMs: number;
  everyMs: number;
  maxStallMs: number;
}

/** To the thread: the loop runs ('beat'), or stop and withdraw. */
export type ToLiveness = 'beat' | 'stop';

/** `connection`: plain settings, nothing a thread cannot be given (no functions). */
export function keepAliveOnThread(connection: ConnectionOptions, key: string, options: LivenessOptions): InstanceLiveness {
  const data: LivenessThreadData = { connection, key, ttlMs: options.ttlMs, everyMs: options.everyMs, maxStallMs: options.maxStallMs };
  const thread = new Worker(new URL('./liveness-thread.js', import.meta.url), { workerData: data });
  // Its messages must not keep a stopping process alive.
  thread.unref();
  thread.on('message', (message: { lateMs: number }) => options.renewed(message.lateMs));
  thread.on('error', () => undefined);
  const beat = setInterval(() => thread.postMessage('beat' satisfies ToLiveness), options.everyMs);
  beat.unref();
  const exited = new Promise<void>((resolve) => thread.once('exit', () => resolve()));
  return {
    stop: async () => {
      clearInterval(beat);
      thread.postMessage('stop' satisfies ToLiveness);
      await exited;
    },
  };
}
