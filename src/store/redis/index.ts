/**
 * The Redis store: the fleet of gateways shares one Redis, a Redis Cluster, or a master found
 * through Sentinel. Every multi-step update is one Lua script, so two gateways never interleave
 * inside it, and every script's keys share one hash tag, so each runs on one cluster node.
 * Failures of any kind (disconnected, timed out, script error, malformed record, a failover in
 * progress) surface as StoreError, fast: there is no offline queue and every command has a
 * timeout (CONTRACT.md §7).
 */

import type { Cluster, Redis } from 'ioredis';
import { GatewayError } from '../../errors.js';
import type { EventBatch, IncarnationView, NewIncarnation, NewSession, RecordResult, SessionRecord, SessionState, Store } from '../types.js';
import { createRunner } from './command.js';
import { connect, type ConnectionOptions } from './connection.js';
import { epochsKey, fingerprintsKey, incarnationKey, positionsKey, secretKey, sessionKey } from './keys.js';
import { toRecord, toView } from './replies.js';
import { defineScripts } from './scripts/index.js';
import { seqArgument } from './scripts/incarnation.js';

export interface RedisStoreOptions extends ConnectionOptions {
  /** Namespace of every key; must not contain braces (they would become the cluster hash tag). */
  keyPrefix: string;
  /** Errors the client reports outside any command (lost connection, failed reconnect). */
  onError?: (err: Error) => void;
}

function ignoreError(): void {}

export function createRedisStore(opts: RedisStoreOptions): Store {
  if (/[{}]/.test(opts.keyPrefix)) {
    throw new GatewayError('GW_CONFIG_INVALID', `store key prefix must not contain braces: ${opts.keyPrefix}`);
  }
  const connection: Redis | Cluster = connect(opts);
  // Without a listener, an 'error' event would crash the process.
  connection.on('error', opts.onError ?? ignoreError);
  const client = defineScripts(connection);
  const run = createRunner(client, opts);

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
        const { create } = batch;
        if (create !== undefined && (batch.attach !== 1 || batch.fromSeq !== 1)) {
          // Only the first batch of the first attachment may create its incarnation.
          throw new Error('a batch with create must be attach 1 and fromSeq 1');
        }
        const result = await client.gwRecordEvents(
          ...incKeys(sessionId, incarnationId),
          batch.attach,
          batch.fromSeq,
          Math.max(1, Math.floor(maxPositions)),
          ttlMs,
          ...(create === undefined ? ['0', '', '', '', ''] : ['1', sessionId, create.owner, create.kind, JSON.stringify(create.pending)]),
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

    publishKeyFingerprint(instanceId: string, fingerprint: string, ttlMs: number): Promise<Record<string, string>> {
      return run('publishKeyFingerprint', async () => {
        const flat = await client.gwPublishKeyFingerprint(fingerprintsKey(opts.keyPrefix), instanceId, fingerprint, Date.now(), ttlMs);
        const alive: Record<string, string> = {};
        for (let i = 0; i + 1 < flat.length; i += 2) alive[flat[i]!] = flat[i + 1]!;
        return alive;
      });
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
