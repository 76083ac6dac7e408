/**
 * What a resumption decides on (decide.ts's ResumptionFacts), gathered from the cursor, the store
 * and the fleet: by the proxy for a real resumption (resume.ts, reading with a touch), and by
 * explain for an operator (explain.ts, reading without one), so that both decide on the same facts.
 */
import type { DecodeResult } from '../cursor/codec.js';
import type { Fleet } from '../fleet/index.js';
import type { IncarnationRecord, IncarnationView, SessionRecord } from '../store/types.js';
import { leaseLate } from '../streams/liveness.js';
import { pumpLives, type ResumptionFacts } from './decide.js';

/** Reads the session and, when named, the cursor's incarnation at its position. Rejects with a StoreError. */
export type FactsReader = (read: { incarnationId: string; afterSeq: number } | undefined) => Promise<{
  session: SessionRecord | null;
  view: IncarnationView | null;
}>;

export interface FactsContext {
  journal: boolean;
  now: number;
  /** Whether a lease is this instance's for a stream that has ended here (pumps.ts); absent: not known here. */
  endedHere?: (record: IncarnationRecord) => boolean;
  /** Whether an instance's liveness runs (store.instanceAlive); absent: a lapsed lease is taken as its instance gone. Rejects with a StoreError. */
  instanceAlive?: (instanceId: string) => Promise<boolean>;
}

/**
 * Whether the instance of a stream's lapsed lease is alive (its renewal only late, decide.ts's
 * pumpLives): asked only of an open stream whose lease lapsed lately, not of one that ended here.
 * Rejects with a StoreError.
 */
export async function pumpInstanceAlive(record: IncarnationRecord, now: number, endedHere: boolean, alive: FactsContext['instanceAlive']): Promise<boolean> {
  if (alive === undefined || endedHere || record.state !== 'open' || !leaseLate(record, now)) return false;
  return alive(record.pump);
}

/**
 * The facts of a resumption with `cursor` (decoded against the request's session). With
 * `fleet.confirmAlive` (a running gateway), an owner whose GET stream ended under it is probed
 * first (see endedUnder). Rejects with a StoreError.
 */
export async function gatherFacts(
  cursor: DecodeResult,
  readStore: FactsReader,
  fleet: Pick<Fleet, 'ownerGone' | 'health'> & Partial<Pick<Fleet, 'confirmAlive'>>,
  context: FactsContext,
): Promise<ResumptionFacts> {
  // Only an authentic cursor of this session names an incarnation worth reading: the session and
  // it are then read in one store round trip.
  const read = cursor.kind === 'ok' ? { incarnationId: cursor.fields.incarnation, afterSeq: cursor.fields.seq } : undefined;
  const store = await readStore(read);
  const { session } = store;
  const view = session ? store.view : null;
  const pumpEnded = view !== null && (context.endedHere?.(view.record) ?? false);
  const instanceAlive = view !== null && context.journal && (await pumpInstanceAlive(view.record, context.now, pumpEnded, context.instanceAlive));
  let ownerGone = !!session && (await fleet.ownerGone(session));
  if (session && !ownerGone && view && fleet.confirmAlive && endedUnder(view, session, context, pumpEnded, instanceAlive)) {
    await fleet.confirmAlive(session.owner);
    ownerGone = await fleet.ownerGone(session);
  }
  return {
    session,
    ownerGone,
    ownerHealth: session ? fleet.health(session.owner) : undefined,
    cursor,
    view,
    journal: context.journal,
    now: context.now,
    pumpEnded,
    ...(instanceAlive ? { pumpInstanceAlive: true } : {}),
  };
}

/**
 * The session's current GET stream, journaled and never ended by the gateway, that no pump reads
 * any more: its owner's stream ended as a dying owner's does, or its hold ran out. The pump that
 * saw the end probed the owner, but the probe may have told nothing (a process still dying), and
 * another instance may not have heard what it found: asked again here, so that a dead owner is
 * answered owner_gone (J4) wherever the client comes back, not as a gap.
 */
function endedUnder(view: IncarnationView, session: SessionRecord, context: FactsContext, pumpEnded: boolean, instanceAlive: boolean): boolean {
  const { record } = view;
  const current = view.currentGet === undefined || view.currentGet === record.id;
  return (
    context.journal &&
    record.journaled &&
    record.kind === 'get' &&
    record.state === 'open' &&
    current &&
    record.owner === session.owner &&
    !pumpLives(record, context.now, pumpEnded, instanceAlive)
  );
}
