/**
 * Pipes a replica's SSE body to the client through the rewriter (R5): backpressure from the
 * client's socket, no timeout while open, either side's end ends the other (the reading,
 * backpressure and ending are relay.ts's Channel, as for any other body).
 *
 * Read-ahead: while batches' records are written, the replica is read on: what it sends is parsed,
 * numbered and written out (SseRewriter.prepare) into the next batch. Two batches are committed
 * at a time: the second one's records go to the store while the reply for the first is on its
 * way (pipelined; streams/unrecorded.ts keeps them in order). A batch's events leave only after
 * its own records and those of every batch before it (E5), in order; after a refused record (or a
 * batch that ends the stream) nothing after it leaves. The read-ahead is bounded (READ_AHEAD): past
 * it the replica waits for the oldest record in flight, as it waits for a client that does not
 * read. `delivered` moves only when a batch goes to the client.
 *
 * A continuation is held back until the rewriter has verified the replay (§5 check 7): nothing,
 * not even the status line, leaves before that, so a failed replay can still be answered as a new
 * stream. Holding is bounded in time and bytes.
 *
 * With the journal (CONTRACT.md §8 J2), a client that goes away does not end the stream: it is
 * held, read on with nothing written to a client (every event is journaled by the rewriter), until
 * a client attaches again (J3) or the hold ends: a POST stream once every awaited response has
 * passed, a GET stream when its owner (streams/pumps.ts) releases it.
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { Channel, type Relay } from './relay.js';
import { joinBatches, type Batch, type EndReason, type RewriteResult, type SseRewriter } from '../sse/rewriter.js';

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

/**
 * What is read ahead while a batch's records are written, at most (then the replica waits): the
 * replica's bytes and events of the next batch. Only a replica that sends faster than the store
 * records fills it. Large enough that a flooding stream's records are few (each costs a command,
 * a socket write and a script call whatever it carries: 256 KiB gave a journaled stream 1.2 × the
 * events/s of 64 KiB, and 1 MiB no more than 256 KiB; docs/performance.md); small enough that a
 * stream's memory stays that of a few socket buffers, and that one record script does not block
 * the store for long (about 1.3 ms for 256 KiB of the bench's journaled events; unrecorded.ts bounds a
 * late write at 10,000 events).
 */
const READ_AHEAD = { bytes: 256 * 1024, events: 4096 };

/**
 * Batches committed at once: the next batch's records go to the store while the reply for the one
 * before it is on its way, so that a stream is not bound by one round trip per batch.
 */
const IN_FLIGHT = 2;

export function pipeSse(options: SsePipeOptions): SsePipe {
  const { body, res, rewriter } = options;
  let started = false;
  let written = false;
  let unverified: Buffer[] = [];
  let unverifiedBytes = 0;
  let unverifiedEvents = 0;
  let timer: NodeJS.Timeout | undefined;
  let draining = false;
  let held = false;
  /** The replica's body ended or failed: what remains is its end. */
  let over = false;
  let delivered = rewriter.head;
  const { hold } = options;
  const channel = new Channel<PipeEnd>(body, res, () => clearTimeout(timer));

  const fail = (why: VerifyFailure) => {
    if (channel.settled) return;
    channel.settle('not_verified');
    options.verify?.onFailed(why);
  };

  const begin = () => {
    started = true;
    channel.respond();
    clearTimeout(timer);
    options.start();
    if (unverifiedBytes > 0) {
      written = true;
      res.write(Buffer.concat(unverified));
    } else {
      // R5: the headers leave at once. Events that are already on their way within this turn go
      // with them in one write; if none came by its end, the headers go alone.
      setImmediate(() => {
        if (!written && !channel.settled) res.flushHeaders();
      });
    }
    if (unverifiedEvents > 0) options.onEvents(unverifiedEvents);
    unverified = [];
    delivered = rewriter.head;
    if (draining && rewriter.answered) end();
  };

  const end = () => {
    // The client reconnects (elsewhere) and continues with its last cursor; tell it when.
    const client = channel.client;
    if (started && !channel.settled && client && !client.writableEnded) client.write(`retry: ${options.retryHintMs}\n\n`);
    channel.settle('gateway_end');
  };

  /** A held POST stream is over once no call is in flight on it. */
  const heldAnswered = () => held && hold!.untilAnswered && rewriter.answered;

  const deliver = (result: RewriteResult): boolean => {
    if (channel.settled) return false;
    if (!started) {
      if (result.end) {
        fail(result.end);
        return false;
      }
      unverified.push(result.out);
      unverifiedBytes += result.out.length;
      unverifiedEvents += result.events;
      if (rewriter.verified) begin();
      else if (unverifiedBytes > (options.verify?.maxBytes ?? Infinity)) {
        fail('too_large');
        return false;
      }
      return true;
    }
    if (result.events > 0 && !held) options.onEvents(result.events);
    if (result.out.length > 0) written = true;
    delivered = rewriter.head;
    const flushed = channel.write(result.out);
    if (result.end) {
      channel.settle(result.end);
      return false;
    }
    if (heldAnswered()) {
      channel.settle('hold_answered');
      return false;
    }
    if (draining && rewriter.answered) {
      // The call's response has passed: nothing is in flight any more.
      end();
      return false;
    }
    return flushed;
  };

  const clientGone = () => {
    if (!started) return fail('client_gone');
    if (channel.client?.writableFinished) return channel.settle('upstream_end');
    // J2: held, unless nothing would be worth holding (a POST stream already answered, or a GET
    // stream while shutting down).
    const worth = hold !== undefined && (hold.untilAnswered ? !rewriter.answered : !draining);
    if (!worth) return channel.settle('client_gone');
    channel.detach();
    held = true;
    hold.onHeld();
  };

  if (rewriter.verified) begin();
  else timer = setTimeout(() => fail('timeout'), options.verify?.timeoutMs ?? 0);

  // Read-ahead: while batches' records are written, what the replica sends meanwhile is read,
  // parsed and numbered, and becomes the next batch. Up to IN_FLIGHT batches are committed at once
  // (their records pipelined to the store, see streams/unrecorded.ts); the rewriter releases them
  // in order, each only after its own records and those of every batch before it (E5).
  const inFlight: Promise<void>[] = [];
  let ahead: Batch[] = [];
  let aheadBytes = 0;
  let aheadEvents = 0;

  const send = () => {
    const batch = joinBatches(ahead);
    ahead = [];
    aheadBytes = aheadEvents = 0;
    const released = rewriter.commit(batch).then((result) => {
      deliver(result);
      inFlight.shift();
      // Settled (the end, a refusal): nothing read ahead may leave. Waiting for the client to
      // drain: what was read ahead goes now, bounded; nothing more is read until it drained.
      if (ahead.length > 0 && !channel.settled && inFlight.length < IN_FLIGHT) send();
    });
    inFlight.push(released);
  };

  /** Resolves once everything read went out (or the stream settled): the end and between-steps wait for it. */
  const sent = async () => {
    while (inFlight.length > 0) await inFlight[inFlight.length - 1];
  };

  channel.run({
    read: (chunk) => {
      const batch = rewriter.prepare(chunk);
      ahead.push(batch);
      aheadBytes += chunk.length;
      aheadEvents += batch.events;
      if (inFlight.length < IN_FLIGHT) send();
      else if (aheadBytes >= READ_AHEAD.bytes || aheadEvents >= READ_AHEAD.events) {
        // Bounded: nothing more is read (the replica is held back) until the oldest batch in flight landed.
        return inFlight[0]!.then(() => !channel.settled);
      }
      return !channel.settled;
    },
    end: async () => {
      over = true;
      await sent();
      if (channel.settled) return;
      const last = rewriter.end();
      if (!started) return fail(last.end ?? 'upstream_end');
      if (last.end === undefined) await options.beforeEnd?.('upstream_end');
      channel.settle(last.end ?? 'upstream_end');
    },
    error: async () => {
      over = true;
      await sent();
      if (!started) return fail('upstream_error');
      await options.beforeEnd?.('upstream_error');
      channel.settle('upstream_error');
    },
    close: clientGone,
  });
  // The client may have gone while the stream was being set up: no 'close' will come any more.
  if (res.destroyed) clientGone();

  return {
    end,
    drain: () => {
      draining = true;
      // A continuation still held for verification is drained once it begins (or fails).
      if (started && rewriter.answered) end();
    },
    done: channel.done,
    get held() {
      return held;
    },
    get delivered() {
      return delivered;
    },
    attach: (client) => {
      if (channel.settled || !started) return false;
      const previous = channel.client;
      channel.attach(client);
      if (previous && !previous.writableEnded) previous.end();
      if (held) {
        held = false;
        hold!.onAttached();
      }
      return true;
    },
    release: (how) => {
      if (held) channel.settle(how);
    },
    between: (step) =>
      channel.between(async () => {
        await sent();
        if (over || channel.settled) return;
        await step();
      }),
  };
}
