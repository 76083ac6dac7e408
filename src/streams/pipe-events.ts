/**
 * What the pipe does per event: each chunk the replica sends is read, parsed, numbered and written
 * out (SseRewriter.prepare) into the next batch; the batches are committed (their records written,
 * E5) and delivered to the client in order.
 *
 * Read-ahead: while batches' records are written, the replica is read on. Two batches are
 * committed at a time: the second one's records go to the store while the reply for the first is
 * on its way (pipelined; streams/unrecorded.ts keeps them in order). A batch's events leave only
 * after its own records and those of every batch before it (E5), in order; after a refused record
 * (or a batch that ends the stream) nothing after it leaves. The read-ahead is bounded
 * (READ_AHEAD): past it the replica waits for the oldest record in flight, as it waits for a
 * client that does not read. `delivered` moves only when a batch goes to the client.
 */
import { joinBatches, type Batch, type RewriteResult } from '../sse/rewriter.js';
import { holdBack } from './pipe-start.js';
import type { PipeState } from './pipe-types.js';

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

export interface PipeEvents {
  /** J1: the stream's own priming event goes first, recorded as the batches after it are (pipe-start.ts). */
  prime(): void;
  /** A chunk of the replica's body (the channel's read step). */
  read(chunk: Buffer): boolean | Promise<boolean>;
  /** Resolves once everything read went out (or the stream settled): the end and between-steps wait for it. */
  sent(): Promise<void>;
}

/** What delivering a batch may lead to, besides writing it: the stream's start, or its end. */
export interface EventSteps {
  /** The stream began (pipe-start.ts). */
  begun(): void;
  /** After a delivered batch: true when the stream is over now (answered, drained). */
  over(): boolean;
}

export function pipeEvents(state: PipeState, steps: EventSteps): PipeEvents {
  const { rewriter, channel } = state;
  const inFlight: Promise<void>[] = [];
  let ahead: Batch[] = [];
  let aheadBytes = 0;
  let aheadEvents = 0;

  /** A committed batch to the client; false to stop reading (settled, or the client must drain first). */
  const deliver = (result: RewriteResult): boolean => {
    if (channel.settled) return false;
    if (!state.started) return holdBack(state, result, steps.begun);
    if (result.events > 0 && !state.held) state.options.onEvents(result.events);
    if (result.out.length > 0) state.written = true;
    state.delivered = rewriter.head;
    const flushed = channel.write(result.out);
    if (result.end) {
      channel.settle(result.end);
      return false;
    }
    return steps.over() ? false : flushed;
  };

  // Up to IN_FLIGHT batches are committed at once (their records pipelined to the store, see
  // streams/unrecorded.ts); the rewriter releases them in order, each only after its own records
  // and those of every batch before it (E5).
  const send = () => {
    const batch = joinBatches(ahead);
    ahead = [];
    aheadBytes = aheadEvents = 0;
    inFlight.push(delivered(rewriter.commit(batch)));
  };
  /** A committed batch, delivered in its turn; what was read ahead meanwhile follows it. */
  const delivered = (committed: Promise<RewriteResult>) =>
    committed.then((result) => {
      deliver(result);
      inFlight.shift();
      // Settled (the end, a refusal): nothing read ahead may leave. Waiting for the client to
      // drain: what was read ahead goes now, bounded; nothing more is read until it drained.
      if (ahead.length > 0 && !channel.settled && inFlight.length < IN_FLIGHT) send();
    });

  return {
    // The gateway's own event: not one of the replica's (onEvents counts those).
    prime: () => void inFlight.push(delivered(rewriter.prime().then((result) => ({ ...result, events: 0 })))),
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
    sent: async () => {
      while (inFlight.length > 0) await inFlight[inFlight.length - 1];
    },
  };
}
