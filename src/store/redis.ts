/**
 * The Redis store: the fleet of gateways shares one Redis, a Redis Cluster, or a master found
 * through Sentinel. Every multi-step update is one Lua script, so two gateways never interleave
 * inside it, and every script's keys share one hash tag, so each runs on one cluster node.
 * Failures of any kind (disconnected, timed out, script error, malformed record, a failover in
 * progress) surface as StoreError, fast: there is no offline queue and every command has a
 * timeout (CONTRACT.md §7).
 */

import { createHash } from 'node:crypto';
import { Cluster, Redis, type ClusterNode, type RedisOptions } from 'ioredis';
import { GatewayError, StoreError } from '../errors.js';
import type {
  EventBatch,
  IncarnationRecord,
  IncarnationView,
  JsonRpcId,
  NewIncarnation,
  NewSession,
  RecordResult,
  SessionRecord,
  SessionState,
  Store,
} from './types.js';

export interface RedisStoreOptions {
  /** One Redis node; with `sentinel`, only its user, password, database and TLS (the master's). */
  url: string;
  /** A Redis Cluster, from these seed nodes (each a URL, all with the same scheme and credentials). */
  cluster?: { readonly nodes: readonly string[] } | undefined;
  /** The master that these sentinels (URLs, their own credentials) know by `name`. */
  sentinel?: { readonly nodes: readonly string[]; readonly name: string } | undefined;
  /** Namespace of every key; must not contain braces (they would become the cluster hash tag). */
  keyPrefix: string;
  connectTimeoutMs: number;
  commandTimeoutMs: number;
  /** Errors the client reports outside any command (lost connection, failed reconnect). */
  onError?: (err: Error) => void;
}

/** Creates a session if no record has its id. KEYS: session. ARGV: sessionId, owner, ownerEpoch, createdAt, idleTtlMs. */
const BIND_SESSION_LUA = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'sessionId', ARGV[1], 'owner', ARGV[2], 'ownerEpoch', ARGV[3],
  'state', 'active', 'createdAt', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`;

/**
 * Lua shared by the scripts that touch a session: its fields in toRecord()'s order, extending an
 * active one's idle TTL; false when there is none. The key is a parameter: it is not KEYS[1] in
 * every script.
 */
const TOUCH_SESSION_FUNCTION_LUA = `
local function touchSession(key, idleTtlMs)
  local f = redis.call('HMGET', key, 'sessionId', 'owner', 'ownerEpoch', 'state', 'createdAt')
  if not f[1] then return false end
  if f[4] == 'active' then redis.call('PEXPIRE', key, idleTtlMs) end
  return f
end
`;

/** Reads a session, extending an active one's idle TTL. KEYS: session. ARGV: idleTtlMs. */
const TOUCH_SESSION_LUA = `${TOUCH_SESSION_FUNCTION_LUA}
return touchSession(KEYS[1], ARGV[1])
`;

/** Turns an active session into a tombstone; anything else stays as it is. KEYS: session. ARGV: state, tombstoneTtlMs. */
const END_SESSION_LUA = `
if redis.call('HGET', KEYS[1], 'state') ~= 'active' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`;

/** Compare-and-set of one replica's epoch ('' means none); returns the epoch in force. KEYS: epochs. ARGV: replicaId, expected, next. */
const RETIRE_REPLICA_EPOCH_LUA = `
local current = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if current ~= ARGV[2] then return current end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return ARGV[3]
`;

/*
 * Incarnations. The record is a hash (sessionId, owner, kind, state, head, base, attach, pending)
 * and its positions a list of the upstream ids of positions base..head, index = seq - base, ''
 * standing for null (position 0, and events the gateway made: an empty upstream id is no id).
 * Both keys always get the same TTL in the same script, so they live and die together; a record
 * whose list does not hold head - base + 1 entries (one key evicted without the other) counts as
 * not recorded, because its positions can no longer be trusted.
 */

/** Lua shared by the incarnation scripts. */
const INCARNATION_LUA_PRELUDE = `
local function recorded(head, base)
  return head ~= nil and base ~= nil and redis.call('LLEN', KEYS[2]) == head - base + 1
end
`;

/**
 * Lua shared by the scripts that create an incarnation (KEYS[1], KEYS[2]), so that both create it
 * alike: open, head 0, attach 1, position 0 with no upstream id. A positions list left without
 * its record (an eviction) is dropped first.
 */
const CREATE_INCARNATION_LUA = `
local function create(sessionId, owner, kind, pending, ttlMs)
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'sessionId', sessionId, 'owner', owner, 'kind', kind, 'state', 'open',
    'head', 0, 'base', 0, 'attach', 1, 'pending', pending)
  redis.call('RPUSH', KEYS[2], '')
  redis.call('PEXPIRE', KEYS[1], ttlMs)
  redis.call('PEXPIRE', KEYS[2], ttlMs)
end
`;

/**
 * Creates an incarnation, and makes it the session's current GET when asked and the session
 * exists; refuses an id that is recorded already. KEYS: incarnation, positions, session.
 * ARGV: incarnationId, sessionId, owner, kind, pending (JSON), supersede ('1' or '0'), ttlMs.
 */
const OPEN_INCARNATION_LUA = `${CREATE_INCARNATION_LUA}
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
create(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[7])
if ARGV[6] == '1' and redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('HSET', KEYS[3], 'getInc', ARGV[1])
end
return 1
`;

/**
 * Lua shared by the scripts that read an incarnation (KEYS: incarnation, positions, session): the
 * record, the session's current GET, and the upstream ids of positions afterSeq..head when
 * afterSeq is recorded (none otherwise), as toView() parses them; false when not recorded.
 */
const READ_INCARNATION_FUNCTION_LUA = `${INCARNATION_LUA_PRELUDE}
local function readIncarnation(afterSeq)
  local m = redis.call('HMGET', KEYS[1], 'sessionId', 'owner', 'kind', 'state', 'head', 'base', 'attach', 'pending')
  local head, base = tonumber(m[5]), tonumber(m[6])
  if not recorded(head, base) then return false end
  local seq = tonumber(afterSeq)
  local ids = {}
  if seq >= base and seq <= head then ids = redis.call('LRANGE', KEYS[2], seq - base, -1) end
  return { m, redis.call('HGET', KEYS[3], 'getInc'), ids }
end
`;

/**
 * Bumps attach, extending the TTL, and returns it with the incarnation read after the bump;
 * false when not recorded. KEYS: incarnation, positions, session. ARGV: ttlMs, afterSeq.
 */
const ATTACH_INCARNATION_LUA = `${READ_INCARNATION_FUNCTION_LUA}
local m = redis.call('HMGET', KEYS[1], 'head', 'base')
if not recorded(tonumber(m[1]), tonumber(m[2])) then return false end
local attach = redis.call('HINCRBY', KEYS[1], 'attach', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return { attach, readIncarnation(ARGV[2]) }
`;

/**
 * Appends a batch when its attachment is current and fromSeq is head + 1, settles the responded
 * requests, trims to maxPositions and extends the TTL; first creates the incarnation when asked to
 * open it and it has no record (never superseding: the session key is not among KEYS).
 * KEYS: incarnation, positions.
 * ARGV: attach, fromSeq, maxPositions, ttlMs, open ('1' or '0'), then sessionId, owner, kind and
 * pending (JSON) of the incarnation to open ('' each when open is '0'), then k, then k responded
 * ids (each as JSON), then n, then the n upstream ids ('' for null) joined by LF in one argument.
 *
 * One argument for all the ids, not one each: a batch holds thousands of events when a replica
 * streams fast, and the client's cost per argument was most of the gateway's cost per event. An SSE
 * id never contains LF (the line ends there), and the script checks that it finds exactly n.
 *
 * Pending ids are compared as the JSON text that JSON.stringify wrote, never decoded: cjson would
 * round large numbers, and 1 and "1" are different ids. The pending array is written by
 * JSON.stringify (no whitespace, strings and numbers only), which is what elements() splits.
 */
const RECORD_EVENTS_LUA = `${INCARNATION_LUA_PRELUDE}${CREATE_INCARNATION_LUA}
local function elements(json)
  local out, i = {}, 2
  while i < #json do
    local j
    if string.sub(json, i, i) == '"' then
      j = i + 1
      while true do
        j = string.find(json, '["\\\\]', j)
        if string.sub(json, j, j) == '"' then break end
        j = j + 2
      end
    else
      j = (string.find(json, ',', i, true) or #json) - 1
    end
    out[#out + 1] = string.sub(json, i, j)
    i = j + 2
  end
  return out
end

local k = tonumber(ARGV[10])
local n = tonumber(ARGV[11 + k])
local ids = {}
if n > 0 then
  local joined, at = ARGV[12 + k], 1
  while true do
    local lf = string.find(joined, '\\n', at, true)
    if lf == nil then
      ids[#ids + 1] = string.sub(joined, at)
      break
    end
    ids[#ids + 1] = string.sub(joined, at, lf - 1)
    at = lf + 1
  end
end
if #ids ~= n then return redis.error_reply('upstream ids: expected ' .. n .. ', found ' .. #ids) end

if ARGV[5] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then
  create(ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[4])
end

local m = redis.call('HMGET', KEYS[1], 'state', 'head', 'base', 'attach', 'pending')
local head, base = tonumber(m[2]), tonumber(m[3])
if not recorded(head, base) then return 'missing' end
local from = tonumber(ARGV[2])
if m[1] ~= 'open' or tonumber(m[4]) ~= tonumber(ARGV[1]) then return 'stale' end
if from ~= head + 1 then
  -- A retry of a batch that did land (its first attempt timed out on the client) is 'ok'.
  if from < base or from + n - 1 > head then return 'stale' end
  local have = redis.call('LRANGE', KEYS[2], from - base, from - base + n - 1)
  for i = 1, n do
    if have[i] ~= ids[i] then return 'stale' end
  end
  return 'ok'
end

-- In chunks: unpack() of too many values overflows the Lua stack.
for i = 1, n, 1000 do
  redis.call('RPUSH', KEYS[2], unpack(ids, i, math.min(i + 999, n)))
end
head = head + n

local pending = m[5]
if k > 0 then
  local kept = elements(pending)
  -- One response settles one request (a multiset, like the requests themselves).
  for r = 11, 10 + k do
    for p = 1, #kept do
      if kept[p] == ARGV[r] then
        table.remove(kept, p)
        break
      end
    end
  end
  pending = '[' .. table.concat(kept, ',') .. ']'
end

local max = tonumber(ARGV[3])
if head - base + 1 > max then
  redis.call('LTRIM', KEYS[2], -max, -1)
  base = head - max + 1
end
redis.call('HSET', KEYS[1], 'head', head, 'base', base, 'pending', pending)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 'ok'
`;

/** readIncarnation() (false when not recorded). KEYS: incarnation, positions, session. ARGV: afterSeq. */
const READ_INCARNATION_LUA = `${READ_INCARNATION_FUNCTION_LUA}
return readIncarnation(ARGV[1])
`;

/**
 * touchSession() of the session, then readIncarnation(); each part false when there is nothing.
 * KEYS: incarnation, positions, session. ARGV: idleTtlMs, afterSeq.
 */
const TOUCH_AND_READ_LUA = `${TOUCH_SESSION_FUNCTION_LUA}${READ_INCARNATION_FUNCTION_LUA}
return { touchSession(KEYS[3], ARGV[1]), readIncarnation(ARGV[2]) }
`;

/** Marks a recorded incarnation closed, leaving its TTL. KEYS: incarnation. */
const CLOSE_INCARNATION_LUA = `
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'state', 'closed') end
return 0
`;

/** Extends both keys of an incarnation (nothing if it is not recorded). KEYS: incarnation, positions. ARGV: ttlMs. */
const TOUCH_INCARNATION_LUA = `
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 0
`;

/** The first candidate ever set wins; no TTL, so it lives as long as the dataset. KEYS: secret. ARGV: candidate. */
const AGREE_SECRET_LUA = `
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
`;

/** The client once the scripts are defined on it (defineCommand adds these methods at run time). */
type ScriptedClient = (Redis | Cluster) & Scripts;

interface Scripts {
  gwBindSession(key: string, sessionId: string, owner: string, ownerEpoch: string, createdAt: number, idleTtlMs: number): Promise<number>;
  gwTouchSession(key: string, idleTtlMs: number): Promise<unknown>;
  gwEndSession(key: string, state: string, tombstoneTtlMs: number): Promise<number>;
  gwRetireReplicaEpoch(key: string, replicaId: string, expected: string, next: string): Promise<string>;
  gwOpenIncarnation(
    incKey: string, posKey: string, session: string,
    incarnationId: string, sessionId: string, owner: string, kind: string, pending: string, supersede: '1' | '0', ttlMs: number,
  ): Promise<number>;
  gwAttachIncarnation(incKey: string, posKey: string, session: string, ttlMs: number, afterSeq: number): Promise<unknown>;
  gwRecordEvents(incKey: string, posKey: string, ...args: (string | number)[]): Promise<string>;
  gwReadIncarnation(incKey: string, posKey: string, session: string, afterSeq: number): Promise<unknown>;
  gwTouchAndRead(incKey: string, posKey: string, session: string, idleTtlMs: number, afterSeq: number): Promise<unknown>;
  gwCloseIncarnation(incKey: string): Promise<number>;
  gwTouchIncarnation(incKey: string, posKey: string, ttlMs: number): Promise<number>;
  gwAgreeSecret(key: string, candidate: string): Promise<string>;
}

/**
 * The key of a session's record. The hash tag is a digest of the id, not the id itself: a raw id
 * may contain braces, which would move the tag and split one session's keys across cluster slots.
 */
export function sessionKey(keyPrefix: string, sessionId: string): string {
  return `${keyPrefix}:{${sessionTag(sessionId)}}:session`;
}

/**
 * The record of an incarnation, in its session's slot, so that one script can update both. The
 * id comes last and raw: braces after the tag do not move it.
 */
export function incarnationKey(keyPrefix: string, sessionId: string, incarnationId: string): string {
  return `${keyPrefix}:{${sessionTag(sessionId)}}:inc:${incarnationId}`;
}

/**
 * The positions of an incarnation. Not `inc:<id>:ids`: an incarnation whose id ends in `:ids`
 * would then share a key with another one's positions.
 */
export function positionsKey(keyPrefix: string, sessionId: string, incarnationId: string): string {
  return `${keyPrefix}:{${sessionTag(sessionId)}}:pos:${incarnationId}`;
}

/** The fleet's cursor secret (E2). */
export function secretKey(keyPrefix: string): string {
  return `${keyPrefix}:{fleet}:cursor-secret`;
}

function sessionTag(sessionId: string): string {
  return createHash('sha1').update(sessionId).digest('base64url');
}

/** The one hash that holds every replica's fleet epoch. */
export function epochsKey(keyPrefix: string): string {
  return `${keyPrefix}:{fleet}:epochs`;
}

/**
 * Bounds a whole operation, whatever ioredis does inside it: a cluster follows MOVED and ASK
 * with one command timeout per hop, and a script it has to load (NOSCRIPT) takes two commands.
 */
async function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    // After the event loop stalled (a GC pause, a burst of work), Node runs expired timers before
    // it reads the sockets: a reply that already arrived would lose to its own deadline. The
    // rejection waits for the next check phase, after the sockets were read.
    timer = setTimeout(() => setImmediate(() => reject(new Error(`no reply within ${ms} ms`))), ms);
  });
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}

/** Events that end a connection attempt, one way or the other. */
const SETTLED_EVENTS = ['ready', 'close', 'end'] as const;

function ignoreError(): void {}

/** Reconnect forever, backing off to one second at most, so service comes back by itself. */
const backoff = (attempt: number): number => Math.min(50 * 2 ** attempt, 1000);

/** Where one node is and how to log in to it, from its URL; nothing of it is ever logged. */
function nodeOptions(url: string): { host: string; port: number; username?: string; password?: string; db?: number; tls?: object } {
  const parsed = new URL(url);
  const db = Number(parsed.pathname.slice(1) || '0');
  return {
    // URL keeps the brackets of an IPv6 literal; the socket wants the bare address.
    host: parsed.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: Number(parsed.port || '6379'),
    ...(parsed.username ? { username: decodeURIComponent(parsed.username) } : {}),
    ...(parsed.password ? { password: decodeURIComponent(parsed.password) } : {}),
    ...(Number.isSafeInteger(db) && db > 0 ? { db } : {}),
    ...(parsed.protocol === 'rediss:' ? { tls: {} } : {}),
  };
}

/** A client for the configured topology, every one with the same fail-fast settings. */
function connect(opts: RedisStoreOptions): Redis | Cluster {
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
  } satisfies RedisOptions;

  if (opts.cluster) {
    const seeds = opts.cluster.nodes.map(nodeOptions);
    // The cluster logs in to every node it discovers the same way; the configuration checks that
    // the seeds agree (src/config/load.ts).
    const { username, password, tls } = seeds[0] ?? {};
    return new Cluster(
      seeds.map(({ host, port }): ClusterNode => ({ host, port })),
      {
        redisOptions: { ...failFast, username, password, tls },
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
        // Every script writes (reads extend TTLs): masters only.
        scaleReads: 'master',
      },
    );
  }

  if (opts.sentinel) {
    const sentinels = opts.sentinel.nodes.map(nodeOptions);
    const { username: sentinelUsername, password: sentinelPassword, tls: sentinelTLS } = sentinels[0] ?? {};
    const { username, password, db, tls } = nodeOptions(opts.url);
    return new Redis({
      ...failFast,
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
      // All sentinels unreachable: ask them again, backing off to one second at most.
      sentinelRetryStrategy: backoff,
      // The failover detector's connection to a sentinel that restarted (ioredis waits a minute).
      sentinelReconnectStrategy: backoff,
      // Reconnect as soon as a sentinel announces a new master (+switch-master)...
      failoverDetector: true,
      // ...or as soon as the old one answers as a replica; the failed command is not resent.
      reconnectOnError: (err) => err.message.startsWith('READONLY'),
      enableOfflineQueue: false,
      retryStrategy: backoff,
    });
  }

  return new Redis(opts.url, {
    ...failFast,
    // No queue while disconnected: a command fails at once instead of waiting for a reconnection.
    enableOfflineQueue: false,
    retryStrategy: backoff,
  });
}

export function createRedisStore(opts: RedisStoreOptions): Store {
  if (/[{}]/.test(opts.keyPrefix)) {
    throw new GatewayError('GW_CONFIG_INVALID', `store key prefix must not contain braces: ${opts.keyPrefix}`);
  }
  const client = connect(opts) as ScriptedClient;
  // Without a listener, an 'error' event would crash the process.
  client.on('error', opts.onError ?? ignoreError);

  client.defineCommand('gwBindSession', { numberOfKeys: 1, lua: BIND_SESSION_LUA });
  client.defineCommand('gwTouchSession', { numberOfKeys: 1, lua: TOUCH_SESSION_LUA });
  client.defineCommand('gwEndSession', { numberOfKeys: 1, lua: END_SESSION_LUA });
  client.defineCommand('gwRetireReplicaEpoch', { numberOfKeys: 1, lua: RETIRE_REPLICA_EPOCH_LUA });
  client.defineCommand('gwOpenIncarnation', { numberOfKeys: 3, lua: OPEN_INCARNATION_LUA });
  client.defineCommand('gwAttachIncarnation', { numberOfKeys: 3, lua: ATTACH_INCARNATION_LUA });
  client.defineCommand('gwRecordEvents', { numberOfKeys: 2, lua: RECORD_EVENTS_LUA });
  client.defineCommand('gwReadIncarnation', { numberOfKeys: 3, lua: READ_INCARNATION_LUA });
  client.defineCommand('gwTouchAndRead', { numberOfKeys: 3, lua: TOUCH_AND_READ_LUA });
  client.defineCommand('gwCloseIncarnation', { numberOfKeys: 1, lua: CLOSE_INCARNATION_LUA });
  client.defineCommand('gwTouchIncarnation', { numberOfKeys: 2, lua: TOUCH_INCARNATION_LUA });
  client.defineCommand('gwAgreeSecret', { numberOfKeys: 1, lua: AGREE_SECRET_LUA });

  let attempt: Promise<void> | null = null;
  const cluster = opts.cluster ? (client as Cluster) : undefined;

  /**
   * Without an offline queue, a command sent while a connection is being set up would fail even
   * though it is about to be ready (the first command after start-up, for one). So a command
   * waits for a connection attempt in flight, up to one command timeout; at any other time it goes
   * out at once, and fails at once if there is no connection.
   */
  function attemptSettled(): Promise<void> {
    if (client.status !== 'connecting' && client.status !== 'connect') return Promise.resolve();
    attempt ??= new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        for (const event of SETTLED_EVENTS) client.off(event, done);
        attempt = null;
        resolve();
      };
      const timer = setTimeout(done, opts.commandTimeoutMs);
      for (const event of SETTLED_EVENTS) client.once(event, done);
    });
    return attempt;
  }

  async function run<T>(op: string, command: () => Promise<T>): Promise<T> {
    try {
      await attemptSettled();
      // The cluster's own queue (see connect()) is for its node connections, never for callers.
      if (cluster && cluster.status !== 'ready') throw new Error(`the cluster connection is ${cluster.status}`);
      return await withDeadline(command(), opts.commandTimeoutMs);
    } catch (cause) {
      throw new StoreError(op, { cause });
    }
  }

  const key = (sessionId: string): string => sessionKey(opts.keyPrefix, sessionId);
  const incKeys = (sessionId: string, incarnationId: string): [string, string] => [
    incarnationKey(opts.keyPrefix, sessionId, incarnationId),
    positionsKey(opts.keyPrefix, sessionId, incarnationId),
  ];

  async function touch(sessionId: string, idleTtlMs: number): Promise<SessionRecord | null> {
    const fields = await client.gwTouchSession(key(sessionId), idleTtlMs);
    return fields === null ? null : toRecord(fields);
  }

  return {
    kind: 'redis',

    bindSession(session: NewSession, idleTtlMs: number): Promise<boolean> {
      return run('bindSession', async () => {
        const { sessionId, owner, ownerEpoch } = session;
        return (await client.gwBindSession(key(sessionId), sessionId, owner, ownerEpoch, Date.now(), idleTtlMs)) === 1;
      });
    },

    touchSession(sessionId: string, idleTtlMs: number): Promise<SessionRecord | null> {
      return run('touchSession', () => touch(sessionId, idleTtlMs));
    },

    touchAndRead(
      sessionId: string,
      idleTtlMs: number,
      read?: { incarnationId: string; afterSeq: number },
    ): Promise<{ session: SessionRecord | null; view: IncarnationView | null }> {
      return run('touchAndRead', async () => {
        // Nothing to read: the touch script alone is the whole step.
        if (read === undefined) return { session: await touch(sessionId, idleTtlMs), view: null };
        const { incarnationId, afterSeq } = read;
        const reply = await client.gwTouchAndRead(...incKeys(sessionId, incarnationId), key(sessionId), idleTtlMs, seqArgument(afterSeq));
        if (!Array.isArray(reply) || reply.length !== 2) throw new Error(`malformed touch and read reply: ${JSON.stringify(reply)}`);
        const [fields, view] = reply as [unknown, unknown];
        return { session: fields === null ? null : toRecord(fields), view: view === null ? null : toView(incarnationId, view) };
      });
    },

    endSession(sessionId: string, state: Exclude<SessionState, 'active'>, tombstoneTtlMs: number): Promise<void> {
      return run('endSession', async () => {
        await client.gwEndSession(key(sessionId), state, tombstoneTtlMs);
      });
    },

    replicaEpochs(): Promise<Record<string, string>> {
      return run('replicaEpochs', () => client.hgetall(epochsKey(opts.keyPrefix)));
    },

    retireReplicaEpoch(replicaId: string, expected: string, next: string): Promise<string> {
      return run('retireReplicaEpoch', () => client.gwRetireReplicaEpoch(epochsKey(opts.keyPrefix), replicaId, expected, next));
    },

    openIncarnation(incarnation: NewIncarnation, ttlMs: number): Promise<void> {
      return run('openIncarnation', async () => {
        const { id, sessionId, owner, kind } = incarnation;
        const opened = await client.gwOpenIncarnation(
          ...incKeys(sessionId, id),
          key(sessionId),
          id,
          sessionId,
          owner,
          kind,
          JSON.stringify(incarnation.pending ?? []),
          incarnation.supersede ? '1' : '0',
          ttlMs,
        );
        // Reopening would restart the numbering and issue the same cursors twice (E2, E3).
        if (opened !== 1) throw new Error(`incarnation ${id} is already recorded`);
      });
    },

    attachIncarnation(
      sessionId: string,
      incarnationId: string,
      ttlMs: number,
      afterSeq: number,
    ): Promise<{ attach: number; view: IncarnationView } | null> {
      return run('attachIncarnation', async () => {
        const reply = await client.gwAttachIncarnation(...incKeys(sessionId, incarnationId), key(sessionId), ttlMs, seqArgument(afterSeq));
        if (reply === null) return null;
        if (!Array.isArray(reply) || reply.length !== 2 || !Number.isSafeInteger(reply[0])) {
          throw new Error(`malformed attach reply: ${JSON.stringify(reply)}`);
        }
        return { attach: reply[0] as number, view: toView(incarnationId, reply[1]) };
      });
    },

    recordEvents(sessionId: string, incarnationId: string, batch: EventBatch, maxPositions: number, ttlMs: number): Promise<RecordResult> {
      return run('recordEvents', async () => {
        const { open } = batch;
        if (open !== undefined && (batch.attach !== 1 || batch.fromSeq !== 1)) {
          // Only the first batch of the first attachment may create its incarnation.
          throw new Error('a batch with open must be attach 1 and fromSeq 1');
        }
        const result = await client.gwRecordEvents(
          ...incKeys(sessionId, incarnationId),
          batch.attach,
          batch.fromSeq,
          Math.max(1, Math.floor(maxPositions)),
          ttlMs,
          ...(open === undefined ? ['0', '', '', '', ''] : ['1', sessionId, open.owner, open.kind, JSON.stringify(open.pending)]),
          batch.responded.length,
          ...batch.responded.map((id) => JSON.stringify(id)),
          batch.upstreamIds.length,
          batch.upstreamIds.map((id) => id ?? '').join('\n'),
        );
        if (result !== 'ok' && result !== 'stale' && result !== 'missing') throw new Error(`unexpected reply: ${String(result)}`);
        return result;
      });
    },

    readIncarnation(sessionId: string, incarnationId: string, afterSeq: number): Promise<IncarnationView | null> {
      return run('readIncarnation', async () => {
        const reply = await client.gwReadIncarnation(...incKeys(sessionId, incarnationId), key(sessionId), seqArgument(afterSeq));
        return reply === null ? null : toView(incarnationId, reply);
      });
    },

    closeIncarnation(sessionId: string, incarnationId: string): Promise<void> {
      return run('closeIncarnation', async () => {
        await client.gwCloseIncarnation(incarnationKey(opts.keyPrefix, sessionId, incarnationId));
      });
    },

    touchIncarnation(sessionId: string, incarnationId: string, ttlMs: number): Promise<void> {
      return run('touchIncarnation', async () => {
        await client.gwTouchIncarnation(...incKeys(sessionId, incarnationId), ttlMs);
      });
    },

    agreeSecret(candidate: string): Promise<string> {
      return run('agreeSecret', () => client.gwAgreeSecret(secretKey(opts.keyPrefix), candidate));
    },

    ping(): Promise<void> {
      return run('ping', async () => {
        await client.ping();
      });
    },

    async close(): Promise<void> {
      try {
        await client.quit();
        // QUIT closes the master's connection only; disconnecting also closes the connections
        // that watch the sentinels for a failover, which would otherwise stay open for good.
        if (opts.sentinel) client.disconnect();
      } catch {
        // Not connected, or Redis did not answer in time: drop the socket and stop reconnecting.
        client.disconnect();
      }
    },
  };
}

/** Anything but a safe integer is below every base: a position that is not recorded. */
function seqArgument(afterSeq: number): number {
  return Number.isSafeInteger(afterSeq) ? afterSeq : -1;
}

function isSessionState(state: string): state is SessionState {
  return state === 'active' || state === 'terminated' || state === 'lost';
}

/** HMGET's reply: null for a field the hash does not have. */
const isFieldArray = (value: unknown): value is (string | null)[] =>
  Array.isArray(value) && value.every((v) => v === null || typeof v === 'string');

/** The fields in the order touchSession() (Lua) reads them; anything unexpected is a store failure, not a session. */
function toRecord(fields: unknown): SessionRecord {
  if (!isFieldArray(fields)) throw new Error(`malformed session record: ${JSON.stringify(fields)}`);
  const [sessionId, owner, ownerEpoch, state, createdAt] = fields;
  const created = Number(createdAt);
  if (
    sessionId == null ||
    owner == null ||
    ownerEpoch == null ||
    state == null ||
    !isSessionState(state) ||
    !Number.isSafeInteger(created)
  ) {
    throw new Error(`malformed session record: ${JSON.stringify(fields)}`);
  }
  return { sessionId, owner, ownerEpoch, state, createdAt: created };
}

const isJsonRpcId = (id: unknown): id is JsonRpcId => typeof id === 'string' || (typeof id === 'number' && Number.isFinite(id));
const isStringArray = (value: unknown): value is string[] => Array.isArray(value) && value.every((v) => typeof v === 'string');

/** The reply of readIncarnation() (Lua); anything unexpected is a store failure, not an incarnation. */
function toView(id: string, reply: unknown): IncarnationView {
  if (!Array.isArray(reply) || reply.length !== 3) throw new Error(`malformed incarnation reply: ${JSON.stringify(reply)}`);
  const [fields, currentGet, ids] = reply as [unknown, unknown, unknown];
  if (!isStringArray(fields) || !isStringArray(ids) || (currentGet !== null && typeof currentGet !== 'string')) {
    throw new Error(`malformed incarnation reply: ${JSON.stringify(reply)}`);
  }
  const [sessionId, owner, kind, state, head, base, attach, pending] = fields;
  const numbers = [head, base, attach].map(Number);
  const pendingIds: unknown = pending === undefined ? undefined : JSON.parse(pending);
  if (
    sessionId === undefined ||
    owner === undefined ||
    (kind !== 'get' && kind !== 'post') ||
    (state !== 'open' && state !== 'closed') ||
    !numbers.every(Number.isSafeInteger) ||
    !Array.isArray(pendingIds) ||
    !pendingIds.every(isJsonRpcId)
  ) {
    throw new Error(`malformed incarnation record: ${JSON.stringify(fields)}`);
  }
  const [h, b, a] = numbers as [number, number, number];
  const record: IncarnationRecord = { id, sessionId, owner, kind, state, head: h, base: b, attach: a, pending: pendingIds };
  const positions = ids.map((upstreamId) => (upstreamId === '' ? null : upstreamId));
  return { record, currentGet: currentGet ?? undefined, at: positions[0], after: positions.slice(1) };
}
