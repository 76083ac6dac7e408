/**
 * Pipes a replica's SSE body to the client through the rewriter (R5): backpressure from the
 * client's socket, no timeout while open, either side's end ends the other (the reading,
 * backpressure and ending are relay.ts's Channel, as for any other body).
 *
 * This file is the wiring; each part of the pipe is its own module:
 * - pipe-start.ts: the start of the client's stream, held back for a continuation until the
 *   rewriter has verified the replay (§5 check 7);
 * - pipe-events.ts: per event, the read (with read-ahead), the records (E5) and the delivery;
 * - pipe-end.ts: the replica's end or failure, the gateway's end, the drain;
 * - pipe-hold.ts: the client's leaving (J2, the stream is held) and a client attaching (J3).
 */
import { drain, drained, gatewayEnd, upstreamEnd, upstreamError } from './pipe-end.js';
import { pipeEvents } from './pipe-events.js';
import { attach, clientGone, heldAnswered, release } from './pipe-hold.js';
import { awaitStart } from './pipe-start.js';
import { pipeState, type SsePipe, type SsePipeOptions } from './pipe-types.js';

export type { HoldOptions, PipeEnd, SsePipe, SsePipeOptions, VerifyFailure } from './pipe-types.js';

export function pipeSse(options: SsePipeOptions): SsePipe {
  const state = pipeState(options);
  const { channel } = state;
  const begun = () => void drained(state);
  const events = pipeEvents(state, { begun, over: () => heldAnswered(state) || drained(state) });

  awaitStart(state, begun, events.prime);
  channel.run({
    read: events.read,
    end: () => upstreamEnd(state, events.sent),
    error: () => upstreamError(state, events.sent),
    close: () => clientGone(state),
  });
  // The client may have gone while the stream was being set up: no 'close' will come any more.
  if (options.res.destroyed) clientGone(state);

  return {
    end: () => gatewayEnd(state),
    drain: () => drain(state),
    done: channel.done,
    get held() {
      return state.held;
    },
    get delivered() {
      return state.delivered;
    },
    attach: (client) => attach(state, client),
    release: (how) => release(state, how),
    between: (step) =>
      channel.between(async () => {
        await events.sent();
        if (state.over || channel.settled) return;
        await step();
      }),
  };
}
