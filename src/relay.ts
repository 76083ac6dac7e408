/**
 * Relays a replica's response body to the client as it arrives: nothing is buffered beyond what
 * the socket has not taken yet (backpressure pauses the replica), the client's response ends when
 * the replica's does, and the replica's request is closed when the client goes away. SSE bodies
 * go through src/sse/pipe.ts instead, which rewrites their ids on the way.
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';

export type RelayEnd = 'upstream_end' | 'upstream_error' | 'client_gone' | 'gateway_end';

export interface Relay<End extends string = string> {
  /** Ends the client's stream on purpose (shutdown, reload): the client reconnects. */
  end(): void;
  /** Resolves with how the stream ended. */
  readonly done: Promise<End>;
}

export function relay(body: Readable, res: ServerResponse): Relay<RelayEnd> {
  let finish!: (how: RelayEnd) => void;
  const done = new Promise<RelayEnd>((resolve) => {
    let settled = false;
    finish = (how) => {
      if (settled) return;
      settled = true;
      body.off('data', onData);
      res.off('drain', onDrain);
      if (how === 'client_gone') {
        body.destroy();
      } else {
        // Closing the replica's side first (no-op when it ended) tells it the stream is over.
        body.destroy();
        if (!res.writableEnded) res.end();
      }
      resolve(how);
    };
  });

  const onDrain = () => body.resume();
  const onData = (chunk: Buffer) => {
    if (!res.write(chunk)) {
      body.pause();
      res.once('drain', onDrain);
    }
  };
  body.on('data', onData);
  body.once('end', () => finish('upstream_end'));
  body.on('error', () => finish('upstream_error'));
  res.once('close', () => finish(res.writableFinished ? 'upstream_end' : 'client_gone'));

  return { end: () => finish('gateway_end'), done };
}

/** The streams open right now, by owning replica, so that shutdown and reloads can end them. */
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
