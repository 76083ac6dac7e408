/** The scripts of what the whole fleet shares: replica epochs and the cursor secret. */

import type { Cluster, Redis } from 'ioredis';

/** Compare-and-set of one replica's epoch ('' means none); returns the epoch in force. KEYS: epochs. ARGV: replicaId, expected, next. */
const RETIRE_REPLICA_EPOCH_LUA = `
local current = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if current ~= ARGV[2] then return current end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return ARGV[3]
`;

/** The first candidate ever set wins; no TTL, so it lives as long as the dataset. KEYS: secret. ARGV: candidate. */
const AGREE_SECRET_LUA = `
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
`;

export interface FleetScripts {
  gwRetireReplicaEpoch(key: string, replicaId: string, expected: string, next: string): Promise<string>;
  gwAgreeSecret(key: string, candidate: string): Promise<string>;
}

export function defineFleetScripts(client: Redis | Cluster): void {
  client.defineCommand('gwRetireReplicaEpoch', { numberOfKeys: 1, lua: RETIRE_REPLICA_EPOCH_LUA });
  client.defineCommand('gwAgreeSecret', { numberOfKeys: 1, lua: AGREE_SECRET_LUA });
}
