/**
 * Storm admission (resumption.admission): at most `maxConcurrent` resumption decisions run at
 * once on an instance, and at most `maxQueued` wait for a turn, each for at most `queueMs`. A
 * decision past the queue, or whose wait ran out, is answered 503 GW_RESUMPTION_BUSY with
 * Retry-After at once, which the SDK clients retry. When thousands of clients reconnect together
 * (a balancer restarted, an instance gone), each admitted decision stays fast instead of all of
 * them sharing one overloaded event loop for a minute, and a lease renewal or an event of an open
 * stream is not queued behind them. A decision lasts until its response's headers leave (the
 * stream that follows is not a decision) or the response ends.
 */

import type { ServerResponse } from 'node:http';

export interface AdmissionLimits {
  readonly maxConcurrent: number;
  readonly maxQueued: number;
  readonly queueMs: number;
}

/** Ends a decision's turn; calling it again does nothing. */
export type Turn = () => void;

interface Waiting {
  readonly admit: (turn: Turn) => void;
  readonly timer: NodeJS.Timeout;
}

export class Admission {
  #running = 0;
  readonly #queue: Waiting[] = [];

  constructor(private readonly limits: () => AdmissionLimits) {}

  /** Decisions running now, and waiting for a turn. */
  get running(): number {
    return this.#running;
  }
  get queued(): number {
    return this.#queue.length;
  }

  /** A turn, at once or after a wait in the queue; undefined when refused (the queue full, or the wait over). */
  enter(): Promise<Turn | undefined> | Turn | undefined {
    const { maxConcurrent, maxQueued, queueMs } = this.limits();
    if (this.#running < maxConcurrent && this.#queue.length === 0) return this.#start();
    if (this.#queue.length >= maxQueued) return undefined;
    return new Promise((resolve) => {
      const waiting: Waiting = {
        admit: resolve,
        timer: setTimeout(() => {
          const at = this.#queue.indexOf(waiting);
          if (at !== -1) this.#queue.splice(at, 1);
          resolve(undefined);
        }, queueMs),
      };
      this.#queue.push(waiting);
    });
  }

  #start(): Turn {
    this.#running += 1;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#running -= 1;
      this.#next();
    };
  }

  /** The longest waiting gets the turn that came free (limits read anew: a reload may have changed them). */
  #next(): void {
    while (this.#queue.length > 0 && this.#running < this.limits().maxConcurrent) {
      const waiting = this.#queue.shift()!;
      clearTimeout(waiting.timer);
      waiting.admit(this.#start());
    }
  }
}

/**
 * Calls `end` once, when `res` sends its headers (whatever sends them: `headers` true) or closes
 * without them (false), whichever comes first.
 */
export function endTurnOnHeaders(res: ServerResponse, end: (headers: boolean) => void): void {
  const writeHead = res.writeHead;
  const done = (headers: boolean) => {
    res.writeHead = writeHead;
    res.off('close', closed);
    end(headers);
  };
  const closed = () => done(false);
  res.writeHead = function (this: ServerResponse, ...args: Parameters<ServerResponse['writeHead']>) {
    done(true);
    return writeHead.apply(this, args);
  } as ServerResponse['writeHead'];
  res.once('close', closed);
}
