/**
 * CONTRACT.md §7: a cursor that left while the store could not be written is recorded late, by the
 * instance that holds its stream, once the store answers again. A decision that finds the cursor's
 * position not recorded yet while that instance lives waits here for the record, rather than answer
 * unknown_stream: woken by the incarnation's notes ('head', written with the journaled batch), and
 * re-reading every RECORD_POLL_MS as well (a stream without the journal notes nothing, and a note
 * may be lost), for at most resumption.replayTimeoutMs.
 */
import { isStoreError } from '../errors.js';
import type { Store } from '../store/types.js';

/** Re-read this often while no note came: about as often as the holder's flusher writes (streams/unrecorded.ts). */
export const RECORD_POLL_MS = 200;

export interface RecordWait {
  store: Pick<Store, 'readIncarnation' | 'watchJournal'>;
  sessionId: string;
  incarnation: string;
  /** The cursor's position: waited for until the head reaches it. */
  seq: number;
  timeoutMs: number;
}

/**
 * Resolves true once the incarnation's head reaches `seq`; false when it did not within
 * `timeoutMs`, or when nothing more will be recorded (the incarnation closed, or gone). A read the
 * store fails is tried again at the next note or poll: the decision that follows reads again itself.
 */
export async function awaitRecord(w: RecordWait): Promise<boolean> {
  const { store } = w;
  const deadline = performance.now() + w.timeoutMs;
  let wake: (() => void) | undefined;
  let noted = false;
  const unwatch = store.watchJournal(w.sessionId, w.incarnation, (note) => {
    if (note.kind === 'head' && note.head < w.seq) return;
    noted = true;
    wake?.();
  });
  try {
    for (;;) {
      noted = false;
      const found = await reached(w);
      if (found !== undefined) return found;
      const left = deadline - performance.now();
      if (left <= 0) return false;
      if (noted) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(RECORD_POLL_MS, left));
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
    }
  } finally {
    unwatch();
  }
}

/** true: recorded up to seq; false: never will be; undefined: not yet (or the store did not answer). */
async function reached(w: RecordWait): Promise<boolean | undefined> {
  try {
    const view = await w.store.readIncarnation(w.sessionId, w.incarnation, w.seq);
    if (view === null) return false;
    if (view.record.head >= w.seq) return true;
    return view.record.state !== 'open' ? false : undefined;
  } catch (err) {
    if (!isStoreError(err)) throw err;
    return undefined;
  }
}
