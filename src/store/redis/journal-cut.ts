/**
 * A batch's frames cut where the journal's slices end (scripts/journal.ts), so that the record
 * script stores each piece as it came: a byte made into a Lua string costs the script about 1.3 ns,
 * and cutting slices out of one argument made every byte into a string twice (docs/performance.md,
 * "What 0.5 × nginx would take on this machine").
 *
 * Where the slices end follows from where the journal ends, which the script answers after each
 * batch it journals ('ok <end>'). A stream's batches are pipelined, so the end is expected: the last
 * answer plus the bytes sent since. An expectation that is wrong (the journal was lost, another
 * instance wrote, a batch was refused) costs only the script's joining and cutting, as for a batch
 * sent in one piece; the next answer corrects it.
 */
import { JOURNAL_SLICE_BYTES } from './scripts/journal.js';

/** The frames in one piece (where the journal ends is not known), or cut where its slices end. */
export function cutFrames(frames: Buffer, end: number | undefined): Buffer[] {
  if (end === undefined) return [frames];
  const room = JOURNAL_SLICE_BYTES - (end % JOURNAL_SLICE_BYTES);
  if (frames.length <= room) return [frames];
  const pieces = [frames.subarray(0, room)];
  for (let at = room; at < frames.length; at += JOURNAL_SLICE_BYTES) {
    pieces.push(frames.subarray(at, Math.min(frames.length, at + JOURNAL_SLICE_BYTES)));
  }
  return pieces;
}

interface Expected {
  /** Where the journal ended after the last batch answered; undefined until an answer says. */
  end: number | undefined;
  /** Bytes sent since, not answered yet: the journal is expected to end at end + pending. */
  pending: number;
}

/**
 * Where each incarnation's journal is expected to end, for the incarnations this instance writes.
 * Bounded: the least recently written are forgotten first (they are then sent in one piece once).
 */
export class JournalEnds {
  readonly #expected = new Map<string, Expected>();
  readonly #max: number;

  constructor(max = 4096) {
    this.#max = max;
  }

  get size(): number {
    return this.#expected.size;
  }

  /** The pieces to send a batch's frames in; they count as sent until `answered`. */
  send(key: string, frames: Buffer): Buffer[] {
    const expected = this.#expected.get(key) ?? { end: undefined, pending: 0 };
    // Written last: kept longest.
    this.#expected.delete(key);
    this.#expected.set(key, expected);
    if (this.#expected.size > this.#max) this.#expected.delete(this.#expected.keys().next().value!);
    const pieces = cutFrames(frames, expected.end === undefined ? undefined : expected.end + expected.pending);
    expected.pending += frames.length;
    return pieces;
  }

  /** A batch of `bytes` sent was answered: the journal's end after it, or undefined (refused, failed, a retry). */
  answered(key: string, bytes: number, end: number | undefined): void {
    const expected = this.#expected.get(key);
    if (expected === undefined) return;
    expected.pending -= bytes;
    expected.end = end;
  }

  forget(key: string): void {
    this.#expected.delete(key);
  }
}
