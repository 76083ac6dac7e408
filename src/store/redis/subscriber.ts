/**
 * One subscriber connection per gateway, shared by everything that listens to the store's sharded
 * channels (SSUBSCRIBE, Redis 7: on a Cluster a channel lives in its slot's shard, so a message
 * never crosses the cluster bus; a Cluster gets one connection per shard it listens to). Created on
 * the first listener, it multiplexes channels to listeners: a channel is subscribed while it has a
 * listener. After a reconnection every channel is subscribed again (a Cluster's own subscriber
 * group does so after a failover or a slot move). Best effort, as pub/sub is: a message published
 * while the connection is down is lost, so a listener must not be the only way its owner learns.
 * A listener that must know when it may have missed one is told when its channel goes live (its
 * subscription confirmed) and when the connection drops (a single node or Sentinel; a Cluster's
 * subscriber group moves between shards without a word).
 */

import type { Cluster, Redis } from 'ioredis';
import { connect, type ConnectionOptions } from './connection.js';

export type ChannelListener = (message: string) => void;
/** true: the channel's subscription is confirmed; false: the connection dropped, messages may be missed. */
export type LiveListener = (live: boolean) => void;

export interface ChannelSubscriber {
  /**
   * Calls `listener` with each message of `channel` from now on, and `live` (if given) whenever the
   * channel's subscription is confirmed or lost; returns their removal.
   */
  listen(channel: string, listener: ChannelListener, live?: LiveListener): () => void;
  /** Closes the connection; listening again afterwards is refused. */
  close(): void;
}

export function createSubscriber(opts: ConnectionOptions, onError: (err: Error) => void): ChannelSubscriber {
  const channels = new Map<string, Set<ChannelListener>>();
  const liveListeners = new Map<string, Set<LiveListener>>();
  /** Channels whose subscription on the current connection is confirmed. */
  const confirmed = new Set<string>();
  let client: Redis | Cluster | undefined;
  let closed = false;

  function tellLive(channel: string, live: boolean): void {
    for (const listener of liveListeners.get(channel) ?? []) listener(live);
  }

  function deliver(channel: string, message: string): void {
    for (const listener of channels.get(channel) ?? []) {
      try {
        listener(message);
      } catch (err) {
        onError(err instanceof Error ? err : new Error(String(err)));
      }
    }
  }

  function open(): Redis | Cluster {
    const created = connect(opts, 'subscriber');
    // Without a listener, an 'error' event would crash the process.
    created.on('error', onError);
    created.on('smessage', deliver);
    if (!opts.cluster) {
      // Each (re)connection starts with no subscription; the ones sent before it are refused.
      created.on('ready', () => {
        if (channels.size > 0) subscribe(created, [...channels.keys()]);
      });
      created.on('close', () => {
        const lost = [...confirmed];
        confirmed.clear();
        for (const channel of lost) tellLive(channel, false);
      });
    }
    return created;
  }

  function subscribe(target: Redis | Cluster, names: string[]): void {
    // A Cluster queues a subscription until it is ready and then sends it to the channel's shard;
    // a single node sends it now, or at its next 'ready'.
    if (opts.cluster === undefined && target.status !== 'ready') return;
    for (const name of names) {
      target.ssubscribe(name).then(() => {
        // A confirmation that arrives after its connection closed confirms nothing.
        if (!channels.has(name) || (opts.cluster === undefined && target.status !== 'ready') || confirmed.has(name)) return;
        confirmed.add(name);
        tellLive(name, true);
      }, onError);
    }
  }

  return {
    listen(channel: string, listener: ChannelListener, live?: LiveListener): () => void {
      if (closed) throw new Error('the subscriber is closed');
      if (live !== undefined) {
        let lives = liveListeners.get(channel);
        if (lives === undefined) liveListeners.set(channel, (lives = new Set()));
        lives.add(live);
        if (confirmed.has(channel)) queueMicrotask(() => live(true));
      }
      let listeners = channels.get(channel);
      if (listeners === undefined) {
        listeners = new Set();
        channels.set(channel, listeners);
        client ??= open();
        subscribe(client, [channel]);
      }
      listeners.add(listener);
      return () => {
        if (live !== undefined) liveListeners.get(channel)?.delete(live);
        const current = channels.get(channel);
        if (current === undefined || !current.delete(listener) || current.size > 0) return;
        channels.delete(channel);
        liveListeners.delete(channel);
        confirmed.delete(channel);
        if (client !== undefined && (opts.cluster !== undefined || client.status === 'ready')) client.sunsubscribe(channel).catch(onError);
      };
    },

    close(): void {
      closed = true;
      channels.clear();
      liveListeners.clear();
      confirmed.clear();
      client?.disconnect();
    },
  };
}
