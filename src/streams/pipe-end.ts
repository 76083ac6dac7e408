/**
 * The end of the pipe: the replica's body ending or failing (awaited behind everything read
 * before it), the gateway ending the stream on purpose, and the drain at shutdown.
 */
import { fail } from './pipe-start.js';
import type { PipeState } from './pipe-types.js';

/** The gateway ends the stream on purpose: the client reconnects (elsewhere) with its last cursor; tell it when. */
export function gatewayEnd(state: PipeState): void {
  const { channel } = state;
  const client = channel.client;
  if (state.started && !channel.settled && client && !client.writableEnded) client.write(`retry: ${state.options.retryHintMs}\n\n`);
  channel.settle('gateway_end');
}

/** Shutdown: the stream ends once no call is in flight on it; at once when none is. */
export function drain(state: PipeState): void {
  state.draining = true;
  // A continuation still held for verification is drained once it begins (or fails).
  if (state.started && state.rewriter.answered) gatewayEnd(state);
}

/** While draining, after a delivered batch or the start: true when the stream ended, as no call is in flight any more. */
export function drained(state: PipeState): boolean {
  if (!state.draining || !state.rewriter.answered) return false;
  gatewayEnd(state);
  return true;
}

/** The replica's body ended: once what was read before has gone out (`sent`), the stream ends with it. */
export async function upstreamEnd(state: PipeState, sent: () => Promise<void>): Promise<void> {
  state.over = true;
  await sent();
  if (state.channel.settled) return;
  const last = state.rewriter.end();
  if (!state.started) return fail(state, last.end ?? 'upstream_end');
  if (last.end === undefined) await state.options.beforeEnd?.('upstream_end');
  state.channel.settle(last.end ?? 'upstream_end');
}

/** The replica's body failed: once what was read before has gone out, the stream ends as failed. */
export async function upstreamError(state: PipeState, sent: () => Promise<void>): Promise<void> {
  state.over = true;
  await sent();
  if (!state.started) return fail(state, 'upstream_error');
  await state.options.beforeEnd?.('upstream_error');
  state.channel.settle('upstream_error');
}
