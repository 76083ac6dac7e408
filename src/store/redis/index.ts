/**
 * The Redis store: the fleet of gateways shares one Redis, a Redis Cluster, or a master found
 * through Sentinel. Every multi-step update is one Lua script, so two gateways never interleave
 * inside it, and every script's keys share one hash tag, so each runs on one cluster node.
 * Failures of any kind (disconnected, timed out, script error, malformed record, a failover in
 * progress) surface as StoreError, fast: there is no offline queue and every command has a
 * timeout (CONTRACT.md §7). Binding changes are published on one channel, which the subscriber
 * connection (subscriber.ts, opened by the first watcher) listens to. The stream incarnations and
 * their journals are incarnations.ts.
 */

import type { Cluster, Redis } from 'ioredis';
import { GatewayError } from '../../errors.js';
import {
  INCARNATIONS_LISTED,
  type IncarnationRecord,
  type IncarnationView,
  type InstanceLiveness,
  type JournalNote,
  type LivenessOptions,
  type NewSession,
  type BindingWatcher,
  type SessionRefresh,
  type SessionInspection,
  type SessionRecord,
  type SessionState,
  type Store,
  type TaskRecord,
} from '../types.js';
import { checkAccess, refusalOf } from './access.js';
import { incarnationOps } from './incarnations.js';
import { createRunner } from './command.js';
import { connect, type ConnectionOptions } from './connection.js';
import {
  aliveKey,
  bindingsChannel,
  epochsKey,
  fingerprintsKey,
  generationKey,
  incarnationKey,
  incarnationKeys,
  incarnationsKey,
  noteChannel,
  secretKey,
  sessionKey,
  taskRecordKey,
} from './keys.js';
import { decodeNote, encodeNote } from './notes.js';
import { toJournalRead, toRecord, toView } from './replies.js';
import { keepAliveOnThread } from './liveness.js';
import { createSubscriber, type ChannelSubscriber } from './subscriber.js';
import { defineScripts } from './scripts/index.js';
import { seqArgument } from './scripts/incarnation.js';

export interface RedisStoreOptions extends ConnectionOptions {
  /** Namespace of every key; must not contain braces (they would become the cluster hash tag). */
  keyPrefix: string;
  /** Errors the client reports outside any command (lost connection, failed reconnect). */
  onError?: (err: Error) => void;
}

function ignoreError(): void {}

/** A session's fields, in the order toRecord() reads them. */
const SESSION_FIELDS = ['sessionId', 'owner', 'ownerEpoch', 'state', 'createdAt'] as const;

export function createRedisStore(opts: RedisStoreOptions): Store {
  if (/[{}]/.test(opts.keyPrefix)) {
    throw new GatewayError('GW_CONFIG_INVALID', `store key prefix must not contain braces: ${opts.keyPrefix}`);
  }
  const connection: Redis | Cluster = connect(opts);
  /**
   * Why the connection fails, since it was last ready (checkAccess tells it): a refusal says most
   * and stays, then a system error (ECONNREFUSED); ioredis's own follow-ups ("Stream isn't
   * writeable") say nothing of the cause. A refused TLS client certificate alternates with resets.
   */
  let connectionError: Error | undefined;
  const noteError = (err: Error): void => {
    if (refusalOf(err) !== undefined || (refusalOf(connectionError) === undefined && (err as NodeJS.ErrnoException).code !== undefined)) connectionError = err;
  };
  /** While checkAccess runs, it tells what went wrong: the errors are not reported as well. */
  let checking = false;
  // Without a listener, an 'error' event would crash the process.
  connection.on('error', (err: Error) => {
    noteError(err);
    if (!checking) (opts.onError ?? ignoreError)(err);
  });
  // A Cluster reports a node's failure (a refused login, an untrusted certificate) only here.
  connection.on('node error', noteError);
  connection.on('ready', () => {
    connectionError = undefined;
  });
  const client = defineScripts(connection);
  const run = createRunner(client, opts);
  const bindings = bindingsChannel(opts.keyPrefix);
  const watchers = new Set<BindingWatcher>();
  // A store that comes back may have lost what was read from it: every watcher forgets it at once.
  connection.on('close', () => {
    for (const watcher of watchers) watcher.reset();
  });

  // One subscriber connection for every watch of this store, opened on the first.
  let subscriber: ChannelSubscriber | undefined;
  /** The incarnations and their journals (incarnations.ts). */
  const incarnations = incarnationOps({ client, run, keyPrefix: opts.keyPrefix, cluster: opts.cluster !== undefined });

  const key = (sessionId: string): string => sessionKey(opts.keyPrefix, sessionId);
  const incKeys = (sessionId: string, incarnationId: string) => incarnationKeys(opts.keyPrefix, sessionId, incarnationId);
  const channel = (sessionId: string, incarnationId: string): string => noteChannel(opts.keyPrefix, sessionId, incarnationId);

  async function touch(sessionId: string, idleTtlMs: number): Promise<SessionRecord | null> {
    const fields = await client.gwTouchSession(key(sessionId), idleTtlMs);
    return fields === null ? null : toRecord(fields);
  }

  return {
    kind: 'redis',

    bindSession(session: NewSession, idleTtlMs: number): Promise<boolean> {
      return run('bindSession', async () => {
        const { sessionId, owner, ownerEpoch } = session;
        return (await client.gwBindSession(key(sessionId), sessionId, owner, ownerEpoch, Date.now(), idleTtlMs, session.endpoint ?? '', session.principal ?? '')) === 1;
      });
    },

    setPrincipal(sessionId: string, principal: string): Promise<void> {
      return run('setPrincipal', async () => {
        await client.gwSetPrincipal(key(sessionId), principal);
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

    refreshSessions(reads: readonly SessionRefresh[], idleTtlMs: number): Promise<(SessionRecord | null)[]> {
      return run('refreshSessions', () =>
        // Sent together, answered together: one round trip, whatever the slots of the sessions.
        Promise.all(
          reads.map(async ({ sessionId, touch: extend }) => {
            const fields = extend ? await client.gwTouchSession(key(sessionId), idleTtlMs) : await client.hmget(key(sessionId), ...SESSION_FIELDS);
            return fields === null || (Array.isArray(fields) && fields[0] === null) ? null : toRecord(fields);
          }),
        ),
      );
    },

    endSession(sessionId: string, state: Exclude<SessionState, 'active'>, tombstoneTtlMs: number): Promise<void> {
      return run('endSession', async () => {
        // The note goes out after the change, from here: a script may publish only in its own slot.
        // Lost on the way (this process dies), the other instances find out within a health tick.
        if ((await client.gwEndSession(key(sessionId), state, tombstoneTtlMs)) === 1) await client.spublish(bindings, encodeNote({ kind: 'ended', sessionId }));
      });
    },

    bindTask(taskKey: string, task: TaskRecord, ttlMs: number): Promise<boolean> {
      // One command, atomic as a script: the record is written only where none is.
      return run('bindTask', async () => {
        const reply = await client.set(taskRecordKey(opts.keyPrefix, taskKey), JSON.stringify([task.owner, task.ownerEpoch]), 'PX', ttlMs, 'NX');
        return reply === 'OK';
      });
    },

    readTask(taskKey: string): Promise<TaskRecord | null> {
      return run('readTask', async () => {
        const value = await client.get(taskRecordKey(opts.keyPrefix, taskKey));
        if (value === null) return null;
        const fields: unknown = JSON.parse(value);
        if (!Array.isArray(fields) || fields.length !== 2 || !fields.every((f) => typeof f === 'string')) {
          throw new Error('malformed task record');
        }
        return { owner: fields[0] as string, ownerEpoch: fields[1] as string };
      });
    },

    replicaEpochs(): Promise<Record<string, string>> {
      return run('replicaEpochs', () => client.hgetall(epochsKey(opts.keyPrefix)));
    },

    retireReplicaEpoch(replicaId: string, expected: string, next: string): Promise<string> {
      return run('retireReplicaEpoch', () =>
        client.gwRetireReplicaEpoch(epochsKey(opts.keyPrefix), replicaId, expected, next, bindings, encodeNote({ kind: 'retired', replicaId, epoch: next })),
      );
    },

    ...incarnations,

    inspectSession(sessionId: string, limit: number): Promise<SessionInspection> {
      return run('inspectSession', async () => {
        const count = Math.max(0, Math.min(Math.floor(limit), INCARNATIONS_LISTED));
        const reply = await client.gwSessionIncarnations(key(sessionId), incarnationsKey(opts.keyPrefix, sessionId), count);
        if (!Array.isArray(reply) || reply.length !== 3 || !Array.isArray(reply[2])) throw new Error(`malformed session reply: ${JSON.stringify(reply)}`);
        const [fields, currentGet, members] = reply as [unknown, unknown, unknown[]];
        // The index holds each incarnation's record key: its id is what follows the session's part.
        const before = incarnationKey(opts.keyPrefix, sessionId, '');
        const ids = members.filter((m): m is string => typeof m === 'string' && m.startsWith(before)).map((m) => m.slice(before.length));
        // Each record as readJournal reads it (no events: limit 0), in one round trip; all in the session's slot.
        const pipeline = client.pipeline();
        for (const id of ids) (pipeline as unknown as typeof client).gwReadJournal(...incKeys(sessionId, id), 0, 0);
        const replies = ids.length === 0 ? [] : ((await pipeline.exec()) ?? []);
        const incarnations: IncarnationRecord[] = [];
        replies.forEach(([err, read], i) => {
          if (err) throw err;
          if (read !== null) incarnations.push(toJournalRead(ids[i]!, read).record);
        });
        return {
          session: fields === null ? null : toRecord(fields),
          currentGet: typeof currentGet === 'string' ? currentGet : undefined,
          incarnations,
        };
      });
    },

    readSecret(): Promise<string | null> {
      return run('readSecret', () => client.get(secretKey(opts.keyPrefix)));
    },

    watchJournal(sessionId: string, incarnationId: string, listener: (note: JournalNote) => void): () => void {
      subscriber ??= createSubscriber(opts, opts.onError ?? ignoreError);
      return subscriber.listen(channel(sessionId, incarnationId), (message) => {
        const note = toNote(message);
        if (note === undefined) throw new Error(`malformed journal note: ${message}`);
        listener(note);
      });
    },

    agreeSecret(candidate: string): Promise<string> {
      return run('agreeSecret', () => client.gwAgree(secretKey(opts.keyPrefix), candidate));
    },

    agreeGeneration(candidate: string): Promise<string> {
      return run('agreeGeneration', () => client.gwAgree(generationKey(opts.keyPrefix), candidate));
    },

    watchBindings(watcher: BindingWatcher): () => void {
      watchers.add(watcher);
      subscriber ??= createSubscriber(opts, opts.onError ?? ignoreError);
      const unsubscribe = subscriber.listen(
        bindings,
        (payload) => {
          const note = decodeNote(payload);
          if (note !== undefined) watcher.changed(note);
        },
        (live) => watcher.flowing(live),
      );
      return () => {
        watchers.delete(watcher);
        unsubscribe();
      };
    },

    publishKeyFingerprint(instanceId: string, fingerprint: string, ttlMs: number): Promise<Record<string, string>> {
      return run('publishKeyFingerprint', async () => {
        const flat = await client.gwPublishKeyFingerprint(fingerprintsKey(opts.keyPrefix), instanceId, fingerprint, Date.now(), ttlMs);
        const alive: Record<string, string> = {};
        for (let i = 0; i + 1 < flat.length; i += 2) alive[flat[i]!] = flat[i + 1]!;
        return alive;
      });
    },

    withdrawKeyFingerprint(instanceId: string): Promise<void> {
      return run('withdrawKeyFingerprint', async () => {
        await client.hdel(fingerprintsKey(opts.keyPrefix), instanceId);
      });
    },

    renewInstance(instanceId: string, ttlMs: number): Promise<void> {
      return run('renewInstance', async () => {
        await client.set(aliveKey(opts.keyPrefix, instanceId), '1', 'PX', ttlMs);
      });
    },

    instanceAlive(instanceId: string): Promise<boolean> {
      return run('instanceAlive', async () => (await client.exists(aliveKey(opts.keyPrefix, instanceId))) === 1);
    },

    withdrawInstance(instanceId: string): Promise<void> {
      return run('withdrawInstance', async () => {
        await client.del(aliveKey(opts.keyPrefix, instanceId));
      });
    },

    keepInstanceAlive(instanceId: string, options: LivenessOptions): InstanceLiveness {
      // A function cannot be given to a thread; the thread has no use for the error callback.
      const { onError: _onError, ...connection } = opts;
      return keepAliveOnThread(connection, aliveKey(opts.keyPrefix, instanceId), options);
    },

    ping(): Promise<void> {
      return run('ping', async () => {
        await client.ping();
      });
    },

    async checkAccess(timeoutMs: number): Promise<void> {
      checking = true;
      try {
        await checkAccess(
          { client, run, keyPrefix: opts.keyPrefix, connectionError: () => connectionError, subscriber: (onError) => createSubscriber(opts, onError) },
          timeoutMs,
        );
      } finally {
        checking = false;
      }
    },

    async close(): Promise<void> {
      watchers.clear();
      subscriber?.close();
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

/** A message of an incarnation's channel, as the scripts publish it. */
function toNote(message: string): JournalNote | undefined {
  if (message === 'closed' || message === 'superseded' || message === 'release') return { kind: message };
  const match = /^head (\d+)$/.exec(message);
  return match === null ? undefined : { kind: 'head', head: Number(match[1]) };
}
