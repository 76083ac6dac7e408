/**
 * How late this process's event loop ran, recently: a timer every SAMPLE_MS notes how much later
 * than asked it fired. A probe that got no answer in time while the loop was that late says
 * nothing of the replica (CONTRACT.md §7: health is decided only by what a replica did): its
 * answer may have been waiting in the socket for a loop too busy to read it.
 */

/** How often the loop's lateness is sampled. */
export const SAMPLE_MS = 50;
/** Samples kept: a minute's worth, well past any probe timeout. */
const KEPT = Math.ceil(60_000 / SAMPLE_MS);

export class LoopLag {
  /** [when, how late] of the last KEPT samples, oldest first. */
  readonly #samples: [number, number][] = [];
  readonly #timer: NodeJS.Timeout;
  #expected: number;

  constructor(private readonly now: () => number = () => performance.now()) {
    this.#expected = this.now() + SAMPLE_MS;
    this.#timer = setInterval(() => this.sample(), SAMPLE_MS);
    this.#timer.unref();
  }

  /** Records one sample now (the timer's; tests call it with a clock of their own). */
  sample(): void {
    const at = this.now();
    this.#samples.push([at, Math.max(0, at - this.#expected)]);
    if (this.#samples.length > KEPT) this.#samples.shift();
    this.#expected = at + SAMPLE_MS;
  }

  /** The latest the loop ran between `from` and now, as far as the samples taken since tell (ms). */
  maxSince(from: number): number {
    let max = 0;
    for (let i = this.#samples.length - 1; i >= 0; i--) {
      const [at, late] = this.#samples[i]!;
      // A sample taken after `from` covers the wait that ended with it, which may have begun before.
      if (at < from) break;
      if (late > max) max = late;
    }
    return max;
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}
