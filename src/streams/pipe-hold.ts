/**
 * The client's leaving (CONTRACT.md §8 J2): with the journal, a client that goes away does not end
 * the stream: it is held, read on with nothing written to a client (every event is journaled by
 * the rewriter), until a client attaches again (J3) or the hold ends: a POST stream once every
 * awaited response has passed, a GET stream when its owner (streams/pumps.ts) releases it.
 */
import type { ServerResponse } from 'node:http';
import { fail } from './pipe-start.js';
import type { PipeState } from './pipe-types.js';

/** The client's response closed: finished, or the client went away (then the stream may be held). */
export function clientGone(state: PipeState): void {
  const { channel, rewriter } = state;
  const { hold } = state.options;
  if (!state.started) return fail(state, 'client_gone');
  if (channel.client?.writableFinished) return channel.settle('upstream_end');
  // J2: held, unless nothing would be worth holding (a POST stream already answered, or a GET
  // stream while shutting down).
  const worth = hold !== undefined && (hold.untilAnswered ? !rewriter.answered : !state.draining);
  if (!worth) return channel.settle('client_gone');
  channel.detach();
  state.held = true;
  hold.onHeld();
}

/** After a delivered batch: a held POST stream is over once no call is in flight on it. True when it ended. */
export function heldAnswered(state: PipeState): boolean {
  if (!state.held || !state.options.hold!.untilAnswered || !state.rewriter.answered) return false;
  state.channel.settle('hold_answered');
  return true;
}

/** J3: a client takes the begun stream over; the one before it, if the gateway has not seen it go, is ended. */
export function attach(state: PipeState, client: ServerResponse): boolean {
  const { channel } = state;
  if (channel.settled || !state.started) return false;
  const previous = channel.client;
  channel.attach(client);
  if (previous && !previous.writableEnded) previous.end();
  if (state.held) {
    state.held = false;
    state.options.hold!.onAttached();
  }
  return true;
}

/** J2: ends a held stream (its hold is over). */
export function release(state: PipeState, how: 'hold_expired' | 'hold_released'): void {
  if (state.held) state.channel.settle(how);
}
