/**
 * One subscriber connection per gateway, shared by everything that listens to the store's sharded
 * channels (SSUBSCRIBE, Redis 7: on a Cluster a channel lives in its slot's shard, so a message
 * never crosses the cluster bus; a Cluster gets one connection per shard it listens to). Created on
 * the first listener, it multiplexes channels to listeners: a channel is subscribed while it has a
 * listener. After a reconnection every channel is subscribed again (a Cluster's own subscriber
 * group does so after a failover or a slot move). Best effort, as pub/sub is: a message published
 * while the connection is down is lost, so a listener must not be the only way its owner learns.
 */

import type { Cluster, Redis } from 'ioredis';
import { connect, type ConnectionOptions } from './connection.js';

export type ChannelListener = (message: string) => void;

export interface ChannelSubscriber {
  /** Calls `listener` with each message of `channel` from now on; returns its removal. */
  listen(channel: string, listener: ChannelListener): () => void;
  /** Closes the connection; listening again afterwards is refused. */
  close(): void;
}

export function createSubscriber(opts: ConnectionOptions, onError: (err: Error) => void): ChannelSubscriber {
  const channels = new Map<string, Set<ChannelListener>>();
  let client: Redis | Cluster | undefined;
  let closed = false;

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
    }
    return created;
  }

  function subscribe(target: Redis | Cluster, names: string[]): void {
    // A Cluster queues a subscription until it is ready and then sends it to the channel's shard;
    // a single node sends it now, or at its next 'ready'.
    if (opts.cluster === undefined && target.status !== 'ready') return;
    for (const name of names) target.ssubscribe(name).catch(onError);
  }

  return {
    listen(channel: string, listener: ChannelListener): () => void {
      if (closed) throw new Error('the subscriber is closed');
      let listeners = channels.get(channel);
      if (listeners === undefined) {
        listeners = new Set();
        channels.set(channel, listeners);
        client ??= open();
        subscribe(client, [channel]);
      }
      listeners.add(listener);
      return () => {
        const current = channels.get(channel);
        if (current === undefined || !current.delete(listener) || current.size > 0) return;
        channels.delete(channel);
        if (client !== undefined && (opts.cluster !== undefined || client.status === 'ready')) client.sunsubscribe(channel).catch(onError);
      };
    },

    close(): void {
      closed = true;
      channels.clear();
      client?.disconnect();
    },
  };
}
