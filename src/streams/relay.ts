/**
 * A replica's response body relayed to the client as it arrives: nothing is buffered beyond what
 * the socket has not taken yet (backpressure pauses the replica), the client's response ends when
 * the replica's does, and the replica's request is closed when the client goes away.
 *
 * `Channel` is that mechanism, once: reads in order, writes with backpressure, settles once.
 * `relay()` passes the bytes as they are; pipe.ts passes SSE bodies through the rewriter, and may
 * go on reading with no client attached (a held stream, CONTRACT.md §8 J2) until another attaches.
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

/** What a channel's user does with each part of the replica's body, and with either side's end. */
export interface ChannelSteps {
  /** Everything readable now, in one chunk. Returns false to stop reading (settled, or waiting for 'drain'). */
  read(chunk: Buffer): boolean | Promise<boolean>;
  /** The replica's body ended; everything it sent was read before. */
  end(): void | Promise<void>;
  /** The replica's body failed. */
  error(): void | Promise<void>;
  /** The client's response closed: finished, or the client went away. */
  close(): void;
}

export class Channel<End extends string> {
  readonly done: Promise<End>;
  #settled = false;
  /** The client's response has begun: settling ends it (unless the client is gone). */
  #responding = false;
  #waitingForDrain = false;
  #resolve!: (how: End) => void;
  #steps: ChannelSteps | undefined;
  /** Reads, the end and errors are handled strictly in order (see run). */
  #queue = Promise.resolve();
  /** The client's response; undefined while none is attached (a held stream). */
  #res: ServerResponse | undefined;

  constructor(
    private readonly body: Readable,
    res: ServerResponse,
    /** Runs once when the channel settles, before anything is closed. */
    private readonly onSettle: () => void = () => {},
  ) {
    this.#res = res;
    this.done = new Promise<End>((resolve) => (this.#resolve = resolve));
  }

  get settled(): boolean {
    return this.#settled;
  }

  /** The client's response, undefined while none is attached. */
  get client(): ServerResponse | undefined {
    return this.#res;
  }

  /** From now on, settling ends the client's response. */
  respond(): void {
    this.#responding = true;
  }

  /**
   * Settles once: the replica's body is destroyed (closing its request tells it the stream is
   * over; a no-op once it ended), and the client's response ends unless the client went away.
   */
  settle(how: End): void {
    if (this.#settled) return;
    this.#settled = true;
    this.onSettle();
    this.body.destroy();
    const res = this.#res;
    if (res && this.#responding && how !== 'client_gone' && !res.writableEnded) res.end();
    this.#resolve(how);
  }

  /**
   * Writes `bytes` to the client. False when the socket's buffer is full: reading stops and goes
   * on once it has drained, so that a client that does not read holds the replica back.
   */
  write(bytes: Buffer): boolean {
    const res = this.#res;
    if (bytes.length === 0 || res === undefined || res.write(bytes)) return true;
    this.#waitingForDrain = true;
    res.once('drain', () => {
      if (this.#res === res) this.#readOn();
    });
    return false;
  }

  /** The client went away and the stream goes on: what it sends goes nowhere until a client attaches. */
  detach(): void {
    this.#res = undefined;
    this.#readOn();
  }

  /**
   * A client takes the stream over; its response has begun (the caller wrote its status line and
   * what it replayed). Settling ends it; its backpressure holds the replica back from now on.
   */
  attach(res: ServerResponse): void {
    this.detach();
    this.#res = res;
    this.#responding = true;
    this.#watchClose(res);
  }

  /** Runs `step` between two reads, in order with them (a step must not reject). */
  between(step: () => Promise<void>): void {
    this.#inOrder(step);
  }

  /** Wires the body's and the response's events to `steps`. */
  run(steps: ChannelSteps): void {
    this.#steps = steps;
    // A Readable emits 'end' as soon as it handed out its last data, while that data may still be
    // on its way through an asynchronous read step: the end waits its turn.
    this.body.on('readable', () => this.#inOrder(this.#readAll));
    this.body.once('end', () => this.#inOrder(() => steps.end()));
    this.body.on('error', () => this.#inOrder(() => steps.error()));
    if (this.#res) this.#watchClose(this.#res);
  }

  /** Only the client attached now counts: one replaced by another has no say any more. */
  #watchClose(res: ServerResponse): void {
    res.once('close', () => {
      if (this.#res === res) this.#steps!.close();
    });
  }

  #readOn(): void {
    if (!this.#waitingForDrain) return;
    this.#waitingForDrain = false;
    this.#inOrder(this.#readAll);
  }

  readonly #readAll = async (): Promise<void> => {
    while (!this.#settled && !this.#waitingForDrain) {
      const chunk = this.body.read() as Buffer | null;
      if (chunk === null) return;
      if (!(await this.#steps!.read(chunk))) return;
    }
  };

  #inOrder(step: () => void | Promise<void>): void {
    this.#queue = this.#queue.then(step);
  }
}

export function relay(body: Readable, res: ServerResponse): Relay<RelayEnd> {
  const channel = new Channel<RelayEnd>(body, res);
  channel.respond();
  channel.run({
    read: (chunk) => channel.write(chunk),
    end: () => channel.settle('upstream_end'),
    error: () => channel.settle('upstream_error'),
    close: () => channel.settle(res.writableFinished ? 'upstream_end' : 'client_gone'),
  });
  return { end: () => channel.settle('gateway_end'), done: channel.done };
}
