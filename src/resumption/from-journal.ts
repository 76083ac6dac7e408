/**
 * A continuation from the gateway's journal (CONTRACT.md §8 J3): the journaled events after the
 * cursor, each with its original cursor (re-encoded from its position: the codec is
 * deterministic, E3), then the live stream, each position exactly once and in order.
 *
 * The replica's stream is never moved while its pump lives: the SDK server answers a second GET
 * 409 while the first is open, and a replica without a log cannot replay what it sent meanwhile.
 * - The pump is on this instance: after the journal's events up to the last one the pump passed
 *   on, the client attaches to the pump's stream in memory (pumps.ts), with no store in between.
 * - The pump is on another instance: this one tails the journal. It reads strictly after the last
 *   position it sent, woken by the store's notes (a lost note only delays: it re-reads every
 *   TAIL_POLL_MS), and renews a tail lease (touchTail) so that the pump's hold lasts while a
 *   client is attached here.
 * - Once every journaled event was sent and the pump is gone (its stream ended, its hold expired,
 *   or its instance died and the lease ran out), what follows is decided anew (decide.ts) as a
 *   resumption from the last event sent, on the same response (resume.ts): nothing more (a POST
 *   stream whose responses all passed), the owner's log taking over, -32010 for the calls whose
 *   responses never reached the gateway, or a gap with the stream_reset notification. Not left to
 *   the client's reconnection: the SDK client reconnects a stream that carried no event without
 *   any Last-Event-ID, which would lose its place silently.
 */
import type { ServerResponse } from 'node:http';
import type { CursorCodec, CursorIssuer } from '../cursor/codec.js';
import { isStoreError } from '../errors.js';
import { responseIds } from '../jsonrpc.js';
import { journaledData, journaledWithCursor } from '../sse/serializer.js';
import type { JournalRead, JsonRpcId, Store } from '../store/types.js';
import type { Pumps } from '../streams/pumps.js';
import { pumpLives } from './decide.js';
import { pumpInstanceAlive } from './facts.js';

/** Events read from the journal at once: one store round trip each, bounded in memory. */
export const JOURNAL_READ_EVENTS = 256;
/** A tail re-reads this often when no note came (a lost note, or a pump that died silently). */
export const TAIL_POLL_MS = 1000;
/** While the journal lags behind this instance's pump, it is read again this often. */
const LAG_POLL_MS = 50;

export interface JournalContinuation {
  store: Store;
  pumps: Pumps;
  codec: CursorCodec;
  sessionId: string;
  incarnation: string;
  /** The cursor's position: the first event sent is the one after it. */
  seq: number;
  /** The first read, made before the response began (so that a store failure could still be a 503). */
  first: JournalRead;
  /** The pump lived when the decision was made: follow the live stream. */
  live: boolean;
  /**
   * How long the journal may lag behind what the local pump passed on (records written late while
   * the store did not answer, §7) before the continuation gives up: resumption.replayTimeoutMs.
   */
  lagMs: number;
  /** The lease of a client attached by tailing, renewed every third of it: resumption.journal.leaseMs. */
  leaseMs: number;
  res: ServerResponse;
}

export type JournalEnd = 'attached' | 'caught_up' | 'client_gone' | 'store_failed' | 'lagging';

/**
 * Sends the continuation on `res`, whose status line is written; resolves once it is over
 * (attached: at the pump's own end), with the last position sent.
 */
export async function continueFromJournal(c: JournalContinuation): Promise<{ end: JournalEnd; last: number }> {
  let last = c.seq;
  const end = await follow(c, (seq) => (last = seq));
  return { end, last };
}

async function follow(c: JournalContinuation, sent: (seq: number) => void): Promise<JournalEnd> {
  const { store, res } = c;
  const issuer = c.codec.issuer(c.sessionId, c.incarnation);
  let last = c.seq;
  // A note (or the client's leaving) since the last read: read again at once.
  let noted = false;
  let wake: (() => void) | undefined;
  const woken = () => {
    noted = true;
    wake?.();
  };
  res.once('close', woken);
  const tailing = c.live && c.pumps.get(c.incarnation) === undefined;
  const unwatch = tailing ? store.watchJournal(c.sessionId, c.incarnation, woken) : undefined;
  const touch = () => void store.touchTail(c.sessionId, c.incarnation, c.leaseMs).catch(() => undefined);
  let tailLease: NodeJS.Timeout | undefined;
  if (tailing) {
    touch();
    tailLease = setInterval(touch, c.leaseMs / 3);
    tailLease.unref();
  }
  const lagSince = performance.now();

  /** Writes the events after `last` up to `upTo`, as the client's socket takes them; how many. */
  const send = async (read: JournalRead, upTo: number): Promise<number> => {
    const events = read.events.filter((e) => e.seq > last && e.seq <= upTo);
    if (events.length === 0) return 0;
    const text = withCursors(issuer, events);
    last = events[events.length - 1]!.seq;
    sent(last);
    if (!res.write(text)) await drained(res);
    return events.length;
  };

  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      if (noted) return resolve();
      const timer = setTimeout(resolve, ms);
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });

  try {
    let read: JournalRead | null = c.first;
    for (;;) {
      const pump = c.live ? c.pumps.get(c.incarnation) : undefined;
      const sent = await send(read, pump ? pump.pipe.delivered : Infinity);
      if (res.destroyed) return 'client_gone';
      const { record } = read;
      if (pump) {
        // Everything up to what the pump passed on was sent: its next event follows, in memory.
        if (last >= pump.pipe.delivered) {
          if (!pump.pipe.attach(res)) return 'caught_up';
          await closed(res);
          return 'attached';
        }
        // The journal lags behind the pump: records written late after a store outage (§7).
        if (performance.now() - lagSince > c.lagMs) return 'lagging';
        await pause(LAG_POLL_MS);
      } else if (read.events.length < JOURNAL_READ_EVENTS) {
        // Nothing more journaled now. Over once the pump is gone (or a POST stream answered).
        if (last < record.head && sent === 0) {
          // The next position is not in the journal (below the window, or recorded without its
          // bytes): the client's reconnection from here is decided as such (J5).
          return 'caught_up';
        }
        if (last >= record.head) {
          const now = Date.now();
          const endedHere = c.pumps.endedHere(record);
          // A lease only late, its instance alive, still pumps (docs/journal.md#instance-liveness).
          const alive = await pumpInstanceAlive(record, now, endedHere, (id) => store.instanceAlive(id));
          const pumping = record.state === 'open' && pumpLives(record, now, endedHere, alive);
          const answered = record.kind === 'post' && record.pending.length === 0;
          if (!c.live || !pumping || answered) return 'caught_up';
          await pause(TAIL_POLL_MS);
        }
      }
      if (res.destroyed) return 'client_gone';
      noted = false;
      read = await store.readJournal(c.sessionId, c.incarnation, last, JOURNAL_READ_EVENTS);
      if (read === null) return 'caught_up';
    }
  } catch (err) {
    if (!isStoreError(err)) throw err;
    return 'store_failed';
  } finally {
    res.off('close', woken);
    unwatch?.();
    clearInterval(tailLease);
    // The pump's hold runs holdMs from now, and a plain GET that takes the stream over next
    // starts after what this client was written (streams/held-get.ts).
    if (tailing) void store.endTail(c.sessionId, c.incarnation, last).catch(() => undefined);
  }
}

/** Resolves once the client's socket took what was written, or the client went away. */
function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
  });
}

/** Resolves once the response is over, however it ended. */
function closed(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => (res.destroyed || res.writableFinished ? resolve() : res.once('close', () => resolve())));
}

/**
 * J4 after a gap: the events of a POST stream's journal after `after` that carry JSON-RPC
 * responses, each with its original cursor, as one text. The events between are not sent (the
 * signal said they are lost); a response that reached the gateway is never lost with them.
 */
export async function journaledResponses(
  store: Store,
  codec: CursorCodec,
  sessionId: string,
  incarnation: string,
  after: number,
): Promise<{ text: string; ids: readonly JsonRpcId[] }> {
  const issuer = codec.issuer(sessionId, incarnation);
  let text = '';
  const ids: JsonRpcId[] = [];
  let last = after;
  for (;;) {
    const read = await store.readJournal(sessionId, incarnation, last, JOURNAL_READ_EVENTS);
    const events = read?.events ?? [];
    const responses = events.filter((e) => {
      const answered = responseIds(journaledData(e.payload));
      ids.push(...answered);
      return answered.length > 0;
    });
    text += withCursors(issuer, responses);
    if (events.length < JOURNAL_READ_EVENTS) return { text, ids };
    last = events[events.length - 1]!.seq;
  }
}

/**
 * The calls a signal fails with -32010: those pending when the decision read the stream, less
 * those whose response the journal holds by the time it is read (a record that landed in
 * between): each call settles once, with its response where it reached the gateway (J4).
 */
export function unanswered(pending: readonly JsonRpcId[], answered: readonly JsonRpcId[]): JsonRpcId[] {
  const left = [...answered];
  return pending.filter((id) => {
    const at = left.indexOf(id);
    if (at < 0) return true;
    left.splice(at, 1);
    return false;
  });
}

/** Journaled events as the client gets them: each under its original cursor (E3), in one text. */
function withCursors(issuer: CursorIssuer, events: JournalRead['events']): string {
  const cursors = issuer.encode(events.map((e) => e.seq));
  return events.map((e, i) => journaledWithCursor(e.payload, cursors[i]!)).join('');
}
