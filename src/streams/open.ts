/**
 * The SSE streams open right now (sse-streams.ts registers each), by owning replica, so that
 * shutdown and reloads can end them, and by session and incarnation where they have one, so that
 * the admin listener can show a session's streams on this instance.
 */
import type { SsePipe } from './pipe.js';

export class OpenStreams {
  readonly #open = new Map<SsePipe, string>();
  readonly #incarnations = new Map<SsePipe, { readonly sessionId: string; readonly incarnation: string }>();
  #draining = false;
  #idle: (() => void)[] = [];

  add(stream: SsePipe, replica: string, of?: { readonly sessionId: string; readonly incarnation: string }): void {
    this.#open.set(stream, replica);
    if (of) this.#incarnations.set(stream, { sessionId: of.sessionId, incarnation: of.incarnation });
    void stream.done.then(() => {
      this.#open.delete(stream);
      this.#incarnations.delete(stream);
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

  /** The streams of one session open on this instance. */
  ofSession(sessionId: string): { incarnation: string; replica: string }[] {
    const found: { incarnation: string; replica: string }[] = [];
    for (const [stream, of] of this.#incarnations) {
      if (of.sessionId === sessionId) found.push({ incarnation: of.incarnation, replica: this.#open.get(stream) ?? '' });
    }
    return found;
  }

  get size(): number {
    return this.#open.size;
  }

  /** Ends every open stream, or those of the given replicas. */
  end(replicas?: ReadonlySet<string>): void {
    for (const [stream, replica] of this.#open) if (!replicas || replicas.has(replica)) stream.end();
  }
}
