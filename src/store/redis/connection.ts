/**
 * The client for the configured topology (one node, a Cluster, or a master found through
 * Sentinel), every one failing fast: no offline queue for callers, a timeout on every command,
 * and reconnection forever in the background (CONTRACT.md §7).
 */

import type { ConnectionOptions as TlsOptions } from 'node:tls';
import { Cluster, Redis, type ClusterNode, type RedisOptions } from 'ioredis';
import { SentinelConnector } from './sentinel-connector.js';
import { GuardedStandaloneConnector } from './socket-errors.js';

/** The TLS of every rediss:// connection (store.tls, its files read): certificates in PEM. */
export type StoreTls = Pick<TlsOptions, 'ca' | 'cert' | 'key' | 'servername' | 'rejectUnauthorized'>;

/** Where the store's Redis is and how long to wait for it. */
export interface ConnectionOptions {
  /** One Redis node; with `sentinel`, only its user, password, database and TLS (the master's). */
  url: string;
  /** A Redis Cluster, from these seed nodes (each a URL, all with the same scheme and credentials). */
  cluster?: { readonly nodes: readonly string[] } | undefined;
  /** The master that these sentinels (URLs, their own credentials) know by `name`. */
  sentinel?: { readonly nodes: readonly string[]; readonly name: string } | undefined;
  /** Applied to every connection whose URL is rediss:// (a discovered cluster node: as its seeds); unset: Node's defaults. */
  tls?: StoreTls | undefined;
  connectTimeoutMs: number;
  commandTimeoutMs: number;
  /** Operations issued in one event-loop turn leave in one write (store.autoPipelining; never for a subscriber). */
  autoPipelining?: boolean;
}

/**
 * Reconnect forever, backing off to 200 ms at most, so service comes back by itself, and soon: the
 * records of events that flowed during an outage are written within a second of the store's return
 * (CONTRACT.md §7), which a reconnection a second late would spend alone. An attempt is one
 * connection per 200 ms to a store that is down: nothing to it.
 */
const backoff = (attempt: number): number => Math.min(50 * 2 ** attempt, 200);

/** Where one node is and how to log in to it, from its URL; nothing of it is ever logged. */
function nodeOptions(url: string, tls: StoreTls = {}): { host: string; port: number; username?: string; password?: string; db?: number; tls?: StoreTls } {
  const parsed = new URL(url);
  const db = Number(parsed.pathname.slice(1) || '0');
  return {
    // URL keeps the brackets of an IPv6 literal; the socket wants the bare address.
    host: parsed.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: Number(parsed.port || '6379'),
    ...(parsed.username ? { username: decodeURIComponent(parsed.username) } : {}),
    ...(parsed.password ? { password: decodeURIComponent(parsed.password) } : {}),
    ...(Number.isSafeInteger(db) && db > 0 ? { db } : {}),
    ...(parsed.protocol === 'rediss:' ? { tls: { ...tls } } : {}),
  };
}

/**
 * What a client is for: commands (the store's scripts), or a subscriber of sharded channels
 * (src/store/redis/subscriber.ts), which re-subscribes itself after a reconnection and, on a
 * Cluster, keeps one connection to each shard whose channels it listens to.
 */
export type ConnectionRole = 'commands' | 'subscriber';

/** A subscriber re-subscribes every channel itself at each 'ready' (ioredis would skip one whose SSUBSCRIBE failed). */
function resubscribe(role: ConnectionRole): Pick<RedisOptions, 'autoResubscribe'> {
  return { autoResubscribe: role !== 'subscriber' };
}

/** A client for the configured topology, every one with the same fail-fast settings. */
export function connect(opts: ConnectionOptions, role: ConnectionRole = 'commands'): Redis | Cluster {
  // store.autoPipelining: many streams' records issued in one turn leave in one write, their
  // replies come in one read. Set where ioredis batches: the client, or the cluster itself.
  const enableAutoPipelining = role === 'commands' && opts.autoPipelining === true;
  const failFast = {
    // A host that drops packets must not hold a connection attempt open: fail it and retry.
    connectTimeout: opts.connectTimeoutMs,
    // A blocked or paused Redis must become a fast 503, never a request that hangs (CONTRACT §7).
    // withDeadline() bounds each operation at commandTimeoutMs without losing replies that arrived
    // during an event-loop stall; this client-side timeout, set to twice that, is only a backstop.
    commandTimeout: opts.commandTimeoutMs * 2,
    // A command cut off by a lost connection fails at once instead of waiting to be retried...
    maxRetriesPerRequest: 0,
    // ...and is never resent later, after its caller has been told that it failed.
    autoResendUnfulfilledCommands: false,
    // CLIENT SETINFO names the library to the server: a command the store's user need not be
    // granted (docs/security.md, Redis ACL).
    disableClientInfo: true,
  } satisfies RedisOptions;
  // A socket's second error must not end the process (src/store/redis/socket-errors.ts).
  const Connector = GuardedStandaloneConnector as RedisOptions['Connector'];

  if (opts.cluster) {
    const seeds = opts.cluster.nodes.map((url) => nodeOptions(url, opts.tls));
    // The cluster logs in to every node it discovers the same way; the configuration checks that
    // the seeds agree (src/config/load.ts).
    const { username, password, tls } = seeds[0] ?? {};
    return new Cluster(
      seeds.map(({ host, port }): ClusterNode => ({ host, port })),
      {
        redisOptions: { ...failFast, Connector, username, password, tls },
        // Not to queue callers' commands (run() refuses them while the cluster is not ready), but
        // because ioredis needs it to send a command to a node whose connection is still being
        // set up: without it, its own ready check and concurrent first commands to a node fail.
        // Those wait in the node's queue, bounded by commandTimeout like any command.
        enableOfflineQueue: true,
        clusterRetryStrategy: backoff,
        // A node lost or a cluster down fails the command at once (0: no delayed retry, which
        // would resend it after its caller has been told it failed); MOVED and ASK are still
        // followed at once, and a MOVED refreshes the slot map, so service follows a failover.
        retryDelayOnFailover: 0,
        retryDelayOnClusterDown: 0,
        slotsRefreshTimeout: opts.connectTimeoutMs,
        enableAutoPipelining,
        // Every script writes (reads extend TTLs): masters only.
        scaleReads: 'master',
        // SSUBSCRIBE goes to the shard of its channel's slot, and follows it after a failover.
        shardedSubscribers: role === 'subscriber',
      },
    );
  }

  if (opts.sentinel) {
    const sentinels = opts.sentinel.nodes.map((url) => nodeOptions(url, opts.tls));
    const { username: sentinelUsername, password: sentinelPassword, tls: sentinelTLS } = sentinels[0] ?? {};
    const { username, password, db, tls } = nodeOptions(opts.url, opts.tls);
    const client = new Redis({
      ...failFast,
      Connector: SentinelConnector as unknown as RedisOptions['Connector'],
      enableAutoPipelining,
      sentinels: sentinels.map(({ host, port }) => ({ host, port })),
      name: opts.sentinel.name,
      // Every script writes: the master only, never a replica.
      role: 'master',
      sentinelUsername,
      sentinelPassword,
      sentinelTLS,
      username,
      password,
      db,
      tls,
      enableTLSForSentinelMode: tls !== undefined,
      sentinelCommandTimeout: opts.commandTimeoutMs,
      // All sentinels unreachable: ask them again, backing off as above.
      sentinelRetryStrategy: backoff,
      // The failover detector's connection to a sentinel that restarted (ioredis waits a minute).
      sentinelReconnectStrategy: backoff,
      // Reconnect as soon as a sentinel announces a new master (+switch-master)...
      failoverDetector: true,
      // ...or as soon as the old one answers as a replica; the failed command is not resent.
      reconnectOnError: (err) => err.message.startsWith('READONLY'),
      enableOfflineQueue: false,
      retryStrategy: backoff,
      ...resubscribe(role),
    });
    // ioredis links its own Sentinel connector to the client ('sentinelReconnecting',
    // 'failoverSubscribed'); a connector given as an option it leaves unlinked.
    (client as unknown as { connector: { emitter: unknown } }).connector.emitter = client;
    return client;
  }

  const { host, port, username, password, db, tls } = nodeOptions(opts.url, opts.tls);
  return new Redis({
    ...failFast,
    Connector,
    enableAutoPipelining,
    host,
    port,
    username,
    password,
    db,
    tls,
    // No queue while disconnected: a command fails at once instead of waiting for a reconnection.
    enableOfflineQueue: false,
    retryStrategy: backoff,
    ...resubscribe(role),
  });
}
