/**
 * Pipes a replica's SSE body to the client through the rewriter (R5): one chunk at a time (the
 * replica is paused while a chunk's records are written), backpressure from the client's socket,
 * no timeout while open, either side's end ends the other (the reading, backpressure and ending are
 * relay.ts's Channel, as for any other body).
 *
 * A continuation is held back until the rewriter has verified the replay (§5 check 7): nothing,
 * not even the status line, leaves before that, so a failed replay can still be answered as a new
 * stream. Holding is bounded in time and bytes.
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { Channel, type Relay } from './relay.js';
import type { EndReason, RewriteResult, SseRewriter } from '../sse/rewriter.js';

export type PipeEnd = 'upstream_end' | 'upstream_error' | 'client_gone' | 'gateway_end' | 'not_verified' | EndReason;
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
}

export interface SsePipe extends Relay<PipeEnd> {
  /**
   * Shutdown: ends the stream once no call is in flight on it (the rewriter's awaited responses
   * have passed), at once when none is (CONTRACT.md §1).
   */
  drain(): void;
}

export function pipeSse(options: SsePipeOptions): SsePipe {
  const { body, res, rewriter } = options;
  let started = false;
  let written = false;
  let held: Buffer[] = [];
  let heldBytes = 0;
  let heldEvents = 0;
  let timer: NodeJS.Timeout | undefined;
  let draining = false;
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
    if (heldBytes > 0) {
      written = true;
      res.write(Buffer.concat(held));
    } else {
      // R5: the headers leave at once. Events that are already on their way within this turn go
      // with them in one write; if none came by its end, the headers go alone.
      setImmediate(() => {
        if (!written && !channel.settled) res.flushHeaders();
      });
    }
    if (heldEvents > 0) options.onEvents(heldEvents);
    held = [];
    if (draining && rewriter.answered) end();
  };

  const end = () => {
    // The client reconnects (elsewhere) and continues with its last cursor; tell it when.
    if (started && !channel.settled && !res.writableEnded) res.write(`retry: ${options.retryHintMs}\n\n`);
    channel.settle('gateway_end');
  };

  const deliver = (result: RewriteResult): boolean => {
    if (channel.settled) return false;
    if (!started) {
      if (result.end) {
        fail(result.end);
        return false;
      }
      held.push(result.out);
      heldBytes += result.out.length;
      heldEvents += result.events;
      if (rewriter.verified) begin();
      else if (heldBytes > (options.verify?.maxBytes ?? Infinity)) {
        fail('too_large');
        return false;
      }
      return true;
    }
    if (result.events > 0) options.onEvents(result.events);
    if (result.out.length > 0) written = true;
    const flushed = channel.write(result.out);
    if (result.end) {
      channel.settle(result.end);
      return false;
    }
    if (draining && rewriter.answered) {
      // The call's response has passed: nothing is in flight any more.
      end();
      return false;
    }
    return flushed;
  };

  if (rewriter.verified) begin();
  else timer = setTimeout(() => fail('timeout'), options.verify?.timeoutMs ?? 0);

  channel.run({
    // Everything the replica sent meanwhile is taken in one read and rewritten as one batch (one
    // store round trip), not chunk by chunk: while a batch's records are written, a fast replica
    // may have sent thousands of small chunks.
    read: async (chunk) => deliver(await rewriter.push(chunk)),
    end: () => {
      if (channel.settled) return;
      const last = rewriter.end();
      if (!started) return fail(last.end ?? 'upstream_end');
      channel.settle(last.end ?? 'upstream_end');
    },
    error: () => (started ? channel.settle('upstream_error') : fail('upstream_error')),
    close: () => {
      if (!started) return fail('client_gone');
      channel.settle(res.writableFinished ? 'upstream_end' : 'client_gone');
    },
  });

  return {
    end,
    drain: () => {
      draining = true;
      // A continuation still held for verification is drained once it begins (or fails).
      if (started && rewriter.answered) end();
    },
    done: channel.done,
  };
}
