/**
 * Where the Redis store keeps what: every key of one session (its record, its incarnations and
 * their positions) shares one hash tag, so each script runs on one cluster node; the fleet's keys
 * share another.
 */

import { createHash } from 'node:crypto';

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

/**
 * The journal of an incarnation (J1): a hash holding the bytes of its journaled positions
 * (scripts/journal.ts). Created by the first batch that carries payloads. Not the name of the
 * earlier layout (a list per incarnation, `jnl`): gateways of both layouts on one store during an
 * upgrade each find the other's journal missing, which reads as unjournaled, never as a wrong type.
 */
export function journalKey(keyPrefix: string, sessionId: string, incarnationId: string): string {
  return `${keyPrefix}:{${sessionTag(sessionId)}}:jrn:${incarnationId}`;
}

/**
 * What the sharded channel of an incarnation's notes begins with; the incarnation id follows. In
 * the session's hash tag, so that a note is published on the node that holds the session (Cluster:
 * SPUBLISH stays in its shard).
 */
export function noteChannelPrefix(keyPrefix: string, sessionId: string): string {
  return `${keyPrefix}:{${sessionTag(sessionId)}}:note:`;
}

/** The sharded channel of an incarnation's notes. */
export function noteChannel(keyPrefix: string, sessionId: string, incarnationId: string): string {
  return noteChannelPrefix(keyPrefix, sessionId) + incarnationId;
}

/** An incarnation's record, position list and journal, in the order the scripts take them. */
export function incarnationKeys(keyPrefix: string, sessionId: string, incarnationId: string): [string, string, string] {
  return [incarnationKey(keyPrefix, sessionId, incarnationId), positionsKey(keyPrefix, sessionId, incarnationId), journalKey(keyPrefix, sessionId, incarnationId)];
}

/** The index of a session's incarnations (a sorted set of their record keys), for inspectSession. */
export function incarnationsKey(keyPrefix: string, sessionId: string): string {
  return `${keyPrefix}:{${sessionTag(sessionId)}}:incs`;
}

/** The fleet's cursor secret (E2). */
export function secretKey(keyPrefix: string): string {
  return `${keyPrefix}:{fleet}:cursor-secret`;
}

/** The store's generation: a new one after the store lost its data. */
export function generationKey(keyPrefix: string): string {
  return `${keyPrefix}:{fleet}:generation`;
}

/** The (sharded) channel of binding notes: in the fleet's slot, where epochs are retired. */
export function bindingsChannel(keyPrefix: string): string {
  return `${keyPrefix}:{fleet}:bindings`;
}

/** Each gateway instance's cursor-key fingerprint, to tell instances that disagree on cursor.secret. */
export function fingerprintsKey(keyPrefix: string): string {
  return `${keyPrefix}:{fleet}:key-fingerprints`;
}

/** An instance's liveness (docs/journal.md#instance-liveness): a string that expires unless renewed. */
export function aliveKey(keyPrefix: string, instanceId: string): string {
  return `${keyPrefix}:{fleet}:alive:${instanceId}`;
}

/**
 * What the start check (access.ts) writes and deletes at once, one key of each type the gateway
 * uses (string, hash, list, sorted set), and the channel it subscribes and publishes to.
 */
export function accessKeys(keyPrefix: string): [string, string, string, string] {
  return ['s', 'h', 'l', 'z'].map((type) => `${keyPrefix}:{fleet}:access:${type}`) as [string, string, string, string];
}

export function accessChannel(keyPrefix: string): string {
  return `${keyPrefix}:{fleet}:access`;
}

/** The one hash that holds every replica's fleet epoch. */
export function epochsKey(keyPrefix: string): string {
  return `${keyPrefix}:{fleet}:epochs`;
}

/**
 * The tags of recently used sessions, oldest first: one store operation names up to five keys of
 * one session, and an open stream records batch after batch of the same one.
 */
const tags = new Map<string, string>();
const TAGS_KEPT = 4096;

function sessionTag(sessionId: string): string {
  let tag = tags.get(sessionId);
  if (tag === undefined) {
    tag = createHash('sha1').update(sessionId).digest('base64url');
    if (tags.size >= TAGS_KEPT) tags.delete(tags.keys().next().value!);
    tags.set(sessionId, tag);
  }
  return tag;
}

/**
 * A task's record (§9 M2). `taskKey` is already a digest of the task id (eras/tasks.ts), base64url
 * without braces: it is its own hash tag, and no raw task id is ever part of a key.
 */
export function taskRecordKey(keyPrefix: string, taskKey: string): string {
  return `${keyPrefix}:{${taskKey}}:task`;
}
