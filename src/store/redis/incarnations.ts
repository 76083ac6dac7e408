/**
 * The Redis store's incarnations: each stream incarnation's record, position list and journal
 * (scripts/incarnation.ts, scripts/record-events.ts), its pump and its tails. The records of many
 * streams, and the journal reads of many tails, made in one loop turn share one round trip
 * (call-flush.ts); every other call is its own script.
 */
import type { EventBatch, HeldGetRelease, IncarnationRecord, IncarnationView, JournalRead, NewIncarnation, RecordResult, Store } from '../types.js';
import { CallFlush, sendGroup, sendVia } from './call-flush.js';
import type { Runner } from './command.js';
import { JournalEnds } from './journal-cut.js';
import { incarnationKey, incarnationKeys, incarnationsKey, noteChannel, noteChannelPrefix, sessionKey } from './keys.js';
import { toJournalRead, toView } from './replies.js';
import type { ScriptedClient } from './scripts/index.js';
import { seqArgument } from './scripts/incarnation.js';

/** How many times releaseHeldGet reads the session's current GET again when a newer one replaced it. */
const RELEASE_ATTEMPTS = 3;

export type IncarnationOps = Pick<
  Store,
  | 'openIncarnation'
  | 'attachIncarnation'
  | 'recordEvents'
  | 'readIncarnation'
  | 'closeIncarnation'
  | 'readJournal'
  | 'touchTail'
  | 'releaseHeldGet'
  | 'releasePump'
  | 'setHeld'
  | 'endTail'
  | 'readCurrentGet'
  | 'touchIncarnation'
>;

export function incarnationOps({ client, run, keyPrefix, cluster }: { client: ScriptedClient; run: Runner; keyPrefix: string; cluster: boolean }): IncarnationOps {
  /** Where this instance expects each journal it writes to end: its batches are sent cut there. */
  const journalEnds = new JournalEnds();
  /** The batches recorded in one loop turn, in one round trip (per slot on a Cluster). */
  const records = new CallFlush<string>(
    (group) => sendGroup(group, (call) => client.gwRecordEvents(...(call.keys as [string, string, string, string]), ...call.args), (args) => client.gwRecordMany(...args), String),
    cluster,
  );
  /** The journal reads of one loop turn (every tail that was noted a new head), in one round trip. */
  const journalReads = new CallFlush<unknown>(
    (group) => sendGroup(group, (call) => client.gwReadJournal(...(call.keys as [string, string, string]), ...(call.args as [number, number])), (args) => client.gwReadJournalMany(...args), (answer) => answer),
    cluster,
  );
  const key = (sessionId: string): string => sessionKey(keyPrefix, sessionId);
  const incKeys = (sessionId: string, incarnationId: string) => incarnationKeys(keyPrefix, sessionId, incarnationId);
  const channel = (sessionId: string, incarnationId: string): string => noteChannel(keyPrefix, sessionId, incarnationId);

  return {
    openIncarnation(incarnation: NewIncarnation, ttlMs: number): Promise<void> {
      return run('openIncarnation', async () => {
        const { id, sessionId, owner, kind } = incarnation;
        const opened = await client.gwOpenIncarnation(
          ...incKeys(sessionId, id),
          key(sessionId),
          incarnationsKey(keyPrefix, sessionId),
          id,
          sessionId,
          owner,
          kind,
          JSON.stringify(incarnation.pending ?? []),
          incarnation.supersede ? '1' : '0',
          ttlMs,
          noteChannelPrefix(keyPrefix, sessionId),
          incarnation.pump?.instanceId ?? '',
          incarnation.pump ? Date.now() + incarnation.pump.leaseMs : 0,
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

    recordEvents(
      sessionId: string,
      incarnationId: string,
      batch: EventBatch,
      maxPositions: number,
      ttlMs: number,
      maxJournalBytes?: number,
    ): Promise<RecordResult> {
      return run('recordEvents', async () => {
        const { create, payloads, pump } = batch;
        if (create !== undefined && (batch.attach !== 1 || batch.fromSeq !== 1)) {
          // Only the first batch of the first attachment may create its incarnation.
          throw new Error('a batch with create must be attach 1 and fromSeq 1');
        }
        if (create !== undefined && !(ttlMs > 0)) throw new Error('a batch with create must give a TTL');
        if (payloads !== undefined && payloads.length !== batch.upstreamIds.length) {
          throw new Error('payloads and upstream ids differ in length');
        }
        const [incKey, posKey, jnlKey] = incKeys(sessionId, incarnationId);
        const frames = payloads?.frames;
        const pieces = frames === undefined ? undefined : journalEnds.send(incKey, frames);
        const args = [
          batch.attach,
          batch.fromSeq,
          Math.max(1, Math.floor(maxPositions)),
          ttlMs,
          ...(create === undefined ? ['0', '', '', '', ''] : ['1', sessionId, create.owner, create.kind, JSON.stringify(create.pending)]),
          batch.responded.length,
          ...batch.responded.map((id) => JSON.stringify(id)),
          batch.upstreamIds.length,
          batch.upstreamIds.map((id) => id ?? '').join('\n'),
          maxJournalBytes === undefined ? -1 : Math.max(0, Math.floor(maxJournalBytes)),
          pump?.instanceId ?? '',
          pump === undefined ? 0 : Date.now() + pump.leaseMs,
          channel(sessionId, incarnationId),
          ...(pieces === undefined ? ['0', ''] : ['1', ...pieces]),
        ];
        let end: number | undefined;
        try {
          const answer = await sendVia(records, [incKey, posKey, jnlKey, incarnationsKey(keyPrefix, sessionId)], args);
          end = journalEnd(answer);
          if (answer === 'ok' || answer === 'stale' || answer === 'missing') return answer;
          if (end !== undefined) return 'ok';
          throw new Error(answer.startsWith('err ') ? answer.slice(4) : `unexpected reply: ${answer}`);
        } finally {
          if (frames !== undefined) journalEnds.answered(incKey, frames.length, end);
        }
      });
    },

    readIncarnation(sessionId: string, incarnationId: string, afterSeq: number): Promise<IncarnationView | null> {
      return run('readIncarnation', async () => {
        const reply = await client.gwReadIncarnation(...incKeys(sessionId, incarnationId), key(sessionId), seqArgument(afterSeq));
        return reply === null ? null : toView(incarnationId, reply);
      });
    },

    closeIncarnation(sessionId: string, incarnationId: string, state: 'closed' | 'diverged' = 'closed'): Promise<void> {
      const incKey = incarnationKey(keyPrefix, sessionId, incarnationId);
      journalEnds.forget(incKey);
      return run('closeIncarnation', async () => {
        await client.gwCloseIncarnation(incKey, channel(sessionId, incarnationId), state);
      });
    },

    readJournal(sessionId: string, incarnationId: string, afterSeq: number, limit: number): Promise<JournalRead | null> {
      return run('readJournal', async () => {
        const reply = await sendVia(journalReads, incKeys(sessionId, incarnationId), [seqArgument(afterSeq), Math.max(0, Math.floor(limit))]);
        return reply === null ? null : toJournalRead(incarnationId, reply);
      });
    },

    touchTail(sessionId: string, incarnationId: string, leaseMs: number): Promise<void> {
      return run('touchTail', async () => {
        await client.gwTouchTail(incarnationKey(keyPrefix, sessionId, incarnationId), Date.now() + leaseMs);
      });
    },

    releaseHeldGet(sessionId: string): Promise<HeldGetRelease> {
      return run('releaseHeldGet', async () => {
        // The current GET's id first, then the script on its keys; a GET that became current in
        // between is read again (a bounded number of times: each such GET superseded the last).
        for (let attempt = 0; attempt < RELEASE_ATTEMPTS; attempt++) {
          const current = await client.hget(key(sessionId), 'getInc');
          if (current === null) return 'none';
          const reply = await client.gwReleaseHeldGet(key(sessionId), incarnationKey(keyPrefix, sessionId, current), Date.now(), current, channel(sessionId, current));
          if (reply === 'asked' || reply === 'tailed' || reply === 'none') return reply;
          if (reply !== 'moved') throw new Error(`unexpected releaseHeldGet reply: ${String(reply)}`);
        }
        return 'none';
      });
    },

    releasePump(sessionId: string, incarnationId: string, instanceId: string): Promise<void> {
      return run('releasePump', async () => {
        await client.gwReleasePump(incarnationKey(keyPrefix, sessionId, incarnationId), instanceId);
      });
    },

    setHeld(sessionId: string, incarnationId: string, instanceId: string, clientSeq: number | undefined, holderSpan?: string): Promise<void> {
      return run('setHeld', async () => {
        const held = clientSeq === undefined ? '0' : '1';
        await client.gwSetHeld(incarnationKey(keyPrefix, sessionId, incarnationId), instanceId, held, clientSeq === undefined ? '' : String(clientSeq), holderSpan ?? '');
      });
    },

    endTail(sessionId: string, incarnationId: string, clientSeq: number): Promise<void> {
      return run('endTail', async () => {
        await client.gwEndTail(incarnationKey(keyPrefix, sessionId, incarnationId), Date.now(), clientSeq);
      });
    },

    readCurrentGet(sessionId: string): Promise<IncarnationRecord | null> {
      return run('readCurrentGet', async () => {
        // Two steps, every key named in KEYS: the id first, then its record (a newer GET opened in
        // between is the caller's race to lose, as with any read before a request).
        const current = await client.hget(key(sessionId), 'getInc');
        if (current === null) return null;
        const reply = await client.gwReadIncarnation(...incKeys(sessionId, current), key(sessionId), 0);
        return reply === null || reply === false ? null : toView(current, reply).record;
      });
    },

    touchIncarnation(sessionId: string, incarnationId: string, ttlMs: number): Promise<void> {
      return run('touchIncarnation', async () => {
        await client.gwTouchIncarnation(...incKeys(sessionId, incarnationId), ttlMs);
      });
    },
  };
}

/** The journal's end in bytes that the record script answers after a batch it journaled ('ok <end>'). */
function journalEnd(reply: unknown): number | undefined {
  if (typeof reply !== 'string' || !reply.startsWith('ok ')) return undefined;
  const end = Number(reply.slice(3));
  return Number.isSafeInteger(end) && end >= 0 ? end : undefined;
}
