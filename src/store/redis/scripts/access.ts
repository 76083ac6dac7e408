/**
 * The script that checks, at start, that the store's user may do what the other scripts do: every
 * command they call, on keys and a channel of the gateway's prefix (docs/security.md "Redis ACL").
 * test/store/access.test.ts keeps its commands the same as theirs.
 */

import type { Cluster, Redis } from 'ioredis';

/**
 * Runs each command once on keys of its type (KEYS: string, hash, list, sorted set; ARGV: channel)
 * and deletes them; returns the commands that failed, each with Redis's message (inside a script a
 * refused command names neither itself nor the key). The keys expire in a minute in case it stops
 * half-way.
 */
const ACCESS_LUA = `
local failed = {}
local function try(...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    failed[#failed + 1] = string.lower((...)) .. ': ' .. reply.err
  end
end
try('SET', KEYS[1], '1', 'PX', 60000)
try('GET', KEYS[1])
try('EXISTS', KEYS[1])
try('PEXPIRE', KEYS[1], 60000)
try('PTTL', KEYS[1])
try('HSET', KEYS[2], 'f', '1')
try('PEXPIRE', KEYS[2], 60000)
try('HGET', KEYS[2], 'f')
try('HMGET', KEYS[2], 'f')
try('HINCRBY', KEYS[2], 'f', 1)
try('HGETALL', KEYS[2])
try('HDEL', KEYS[2], 'f')
try('RPUSH', KEYS[3], '1')
try('PEXPIRE', KEYS[3], 60000)
try('LLEN', KEYS[3])
try('LRANGE', KEYS[3], 0, -1)
try('LTRIM', KEYS[3], 0, -1)
try('ZADD', KEYS[4], 1, 'm')
try('PEXPIRE', KEYS[4], 60000)
try('ZREVRANGE', KEYS[4], 0, -1)
try('ZREMRANGEBYRANK', KEYS[4], 0, -1)
try('TIME')
try('SPUBLISH', ARGV[1], 'access')
try('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return failed
`;

export interface AccessScripts {
  gwAccess(string: string, hash: string, list: string, sortedSet: string, channel: string): Promise<string[]>;
}

export function defineAccessScripts(client: Redis | Cluster): void {
  client.defineCommand('gwAccess', { numberOfKeys: 4, lua: ACCESS_LUA });
}
