/** Counts the events of a passing SSE stream without holding it up (for the metrics of §6). */
import { SseParser } from './parser.js';

export class SseEventCounter {
  #count = 0;
  readonly #parser: SseParser;

  constructor(maxEventBytes: number) {
    this.#parser = new SseParser(
      (item) => {
        if (item.kind === 'event') this.#count++;
      },
      { maxEventBytes },
    );
  }

  /** Feeds a chunk; returns how many events it completed. */
  push(chunk: Uint8Array): number {
    const before = this.#count;
    this.#parser.push(chunk);
    return this.#count - before;
  }
}
