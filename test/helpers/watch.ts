/** Awaiting what a client receives, without sleeping: collections that resolve waiters. */
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { Agent, fetch as undiciFetch } from 'undici';

/** A list that a test can wait on until it holds enough items. */
export class Collected<T> {
  readonly items: T[] = [];
  #waiters: { count: number; resolve: () => void }[] = [];

  push(item: T): void {
    this.items.push(item);
    this.#waiters = this.#waiters.filter((w) => {
      if (this.items.length < w.count) return true;
      w.resolve();
      return false;
    });
  }

  /** Resolves once `count` items arrived; rejects after `timeoutMs` with what did arrive. */
  until(count: number, timeoutMs = 10_000): Promise<T[]> {
    if (this.items.length >= count) return Promise.resolve(this.items);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`waited for ${count} items, got ${this.items.length}: ${JSON.stringify(this.items)}`)),
        timeoutMs,
      );
      this.#waiters.push({
        count,
        resolve: () => {
          clearTimeout(timer);
          resolve(this.items);
        },
      });
    });
  }
}

/** The `seq` of every logging notification the client receives (the demo's `emit` tool). */
export function collectLogging(client: Client): Collected<number> {
  const seen = new Collected<number>();
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    seen.push((n.params.data as { seq: number }).seq);
  });
  return seen;
}

/** The params of every gateway stream_reset notification the client receives (the signal, §5). */
export function collectResets(client: Client): Collected<{ reason: string; lastEventId: string }> {
  const seen = new Collected<{ reason: string; lastEventId: string }>();
  client.fallbackNotificationHandler = async (n) => {
    if (n.method === 'notifications/gateway/stream_reset') seen.push(n.params as { reason: string; lastEventId: string });
  };
  return seen;
}

/**
 * A fetch for the SDK client that records every GET and holds back reconnections (GETs with
 * Last-Event-ID) until the test opens the gate, so that what happens while the client is away is
 * under the test's control.
 */
export function gatedFetch() {
  let open!: () => void;
  let gate = new Promise<void>((resolve) => (open = resolve));
  const reconnections = new Collected<string>();
  const streams = new Collected<Response>();
  const fetcher = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const headers = new Headers(init?.headers);
    if ((init?.method ?? 'GET') === 'GET') {
      const lastEventId = headers.get('last-event-id');
      if (lastEventId !== null) {
        reconnections.push(lastEventId);
        await gate;
        // A connection of its own, so that the balancer (not a pooled keep-alive socket) decides
        // where the reconnection lands.
        const response = (await undiciFetch(input as string, { ...(init as object), dispatcher: new Agent({ pipelining: 0 }) })) as unknown as Response;
        streams.push(response);
        return response;
      }
      const response = await fetch(input, init);
      streams.push(response);
      return response;
    }
    return fetch(input, init);
  };
  return {
    fetch: fetcher as typeof fetch,
    /** Lets held and later reconnections through. */
    open: () => open(),
    /** Holds reconnections again. */
    close: () => {
      gate = new Promise<void>((resolve) => (open = resolve));
    },
    reconnections,
    /** Responses to the client's GETs (its standalone stream and its reconnections). */
    streams,
  };
}
