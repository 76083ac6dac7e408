/**
 * Where a stream's records go, and what its records and their backlog need from the instance's
 * holder of unrecorded records (unrecorded.ts): the write to the store and the shared bounds.
 */
import type { EventBatch, RecordResult } from '../store/types.js';

/** Where a stream's records go: its incarnation, as the attachment that writes it. */
export interface RecordTarget {
  readonly sessionId: string;
  readonly incarnation: string;
  readonly attach: number;
  /** A lazily recorded incarnation (POST streams): created by its first batch. */
  readonly create?: EventBatch['create'];
  /** J2, J3: the instance that pumps a journaled stream, named in each of its batches (its lease). */
  readonly pump?: EventBatch['pump'];
}

export type StopReason = 'stream_limit' | 'total_limit' | 'refused' | 'shutdown';

/** A stream's records held for a late write (record-backlog.ts), as the flusher serves them. */
export interface Backlog {
  /** Something is waiting to be written. */
  readonly pending: boolean;
  /** One late write. */
  writeNext(): Promise<'ok' | 'store_failed'>;
  /** Gives up what is held; returns the events given up. */
  stop(reason: StopReason): number;
}

/** The instance's side of every stream's records: the store, its state, the bounds, the counts. */
export interface RecordsHost {
  /** The store did not answer lately: records are held rather than attempted. */
  readonly down: boolean;
  /** Stopped: nothing more is written. */
  readonly closed: boolean;
  /** Writes a batch now, retrying within `retryMs`; rejects with a StoreError after that. */
  write(target: RecordTarget, batch: EventBatch, retryMs: number): Promise<RecordResult>;
  storeFailed(): void;
  /** The bound of one stream's held bytes. */
  readonly streamBytes: number;
  /** Whether `cost` more bytes fit in the total bound. */
  fits(cost: number): boolean;
  held(backlog: Backlog, events: number, bytes: number): void;
  released(events: number, bytes: number): void;
  emptied(backlog: Backlog): void;
  stopped(reason: StopReason, events: number, target: RecordTarget): void;
  failed(err: unknown): void;
  lateWrite(): void;
}
