/**
 * The start of the client's stream: at once, or, for a continuation, once the rewriter has
 * verified the replay (§5 check 7). Until then nothing leaves, not even the status line, so that a
 * failed replay can still be answered as a new stream; the holding is bounded in time and bytes.
 */
import type { RewriteResult } from '../sse/rewriter.js';
import type { PipeState, VerifyFailure } from './pipe-types.js';

/** The verification failed (or the stream ended before it began): the caller answers otherwise. */
export function fail(state: PipeState, why: VerifyFailure): void {
  if (state.channel.settled) return;
  state.channel.settle('not_verified');
  state.options.verify?.onFailed(why);
}

/**
 * Begins at once when there is nothing to verify; otherwise bounds the wait for the verification.
 * `prime`: sends the stream's own priming event, recorded (pipe-events.ts).
 */
export function awaitStart(state: PipeState, begun: () => void, prime: () => void): void {
  if (state.rewriter.verified) begin(state, begun, prime);
  else state.timer = setTimeout(() => fail(state, 'timeout'), state.options.verify?.timeoutMs ?? 0);
}

/**
 * The start of the client's stream: its status line and headers, with what was held back for the
 * verification. `begun` runs after (the stream may be due to end at once).
 *
 * J1: a journaled stream begins with a priming event, so that a client cut before the replica's
 * first event holds a cursor. A continuation's goes first, with the cursor of the position it
 * continues after (the client's own), journal or not; none where the response began already (the
 * owner's replay after the journal's events, whose last the client holds). A new stream's is its
 * first position, recorded before it leaves (E5): `prime` sends it, and the replica's events
 * follow it in order. A replica's own priming event (an id and empty data) is then an event like
 * any other: the gateway records its id, so that a cursor at it can also be continued from the
 * replica's log.
 */
export function begin(state: PipeState, begun: () => void, prime?: () => void): void {
  const { options, channel, rewriter, unverified } = state;
  const { res } = options;
  state.started = true;
  channel.respond();
  clearTimeout(state.timer);
  const continuing = res.headersSent;
  options.start();
  const priming = rewriter.priming();
  const held = typeof priming === 'object' && !continuing ? [priming, ...unverified.chunks] : unverified.chunks;
  if (held.length > 0) {
    state.written = true;
    res.write(held.length === 1 ? held[0] : Buffer.concat(held));
  } else {
    // R5: the headers leave at once. Events that are already on their way within this turn go
    // with them in one write; if none came by its end, the headers go alone.
    setImmediate(() => {
      if (!state.written && !channel.settled) res.flushHeaders();
    });
  }
  if (unverified.events > 0) options.onEvents(unverified.events);
  state.unverified = { chunks: [], bytes: 0, events: 0 };
  state.delivered = rewriter.head;
  if (priming === 'record') prime?.();
  begun();
}

/**
 * Before the start: a committed batch is held back, and the stream begins once the replay is
 * verified. False once the stream is over (it failed).
 */
export function holdBack(state: PipeState, result: RewriteResult, begun: () => void): boolean {
  if (result.end) {
    fail(state, result.end);
    return false;
  }
  const { unverified } = state;
  unverified.chunks.push(result.out);
  unverified.bytes += result.out.length;
  unverified.events += result.events;
  if (state.rewriter.verified) begin(state, begun);
  else if (unverified.bytes > (state.options.verify?.maxBytes ?? Infinity)) {
    fail(state, 'too_large');
    return false;
  }
  return true;
}
