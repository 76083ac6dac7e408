/**
 * Reads an SSE body and hands out its event blocks (blank-line separated) as they arrive, for the
 * load generator and the tests alike. Any async iterable of bytes will do: an undici body, or a
 * fetch Response body.
 */
export class SseBlocks {
  readonly #it: AsyncIterator<Uint8Array>;
  // Decoded as a stream, so that a character split between two chunks stays whole.
  readonly #decoder = new TextDecoder();
  #buffer = '';

  constructor(body: AsyncIterable<Uint8Array>) {
    this.#it = body[Symbol.asyncIterator]();
  }

  /** The next complete event block, or undefined when the stream ended. */
  async next(): Promise<string | undefined> {
    for (;;) {
      const end = this.#buffer.indexOf('\n\n');
      if (end >= 0) {
        const block = this.#buffer.slice(0, end);
        this.#buffer = this.#buffer.slice(end + 2);
        return block;
      }
      const { value, done } = await this.#it.next();
      if (done) return undefined;
      this.#buffer += this.#decoder.decode(value, { stream: true });
    }
  }

  /** Stops reading: the body is cancelled (closing the connection it comes on). */
  async cancel(): Promise<void> {
    await this.#it.return?.();
  }
}
