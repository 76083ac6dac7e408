/**
 * The Redis store: the fleet of gateways shares one Redis (or Redis Cluster). Every multi-step
 * update is one Lua script, so two gateways never interleave inside it. Failures of any kind
 * (disconnected, timed out, script error, malformed record) surface as StoreError, fast: there is
 * no offline queue and every command has a timeout (CONTRACT.md §7).
 */

import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { GatewayError, StoreError } from '../errors.js';
import type { NewSession, SessionRecord, SessionState, Store } from './types.js';

export interface RedisStoreOptions {
  url: string;
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

/** Reads a session, extending an active one's idle TTL. KEYS: session. ARGV: idleTtlMs. */
const TOUCH_SESSION_LUA = `
local f = redis.call('HMGET', KEYS[1], 'sessionId', 'owner', 'ownerEpoch', 'state', 'createdAt')
if not f[1] then return false end
if f[4] == 'active' then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return f
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

/** The client once the scripts are defined on it (defineCommand adds these methods at run time). */
interface ScriptedRedis extends Redis {
  gwBindSession(key: string, sessionId: string, owner: string, ownerEpoch: string, createdAt: number, idleTtlMs: number): Promise<number>;
  gwTouchSession(key: string, idleTtlMs: number): Promise<(string | null)[] | null>;
  gwEndSession(key: string, state: string, tombstoneTtlMs: number): Promise<number>;
  gwRetireReplicaEpoch(key: string, replicaId: string, expected: string, next: string): Promise<string>;
}

/**
 * The key of a session's record. The hash tag is a digest of the id, not the id itself: a raw id
 * may contain braces, which would move the tag and split one session's keys across cluster slots.
 */
export function sessionKey(keyPrefix: string, sessionId: string): string {
  const tag = createHash('sha1').update(sessionId).digest('base64url');
  return `${keyPrefix}:{${tag}}:session`;
}

/** The one hash that holds every replica's fleet epoch. */
export function epochsKey(keyPrefix: string): string {
  return `${keyPrefix}:{fleet}:epochs`;
}

/** Events that end a connection attempt, one way or the other. */
const SETTLED_EVENTS = ['ready', 'close', 'end'] as const;

function ignoreError(): void {}

export function createRedisStore(opts: RedisStoreOptions): Store {
  if (/[{}]/.test(opts.keyPrefix)) {
    throw new GatewayError('GW_CONFIG_INVALID', `store key prefix must not contain braces: ${opts.keyPrefix}`);
  }
  const client = new Redis(opts.url, {
    // A host that drops packets must not hold a connection attempt open: fail it and retry.
    connectTimeout: opts.connectTimeoutMs,
    // A blocked or paused Redis must become a fast 503, never a request that hangs (CONTRACT §7).
    commandTimeout: opts.commandTimeoutMs,
    // No queue while disconnected: a command fails at once instead of waiting for a reconnection.
    enableOfflineQueue: false,
    // A command cut off by a lost connection fails at once instead of waiting to be retried...
    maxRetriesPerRequest: 0,
    // ...and is never resent later, after its caller has been told that it failed.
    autoResendUnfulfilledCommands: false,
    // Reconnect forever, backing off to one second at most, so service comes back by itself.
    retryStrategy: (attempt) => Math.min(50 * 2 ** attempt, 1000),
  }) as ScriptedRedis;
  // Without a listener, an 'error' event would crash the process.
  client.on('error', opts.onError ?? ignoreError);

  client.defineCommand('gwBindSession', { numberOfKeys: 1, lua: BIND_SESSION_LUA });
  client.defineCommand('gwTouchSession', { numberOfKeys: 1, lua: TOUCH_SESSION_LUA });
  client.defineCommand('gwEndSession', { numberOfKeys: 1, lua: END_SESSION_LUA });
  client.defineCommand('gwRetireReplicaEpoch', { numberOfKeys: 1, lua: RETIRE_REPLICA_EPOCH_LUA });

  let attempt: Promise<void> | null = null;

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
      return await command();
    } catch (cause) {
      throw new StoreError(op, { cause });
    }
  }

  const key = (sessionId: string): string => sessionKey(opts.keyPrefix, sessionId);

  return {
    kind: 'redis',

    bindSession(session: NewSession, idleTtlMs: number): Promise<boolean> {
      return run('bindSession', async () => {
        const { sessionId, owner, ownerEpoch } = session;
        return (await client.gwBindSession(key(sessionId), sessionId, owner, ownerEpoch, Date.now(), idleTtlMs)) === 1;
      });
    },

    touchSession(sessionId: string, idleTtlMs: number): Promise<SessionRecord | null> {
      return run('touchSession', async () => {
        const fields = await client.gwTouchSession(key(sessionId), idleTtlMs);
        return fields === null ? null : toRecord(fields);
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

    ping(): Promise<void> {
      return run('ping', async () => {
        await client.ping();
      });
    },

    async close(): Promise<void> {
      try {
        await client.quit();
      } catch {
        // Not connected, or Redis did not answer in time: drop the socket and stop reconnecting.
        client.disconnect();
      }
    },
  };
}

function isSessionState(state: string): state is SessionState {
  return state === 'active' || state === 'terminated' || state === 'lost';
}

/** The fields in TOUCH_SESSION_LUA's order; anything unexpected is a store failure, not a session. */
function toRecord(fields: (string | null)[]): SessionRecord {
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
