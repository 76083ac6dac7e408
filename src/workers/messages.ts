/**
 * What the primary and its workers say to each other over the cluster's IPC channel. The primary
 * asks (a request carries an id), the worker answers with the same id.
 */
import type { MetricObjectWithValues, MetricValue } from 'prom-client';
import type { Config } from '../config/schema.js';

/** Primary to worker. */
export type ToWorker =
  | { readonly kind: 'start'; readonly config: Config; readonly file: string; readonly slot: number }
  | { readonly kind: 'reload'; readonly id: number; readonly config: Config }
  | { readonly kind: 'metrics'; readonly id: number }
  /** A GET on the worker's admin routes (readiness, /debug), answered as its admin listener would. */
  | { readonly kind: 'admin'; readonly id: number; readonly url: string };

/** Worker to primary. */
export type FromWorker =
  /** Sent once the worker listens for messages: what the primary sends before that is lost. */
  | { readonly kind: 'hello' }
  | { readonly kind: 'listening'; readonly instance: string; readonly mcpUrl: string }
  | { readonly kind: 'reply'; readonly id: number; readonly value: unknown }
  | { readonly kind: 'failed'; readonly id: number; readonly error: string };

export type WorkerMetrics = MetricObjectWithValues<MetricValue<string>>[];

export interface AdminAnswer {
  readonly status: number;
  readonly contentType: string | undefined;
  readonly body: string;
}

export interface ReloadAnswer {
  readonly result: string;
  readonly applied: readonly string[];
  readonly notApplied: readonly string[];
}

export function isMessage<K extends string>(value: unknown, kind: K): value is { kind: K } {
  return typeof value === 'object' && value !== null && (value as { kind?: unknown }).kind === kind;
}
