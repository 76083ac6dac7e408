/** The orchestrator's handle on the load generator process (bench/load.ts). */
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { spawnProcess } from '../../test/helpers/processes.js';
import type { Job } from '../load.js';

const LOAD = fileURLToPath(new URL('../load.js', import.meta.url));

type Reply = { id: number; result?: unknown; error?: string } | { mark: 'start' | 'end' };

export class LoadClient {
  readonly #proc: ChildProcess;
  #nextId = 1;
  readonly #waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  #onMark: ((which: 'start' | 'end') => void) | undefined;

  constructor() {
    // Killed when the run ends, however it ends.
    this.#proc = spawnProcess(process.execPath, [LOAD], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }).child;
    this.#proc.on('message', (message: Reply) => {
      if ('mark' in message) {
        this.#onMark?.(message.mark);
        return;
      }
      const waiter = this.#waiting.get(message.id);
      this.#waiting.delete(message.id);
      if (message.error !== undefined) waiter?.reject(new Error(message.error));
      else waiter?.resolve(message.result);
    });
    this.#proc.once('exit', (code) => {
      for (const waiter of this.#waiting.values()) waiter.reject(new Error(`the load generator exited with ${code}`));
      this.#waiting.clear();
    });
  }

  get pid(): number {
    return this.#proc.pid ?? 0;
  }

  /**
   * Runs one job; `onMark` is called at the edges of its measured window (the orchestrator samples
   * the proxy there, and the job waits for nothing meanwhile, so `onMark` should be quick).
   */
  run<R>(job: Job, onMark?: (which: 'start' | 'end') => void): Promise<R> {
    const id = this.#nextId++;
    this.#onMark = onMark;
    return new Promise<R>((resolve, reject) => {
      this.#waiting.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.#proc.send({ id, job });
    });
  }

  close(): void {
    this.#proc.kill('SIGKILL');
  }
}
