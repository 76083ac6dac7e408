/**
 * What the SSE pipe (pipe.ts) is given, what it answers, and the state its parts share: the start
 * (pipe-start.ts), the events (pipe-events.ts), the end (pipe-end.ts) and the client's leaving
 * (pipe-hold.ts).
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { Channel, type Relay } from './relay.js';
import type { EndReason, SseRewriter } from '../sse/rewriter.js';

export type PipeEnd =
  | 'upstream_end'
  | 'upstream_error'
  | 'client_gone'
  | 'gateway_end'
  | 'not_verified'
  /** J2: a held POST stream whose awaited responses have all passed. */
  | 'hold_answered'
  /** J2: a held GET stream whose hold period ended. */
  | 'hold_expired'
  /** J2: a held stream let go before its time (the cap on held streams, a newer GET of its session). */
  | 'hold_released'
  | EndReason;

/** J2: what the pipe tells whoever keeps its held streams. */
export interface HoldOptions {
  /** POST streams: held until every awaited response has passed; GET streams until released. */
  readonly untilAnswered: boolean;
  /** The client went away: the stream is held from now on. */
  onHeld(): void;
  /** A client attached to the held stream. */
  onAttached(): void;
}
export type VerifyFailure = EndReason | 'timeout' | 'too_large' | 'upstream_end' | 'upstream_error' | 'client_gone';

export interface SsePipeOptions {
  body: Readable;
  res: ServerResponse;
  rewriter: SseRewriter;
  /**
   * Sets the client's status line and headers (res.writeHead), once, before the first byte of the
   * stream; the pipe sends them, with the first events when those are already there.
   */
  start: () => void;
  onEvents: (count: number) => void;
  /** Sent as `retry:` when the gateway ends the stream on purpose, before the end. */
  retryHintMs: number;
  /** For continuations: bounds on the held replay, and what to do when it fails. */
  verify?: { timeoutMs: number; maxBytes: number; onFailed: (why: VerifyFailure) => void };
  /** J2: hold the stream when its client goes away, once it has begun. */
  hold?: HoldOptions;
  /**
   * The replica's stream ended (or failed) after the client's began: awaited before the client's
   * response ends, so that what the client does next (a resumption, at once) finds the store and
   * the fleet knowing it. Must not reject.
   */
  beforeEnd?: (how: 'upstream_end' | 'upstream_error') => Promise<void>;
}

export interface SsePipe extends Relay<PipeEnd> {
  /**
   * Shutdown: ends the stream once no call is in flight on it (the rewriter's awaited responses
   * have passed), at once when none is (CONTRACT.md §1).
   */
  drain(): void;
  /** True while no client is attached (J2). */
  readonly held: boolean;
  /** The last position whose event went to the client (or, held, nowhere): the next one follows it. */
  readonly delivered: number;
  /**
   * J3: a client takes the begun stream over (a held one, or one whose earlier client the gateway
   * has not seen go yet, which is ended). Its response has begun and it was sent every event up
   * to `delivered`. False when the stream has ended.
   */
  attach(res: ServerResponse): boolean;
  /** J2: ends a held stream (its hold is over). */
  release(how: 'hold_expired' | 'hold_released'): void;
  /**
   * Runs `step` between two reads of the replica's body (a step must not reject). Once that body
   * has ended (or failed) no read follows, and neither does a step: a lease renewed then would
   * outlive the stream (J3).
   */
  between(step: () => Promise<void>): void;
}

/** One pipe's state, shared by its parts; each part changes only what it owns (named beside it). */
export interface PipeState {
  readonly options: SsePipeOptions;
  readonly rewriter: SseRewriter;
  readonly channel: Channel<PipeEnd>;
  /** The client's response has begun (pipe-start.ts). */
  started: boolean;
  /** Bytes of the stream have been written to the client, so its headers went with them. */
  written: boolean;
  /** A continuation's output held back until its replay is verified (pipe-start.ts). */
  unverified: { chunks: Buffer[]; bytes: number; events: number };
  /** The bound in time of the verification (pipe-start.ts). */
  timer: NodeJS.Timeout | undefined;
  /** Shutting down: the stream ends once no call is in flight on it (pipe-end.ts). */
  draining: boolean;
  /** No client is attached (pipe-hold.ts). */
  held: boolean;
  /** The replica's body ended or failed: what remains is its end (pipe-end.ts). */
  over: boolean;
  /** The last position whose event went to the client (pipe-events.ts, pipe-start.ts). */
  delivered: number;
}

/** A pipe's state before its start: its channel over the replica's body and the client's response. */
export function pipeState(options: SsePipeOptions): PipeState {
  const channel = new Channel<PipeEnd>(options.body, options.res, () => clearTimeout(state.timer));
  const state: PipeState = {
    options,
    rewriter: options.rewriter,
    channel,
    started: false,
    written: false,
    unverified: { chunks: [], bytes: 0, events: 0 },
    timer: undefined,
    draining: false,
    held: false,
    over: false,
    delivered: options.rewriter.head,
  };
  return state;
}
