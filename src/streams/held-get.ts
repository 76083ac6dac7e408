/**
 * A GET stream asked of a session's owner while the session's GET stream may be held open there
 * (CONTRACT.md E4, §8 J2, J3). The SDK's server keeps one GET stream per session and answers a
 * second one 409 while that one is open, so a GET stream held with no client would block its
 * session's next GET until its hold ends.
 *
 * A plain GET (no Last-Event-ID) of a session whose current GET stream is held takes that stream
 * over instead of asking the owner for another (planPlainGet): it is continued from the journal
 * at the last position written to the client that left, then live, through any instance
 * (resumption/take-over.ts), so that what the replica sent meanwhile is neither lost nor repeated.
 * Nothing supersedes it: the stream goes on as the session's GET stream.
 *
 * Otherwise the owner is asked (askOwner). Its 409 is retried briefly, as it is for an owner that
 * has not yet noticed the old stream's close, and the plan is made again before each retry: the
 * pump may not yet have seen its client leave. A stream with a client attached (on its pump's
 * instance, or tailing through another) is never taken from it: the retries run out and the
 * owner's 409 is the answer. A signal's fresh GET (resume.ts) asks a held stream to go instead
 * (releaseHeldGet: its pump, on whichever instance, lets it go if no client is attached to it).
 */
import { isStoreError } from '../errors.js';
import type { HeldGetRelease, IncarnationRecord, Store } from '../store/types.js';
import { UpstreamAbort, type UpstreamResponse } from '../upstream/index.js';
import { leaseLate } from './liveness.js';

/**
 * A GET that waits for a held GET of its session to be let go may be answered 409 by the replica
 * until it has seen the held one close: tried this often, waiting this much longer each time
 * (1 s in all), as CONTRACT.md §5 allows.
 */
export const HELD_GET_ATTEMPTS = 5;
export const HELD_GET_BACKOFF_MS = 100;

/** What a plain GET of a session does about the session's current GET stream. */
export type PlainGetPlan =
  /** It is held with no client: the plain GET takes it over from `record.clientSeq`. */
  | { readonly kind: 'take_over'; readonly record: IncarnationRecord }
  /** The owner is asked; `attached`: the current stream has a client, so a 409 is likely. */
  | { readonly kind: 'ask_owner'; readonly attached: boolean };

/**
 * The plan, from the session's current GET incarnation as the store holds it (null: none) and
 * the session's owner, at `now` (ms since the epoch); `instanceAlive`: the instance of its lapsed
 * lease is alive (liveness.ts), the lease only late. Pure.
 */
export function planPlainGet(current: IncarnationRecord | null, owner: string, now: number, instanceAlive = false): PlainGetPlan {
  if (current === null || current.kind !== 'get' || current.state !== 'open' || current.owner !== owner) {
    return { kind: 'ask_owner', attached: false };
  }
  // Only a pump that reads the replica's stream (its lease runs, or is only late) can be taken over.
  const reads = current.pump !== '' && (current.pumpUntil > now || (instanceAlive && leaseLate(current, now)));
  if (!reads) return { kind: 'ask_owner', attached: false };
  if (!current.held || current.tailUntil > now) return { kind: 'ask_owner', attached: true };
  return { kind: 'take_over', record: current };
}

/**
 * planPlainGet on what the store holds now: the session's current GET, and the liveness of its
 * pump's instance where the lease lapsed lately. Rejects with a StoreError.
 */
export async function planFromStore(store: Pick<Store, 'readCurrentGet' | 'instanceAlive'>, sessionId: string, owner: string): Promise<PlainGetPlan> {
  const current = await store.readCurrentGet(sessionId);
  const now = Date.now();
  const alive = current !== null && leaseLate(current, now) && (await store.instanceAlive(current.pump));
  return planPlainGet(current, owner, now, alive);
}

export interface Asked {
  /** The owner's last answer: a stream that opened, or the answer to pass on (a 409 when still refused). */
  readonly response: UpstreamResponse;
  /** Cancels that answer's request. */
  readonly abort: UpstreamAbort;
}

export interface AskOwner {
  readonly store: Store;
  readonly sessionId: string;
  /** Sends the request; undefined when it could not be sent and was dealt with. */
  readonly ask: (abort: UpstreamAbort) => Promise<UpstreamResponse | undefined>;
  /** Whether a 409 is worth retrying now (a GET with the journal, whose client is still there). */
  readonly retry: () => boolean;
  /**
   * A plain GET: the plan, made before each attempt (a store that does not answer plans to ask).
   * Absent (a signal's fresh GET): a held GET of the session is asked to go at each 409.
   */
  readonly plan?: () => Promise<PlainGetPlan>;
}

/**
 * Asks the owner, retrying its 409 while `retry()` holds. `{ takeOver }` when the plan says to
 * take the session's held GET stream over (nothing was sent, or what was is cancelled); undefined
 * when `ask` gave no answer.
 */
export async function askOwner(a: AskOwner): Promise<Asked | { readonly takeOver: IncarnationRecord } | undefined> {
  for (let attempt = 1; ; attempt++) {
    const plan = a.plan ? await a.plan().catch(planWithoutStore) : undefined;
    if (plan?.kind === 'take_over') return { takeOver: plan.record };
    const abort = new UpstreamAbort();
    const response = await a.ask(abort);
    if (response === undefined) return undefined;
    if (response.statusCode !== 409 || attempt >= HELD_GET_ATTEMPTS || !a.retry()) return { response, abort };
    if (!a.plan && (await releaseHeldGet(a.store, a.sessionId)) === 'tailed') return { response, abort };
    await response.body.dump().catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, HELD_GET_BACKOFF_MS * attempt));
  }
}

function planWithoutStore(err: unknown): PlainGetPlan {
  if (!isStoreError(err)) throw err;
  // Nothing can be taken over without the store: the owner answers as it would without a journal.
  return { kind: 'ask_owner', attached: false };
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
