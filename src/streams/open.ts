/**
 * The SSE streams open right now (sse-streams.ts registers each), by owning replica, so that
 * shutdown and reloads can end them.
 */
import type { SsePipe } from './pipe.js';

export class OpenStreams {
  readonly #open = new Map<SsePipe, string>();
  #draining = false;
  #idle: (() => void)[] = [];

  add(stream: SsePipe, replica: string): void {
    this.#open.set(stream, replica);
    void stream.done.then(() => {
      this.#open.delete(stream);
      if (this.#open.size === 0) for (const resolve of this.#idle.splice(0)) resolve();
    });
    // A request already forwarded when the shutdown began gets its answer, drained like the rest.
    if (this.#draining) stream.drain();
  }

  /** Shutdown: every stream, open now or later, ends once no call is in flight on it. */
  drain(): void {
    this.#draining = true;
    for (const stream of this.#open.keys()) stream.drain();
  }

  /** Resolves once no stream is open (held ones included, which no client connection shows). */
  idle(): Promise<void> {
    if (this.#open.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  get size(): number {
    return this.#open.size;
  }

  /** Ends every open stream, or those of the given replicas. */
  end(replicas?: ReadonlySet<string>): void {
    for (const [stream, replica] of this.#open) if (!replicas || replicas.has(replica)) stream.end();
  }
}
