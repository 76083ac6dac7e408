/**
 * The scripts of incarnations (the streams a session opens), except recording events
 * (record-events.ts).
 *
 * The record is a hash (sessionId, owner, kind, state, head, base, attach, pending)
 * and its positions a list of the upstream ids of positions base..head, index = seq - base, ''
 * standing for null (position 0, and events the gateway made: an empty upstream id is no id).
 * Both keys always get the same TTL in the same script, so they live and die together; a record
 * whose list does not hold head - base + 1 entries (one key evicted without the other) counts as
 * not recorded, because its positions can no longer be trusted.
 */

import type { Cluster, Redis } from 'ioredis';
import { TOUCH_SESSION_FUNCTION_LUA } from './session.js';

/** Lua shared by the incarnation scripts. */
export const INCARNATION_LUA_PRELUDE = `
local function recorded(head, base)
  return head ~= nil and base ~= nil and redis.call('LLEN', KEYS[2]) == head - base + 1
end
`;

/**
 * Lua shared by the scripts that create an incarnation (KEYS[1], KEYS[2]), so that both create it
 * alike: open, head 0, attach 1, position 0 with no upstream id. A positions list left without
 * its record (an eviction) is dropped first.
 */
export const CREATE_INCARNATION_LUA = `
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

export interface IncarnationScripts {
  gwOpenIncarnation(
    incKey: string, posKey: string, session: string,
    incarnationId: string, sessionId: string, owner: string, kind: string, pending: string, supersede: '1' | '0', ttlMs: number,
  ): Promise<number>;
  gwAttachIncarnation(incKey: string, posKey: string, session: string, ttlMs: number, afterSeq: number): Promise<unknown>;
  gwReadIncarnation(incKey: string, posKey: string, session: string, afterSeq: number): Promise<unknown>;
  gwTouchAndRead(incKey: string, posKey: string, session: string, idleTtlMs: number, afterSeq: number): Promise<unknown>;
  gwCloseIncarnation(incKey: string): Promise<number>;
  gwTouchIncarnation(incKey: string, posKey: string, ttlMs: number): Promise<number>;
}

export function defineIncarnationScripts(client: Redis | Cluster): void {
  client.defineCommand('gwOpenIncarnation', { numberOfKeys: 3, lua: OPEN_INCARNATION_LUA });
  client.defineCommand('gwAttachIncarnation', { numberOfKeys: 3, lua: ATTACH_INCARNATION_LUA });
  client.defineCommand('gwReadIncarnation', { numberOfKeys: 3, lua: READ_INCARNATION_LUA });
  client.defineCommand('gwTouchAndRead', { numberOfKeys: 3, lua: TOUCH_AND_READ_LUA });
  client.defineCommand('gwCloseIncarnation', { numberOfKeys: 1, lua: CLOSE_INCARNATION_LUA });
  client.defineCommand('gwTouchIncarnation', { numberOfKeys: 2, lua: TOUCH_INCARNATION_LUA });
}

/** Anything but a safe integer is below every base: a position that is not recorded. */
export function seqArgument(afterSeq: number): number {
  return Number.isSafeInteger(afterSeq) ? afterSeq : -1;
}
