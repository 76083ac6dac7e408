/**
 * Pipes a replica's SSE body to the client through the rewriter (R5): one chunk at a time (the
 * replica is paused while a chunk's records are written), backpressure from the client's socket,
 * no timeout while open, either side's end ends the other.
 *
 * A continuation is held back until the rewriter has verified the replay (§5 check 7): nothing,
 * not even the status line, leaves before that, so a failed replay can still be answered as a new
 * stream. Holding is bounded in time and bytes.
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { Relay } from '../relay.js';
import type { EndReason, RewriteResult, SseRewriter } from './rewriter.js';

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

export function pipeSse(options: SsePipeOptions): Relay<PipeEnd> {
  const { body, res, rewriter } = options;
  let started = false;
  let written = false;
  let held: Buffer[] = [];
  let heldBytes = 0;
  let heldEvents = 0;
  let timer: NodeJS.Timeout | undefined;
  let settle!: (how: PipeEnd) => void;
  let settled = false;

  const done = new Promise<PipeEnd>((resolve) => {
    settle = (how) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      body.destroy();
      if (started && how !== 'client_gone' && !res.writableEnded) res.end();
      resolve(how);
    };
  });

  const fail = (why: VerifyFailure) => {
    if (settled) return;
    settle('not_verified');
    options.verify?.onFailed(why);
  };

  const begin = () => {
    started = true;
    clearTimeout(timer);
    options.start();
    if (heldBytes > 0) {
      written = true;
      res.write(Buffer.concat(held));
    } else {
      // R5: the headers leave at once. Events that are already on their way within this turn go
      // with them in one write; if none came by its end, the headers go alone.
      setImmediate(() => {
        if (!written && !settled) res.flushHeaders();
      });
    }
    if (heldEvents > 0) options.onEvents(heldEvents);
    held = [];
  };

  // Everything the replica sent meanwhile is taken in one read and rewritten as one batch (one
  // store round trip), not chunk by chunk: while a batch's records are written, a fast replica
  // may have sent thousands of small chunks.
  let waitingForDrain = false;
  const deliver = (result: RewriteResult): boolean => {
    if (settled) return false;
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
    const flushed = result.out.length === 0 || res.write(result.out);
    if (result.end) {
      settle(result.end);
      return false;
    }
    if (!flushed) {
      waitingForDrain = true;
      res.once('drain', () => {
        waitingForDrain = false;
        inOrder(readAll);
      });
      return false;
    }
    return true;
  };
  const readAll = async () => {
    while (!settled && !waitingForDrain) {
      const chunk = body.read() as Buffer | null;
      if (chunk === null) return;
      if (!deliver(await rewriter.push(chunk))) return;
    }
  };

  // Reads, the end and errors are handled strictly in order: a Readable emits 'end' as soon as it
  // handed out its last data, while that data's records may still be on the way.
  let queue = Promise.resolve();
  const inOrder = (step: () => void | Promise<void>) => {
    queue = queue.then(step);
  };

  if (rewriter.verified) begin();
  else timer = setTimeout(() => fail('timeout'), options.verify?.timeoutMs ?? 0);

  body.on('readable', () => inOrder(readAll));
  body.once('end', () =>
    inOrder(() => {
      if (settled) return;
      const last = rewriter.end();
      if (!started) return fail(last.end ?? 'upstream_end');
      settle(last.end ?? 'upstream_end');
    }),
  );
  body.on('error', () => inOrder(() => (started ? settle('upstream_error') : fail('upstream_error'))));
  res.once('close', () => {
    if (!started) return fail('client_gone');
    settle(res.writableFinished ? 'upstream_end' : 'client_gone');
  });

  return {
    end: () => {
      // The client reconnects (elsewhere) and continues with its last cursor; tell it when.
      if (started && !settled && !res.writableEnded) res.write(`retry: ${options.retryHintMs}\n\n`);
      settle('gateway_end');
    },
    done,
  };
}
