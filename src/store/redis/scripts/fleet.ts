/** The scripts of what the whole fleet shares: replica epochs, the cursor secret, the store's generation. */

import type { Cluster, Redis } from 'ioredis';

/**
 * Compare-and-set of one replica's epoch ('' means none), telling every gateway on the notes
 * channel (in the fleet's slot, as the epochs) when it changed; returns the epoch in force. KEYS: epochs. ARGV: replicaId, expected,
 * next, channel, note.
 */
const RETIRE_REPLICA_EPOCH_LUA = `
local current = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if current ~= ARGV[2] then return current end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('SPUBLISH', ARGV[4], ARGV[5])
return ARGV[3]
`;

/**
 * The first candidate ever set wins; no TTL, so it lives as long as the dataset (the cursor secret,
 * the store's generation). KEYS: the key. ARGV: candidate.
 */
const AGREE_LUA = `
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
`;

/**
 * One instance's cursor-key fingerprint, then every live one's; expired entries are removed.
 * Field: instance id; value: '<fingerprint> <expires at, ms>'. The hash holds one small entry per
 * live instance and is cleaned on every call, so it needs no TTL of its own.
 * KEYS: fingerprints. ARGV: instanceId, fingerprint, now, ttlMs.
 */
const PUBLISH_KEY_FINGERPRINT_LUA = `
local now = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. (now + ttl))
local all = redis.call('HGETALL', KEYS[1])
local alive = {}
for i = 1, #all, 2 do
  local fingerprint, expires = string.match(all[i + 1], '^(%S+) (%d+)$')
  if fingerprint == nil or tonumber(expires) <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    alive[#alive + 1] = all[i]
    alive[#alive + 1] = fingerprint
  end
end
return alive
`;

export interface FleetScripts {
  gwRetireReplicaEpoch(key: string, replicaId: string, expected: string, next: string, channel: string, note: string): Promise<string>;
  gwAgree(key: string, candidate: string): Promise<string>;
  gwPublishKeyFingerprint(key: string, instanceId: string, fingerprint: string, now: number, ttlMs: number): Promise<string[]>;
}

export function defineFleetScripts(client: Redis | Cluster): void {
  client.defineCommand('gwRetireReplicaEpoch', { numberOfKeys: 1, lua: RETIRE_REPLICA_EPOCH_LUA });
  client.defineCommand('gwAgree', { numberOfKeys: 1, lua: AGREE_LUA });
  client.defineCommand('gwPublishKeyFingerprint', { numberOfKeys: 1, lua: PUBLISH_KEY_FINGERPRINT_LUA });
}
