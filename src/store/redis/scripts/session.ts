/** The scripts of a session's record. */

import type { Cluster, Redis } from 'ioredis';

/**
 * Creates a session if no record has its id. KEYS: session. ARGV: sessionId, owner, ownerEpoch,
 * createdAt, idleTtlMs, endpoint ('' for none: a Streamable HTTP session), principal ('' for none).
 */
const BIND_SESSION_LUA = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'sessionId', ARGV[1], 'owner', ARGV[2], 'ownerEpoch', ARGV[3],
  'state', 'active', 'createdAt', ARGV[4])
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'endpoint', ARGV[6]) end
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'principal', ARGV[7]) end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`;

/**
 * Lua shared by the scripts that touch a session: its fields in toRecord()'s order, extending an
 * active one's idle TTL; false when there is none. The key is a parameter: it is not KEYS[1] in
 * every script.
 */
export const TOUCH_SESSION_FUNCTION_LUA = `
local function touchSession(key, idleTtlMs)
  local f = redis.call('HMGET', key, 'sessionId', 'owner', 'ownerEpoch', 'state', 'createdAt', 'endpoint', 'principal')
  if not f[1] then return false end
  if f[4] == 'active' then redis.call('PEXPIRE', key, idleTtlMs) end
  return f
end
`;

/** Reads a session, extending an active one's idle TTL. KEYS: session. ARGV: idleTtlMs. */
const TOUCH_SESSION_LUA = `${TOUCH_SESSION_FUNCTION_LUA}
return touchSession(KEYS[1], ARGV[1])
`;

/**
 * Turns an active session into a tombstone (1: it was active; its note is then to be published);
 * anything else stays as it is. KEYS: session. ARGV: state, tombstoneTtlMs.
 */
const END_SESSION_LUA = `
if redis.call('HGET', KEYS[1], 'state') ~= 'active' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`;

/** Sets an active session's principal; anything else stays as it is. KEYS: session. ARGV: principal. */
const SET_PRINCIPAL_LUA = `
if redis.call('HGET', KEYS[1], 'state') ~= 'active' then return 0 end
redis.call('HSET', KEYS[1], 'principal', ARGV[1])
return 1
`;

export interface SessionScripts {
  gwBindSession(
    key: string,
    sessionId: string,
    owner: string,
    ownerEpoch: string,
    createdAt: number,
    idleTtlMs: number,
    endpoint: string,
    principal: string,
  ): Promise<number>;
  gwSetPrincipal(key: string, principal: string): Promise<number>;
  gwTouchSession(key: string, idleTtlMs: number): Promise<unknown>;
  gwEndSession(key: string, state: string, tombstoneTtlMs: number): Promise<number>;
}

export function defineSessionScripts(client: Redis | Cluster): void {
  client.defineCommand('gwBindSession', { numberOfKeys: 1, lua: BIND_SESSION_LUA });
  client.defineCommand('gwTouchSession', { numberOfKeys: 1, lua: TOUCH_SESSION_LUA });
  client.defineCommand('gwSetPrincipal', { numberOfKeys: 1, lua: SET_PRINCIPAL_LUA });
  client.defineCommand('gwEndSession', { numberOfKeys: 1, lua: END_SESSION_LUA });
}
