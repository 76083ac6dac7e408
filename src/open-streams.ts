/**
 * The SSE streams open right now (src/streams.ts registers each), by owning replica, so that
 * shutdown and reloads can end them.
 */
import type { Relay } from './relay.js';

export class OpenStreams {
  readonly #open = new Map<Relay, string>();

  add(stream: Relay, replica: string): void {
    this.#open.set(stream, replica);
    void stream.done.then(() => this.#open.delete(stream));
  }

  get size(): number {
    return this.#open.size;
  }

  /** Ends every open stream, or those of the given replicas. */
  end(replicas?: ReadonlySet<string>): void {
    for (const [stream, replica] of this.#open) if (!replicas || replicas.has(replica)) stream.end();
  }
}
