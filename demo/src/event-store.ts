import { randomBytes } from 'node:crypto';
import type { EventId, EventStore, StreamId } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';

/**
 * The demo replica's event log: one bounded FIFO shared by every stream (and, through `scoped`,
 * every session) of the process.
 *
 * Unlike the SDK's example store, stream membership is recorded, never parsed out of the event id:
 * the standalone GET stream is called `_GET_stream`, which an id split at '_' cannot recover.
 *
 * Failure contract (what the gateway's gap check relies on): a replay either sends every event of
 * the stream after the given id, in order, or throws `ReplayRefusedError` before the SDK hands out
 * the response. The SDK answers a throw from `replayEventsAfter` with HTTP 500
 * `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Error replaying events"},"id":null}` and
 * discards whatever was already written to the unsent stream. Resolving '' instead would give a
 * 200 stream registered under the id '' that never carries anything: indistinguishable from "no
 * newer events", which is exactly the silent gap we must not produce.
 *
 * `getStreamIdForEventId` is deliberately not implemented: with it the SDK answers 409 to a resume
 * while the old stream is still attached (e.g. the replica has not yet noticed a proxy closing it);
 * without it the resume takes the stream over and closes the predecessor, which is what a client
 * that reconnects after a network cut needs.
 */
export class BoundedEventStore implements EventStore {
  readonly maxEvents: number;
  /** Insertion-ordered, so the first key is always the oldest event: O(1) eviction. */
  private readonly events = new Map<EventId, StoredEvent>();
  private readonly streams = new Map<StreamId, StreamLog>();
  /** Random per store, so ids issued by an earlier process on the same port are never accepted. */
  private readonly incarnation = randomBytes(4).toString('hex');
  private nextStreamNo = 1;
  private nextSeq = 1;

  constructor(opts: { maxEvents: number }) {
    if (!Number.isInteger(opts.maxEvents) || opts.maxEvents < 1) {
      throw new RangeError(`maxEvents must be a positive integer, got ${opts.maxEvents}`);
    }
    this.maxEvents = opts.maxEvents;
  }

  get size(): number {
    return this.events.size;
  }

  async storeEvent(streamId: StreamId, message: JSONRPCMessage): Promise<EventId> {
    let stream = this.streams.get(streamId);
    if (stream === undefined) {
      stream = { no: this.nextStreamNo++, entries: [], head: 0, offset: 0 };
      this.streams.set(streamId, stream);
    }
    const id = `${this.incarnation}-${stream.no}-${this.nextSeq++}`;
    const event: StoredEvent = { id, streamId, message, pos: stream.offset + stream.entries.length };
    stream.entries.push(event);
    this.events.set(id, event);
    if (this.events.size > this.maxEvents) this.evictOldest();
    return id;
  }

  async replayEventsAfter(
    lastEventId: EventId,
    { send }: { send: (eventId: EventId, message: JSONRPCMessage) => Promise<void> },
  ): Promise<StreamId> {
    const last = this.events.get(lastEventId);
    if (last === undefined) throw new ReplayRefusedError(lastEventId);
    const { streamId } = last;
    const stream = this.streams.get(streamId) as StreamLog;
    // Walk by position rather than over a snapshot: events stored while `send` awaits are replayed
    // too, since the SDK only attaches the live stream once this returns.
    for (let pos = last.pos + 1; ; pos++) {
      const end = stream.offset + stream.entries.length;
      const current = this.streams.get(streamId);
      if (current !== stream) {
        // Emptied (and perhaps begun afresh) while we were sending: complete only if nothing was
        // left to send and nothing new arrived.
        if (pos >= end && current === undefined) return streamId;
        throw new ReplayRefusedError(lastEventId);
      }
      if (pos >= end) return streamId;
      // Evicted while we were sending: the tail is no longer complete.
      if (pos < stream.offset + stream.head) throw new ReplayRefusedError(lastEventId);
      const event = stream.entries[pos - stream.offset] as StoredEvent;
      await send(event.id, event.message);
    }
  }

  /** The stream an id belongs to, or undefined when it was never issued or is evicted. */
  streamOf(eventId: EventId): StreamId | undefined {
    return this.events.get(eventId)?.streamId;
  }

  /** Drops all but the newest `keepLast` events, as if the log had been trimmed by its bound. */
  trim(keepLast: number): void {
    if (!Number.isInteger(keepLast) || keepLast < 0) {
      throw new RangeError(`keepLast must be a non-negative integer, got ${keepLast}`);
    }
    while (this.events.size > keepLast) this.evictOldest();
  }

  clear(): void {
    this.events.clear();
    this.streams.clear();
  }

  /**
   * A view for one MCP session. The SDK names every session's standalone stream `_GET_stream`, so
   * sessions sharing this log must not share stream ids: the view prefixes them, and refuses ids
   * of other sessions (a foreign id is as unknown as an evicted one).
   */
  scoped(scope: string): EventStore {
    const prefix = `${scope}/`;
    return {
      storeEvent: (streamId, message) => this.storeEvent(prefix + streamId, message),
      replayEventsAfter: async (lastEventId, handlers) => {
        if (!this.streamOf(lastEventId)?.startsWith(prefix)) throw new ReplayRefusedError(lastEventId);
        const streamId = await this.replayEventsAfter(lastEventId, handlers);
        return streamId.slice(prefix.length);
      },
    };
  }

  private evictOldest(): void {
    const oldest = this.events.values().next();
    if (oldest.done) return;
    const event = oldest.value;
    this.events.delete(event.id);
    const stream = this.streams.get(event.streamId) as StreamLog;
    // FIFO across all streams implies FIFO within each: the evicted event is its stream's head.
    stream.head++;
    if (stream.head === stream.entries.length) {
      this.streams.delete(event.streamId);
    } else if (stream.head >= 64 && stream.head * 2 >= stream.entries.length) {
      // Compact once the dead prefix dominates, keeping eviction amortised O(1).
      stream.entries = stream.entries.slice(stream.head);
      stream.offset += stream.head;
      stream.head = 0;
    }
  }
}

/** Thrown by a replay that cannot send the complete tail; `code` is stable, the message is not. */
export class ReplayRefusedError extends Error {
  readonly code = 'DEMO_EVENT_NOT_RETAINED';
  constructor(readonly lastEventId: EventId) {
    super(`event ${JSON.stringify(lastEventId.slice(0, 128))} is not retained: nothing replayed`);
    this.name = 'ReplayRefusedError';
  }
}

interface StoredEvent {
  readonly id: EventId;
  readonly streamId: StreamId;
  readonly message: JSONRPCMessage;
  /** Absolute position in its stream; entries[pos - offset] while retained. */
  readonly pos: number;
}

interface StreamLog {
  /** Short number used in ids, for humans reading logs; ids are unique through the sequence. */
  readonly no: number;
  entries: StoredEvent[];
  /** Index in `entries` of the oldest retained event. */
  head: number;
  /** Number of entries dropped from the front of `entries` by compaction. */
  offset: number;
}

/** How a RenumberingEventStore numbers a stream's events after a Last-Event-ID. */
export type Renumbering = 'from-cursor' | 'from-1';

/**
 * A misbuilt replica's event log, to show what the gateway does about one (its CONTRACT.md §4 E6):
 * it accepts any Last-Event-ID of its own, replays nothing, and numbers the stream's next events
 * anew, on from the cursor (`from-cursor`: the ids of events the client may hold already, now with
 * other payloads) or from 1 again (`from-1`). It is the failure of resumption behind a load
 * balancer, at the owner: a server whose event ids are a counter, not a log. One per session.
 */
export class RenumberingEventStore implements EventStore {
  private readonly next = new Map<StreamId, number>();

  constructor(readonly mode: Renumbering) {}

  async storeEvent(streamId: StreamId, _message: JSONRPCMessage): Promise<EventId> {
    const n = this.next.get(streamId) ?? 1;
    this.next.set(streamId, n + 1);
    return `${streamId}#${n}`;
  }

  async replayEventsAfter(lastEventId: EventId): Promise<StreamId> {
    const at = lastEventId.lastIndexOf('#');
    const n = Number(lastEventId.slice(at + 1));
    if (at <= 0 || !Number.isSafeInteger(n)) throw new ReplayRefusedError(lastEventId);
    const streamId = lastEventId.slice(0, at);
    this.next.set(streamId, this.mode === 'from-cursor' ? n + 1 : 1);
    return streamId;
  }
}
