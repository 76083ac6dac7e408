/**
 * A GET stream asked of a session's owner while the session's GET stream may be held open there
 * (CONTRACT.md E4, §8 J2). The owner is asked first: only a GET that really opened may supersede
 * the session's GET stream, so that a refused one leaves a live stream live and resumable.
 *
 * The SDK's server keeps one GET stream per session and answers a second one 409 while that one is
 * open. Held with no client (J2), the open one is asked to go (releaseHeldGet: its pump, on
 * whichever instance, lets it go if no client is attached to it) and the GET is retried briefly,
 * as it is for an owner that has not yet noticed the old stream's close. One with a client tailing
 * it through another instance is left alone at once; one with a client attached to its pump stays
 * too, and the retries run out: the owner's 409 is then the answer.
 */
import { isStoreError } from '../errors.js';
import type { HeldGetRelease, Store } from '../store/types.js';
import { UpstreamAbort, type UpstreamResponse } from '../upstream.js';

/**
 * A GET that lets a held GET of its session go may be answered 409 by the replica until it has
 * seen the held one close: tried this often, waiting this much longer each time (1 s in all), as
 * CONTRACT.md §5 allows.
 */
export const HELD_GET_ATTEMPTS = 5;
export const HELD_GET_BACKOFF_MS = 100;

export interface Asked {
  /** The owner's last answer: a stream that opened, or the answer to pass on (a 409 when still refused). */
  readonly response: UpstreamResponse;
  /** Cancels that answer's request. */
  readonly abort: UpstreamAbort;
}

/**
 * Asks the owner (`ask` sends the request, undefined when it could not be sent and was dealt
 * with); while `retry()` holds (a GET of a session with the journal, whose client is still there),
 * its 409 is retried as a held GET of the session is let go. Undefined when `ask` gave no answer.
 */
export async function askOwner(
  store: Store,
  sessionId: string,
  ask: (abort: UpstreamAbort) => Promise<UpstreamResponse | undefined>,
  retry: () => boolean,
): Promise<Asked | undefined> {
  for (let attempt = 1; ; attempt++) {
    const abort = new UpstreamAbort();
    const response = await ask(abort);
    if (response === undefined) return undefined;
    if (response.statusCode !== 409 || attempt >= HELD_GET_ATTEMPTS || !retry()) return { response, abort };
    if ((await releaseHeldGet(store, sessionId)) === 'tailed') return { response, abort };
    await response.body.dump().catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, HELD_GET_BACKOFF_MS * attempt));
  }
}

/** Asked at each 409 (a note lost, or sent before the pump watched, only costs a retry). */
async function releaseHeldGet(store: Store, sessionId: string): Promise<HeldGetRelease> {
  try {
    return await store.releaseHeldGet(sessionId);
  } catch (err) {
    if (!isStoreError(err)) throw err;
    // Nothing can be asked without the store: the retries stay as for any 409.
    return 'none';
  }
}
