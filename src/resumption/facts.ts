/**
 * What a resumption decides on (decide.ts's ResumptionFacts), gathered from the cursor, the store
 * and the fleet: by the proxy for a real resumption (resume.ts, reading with a touch), and by
 * explain for an operator (explain.ts, reading without one), so that both decide on the same facts.
 */
import type { DecodeResult } from '../cursor/codec.js';
import type { Fleet } from '../fleet/index.js';
import type { IncarnationView, SessionRecord } from '../store/types.js';
import type { ResumptionFacts } from './decide.js';

/** Reads the session and, when named, the cursor's incarnation at its position. Rejects with a StoreError. */
export type FactsReader = (read: { incarnationId: string; afterSeq: number } | undefined) => Promise<{
  session: SessionRecord | null;
  view: IncarnationView | null;
}>;

/** The facts of a resumption with `cursor` (decoded against the request's session). Rejects with a StoreError. */
export async function gatherFacts(
  cursor: DecodeResult,
  readStore: FactsReader,
  fleet: Pick<Fleet, 'ownerGone' | 'health'>,
  context: { journal: boolean; now: number },
): Promise<ResumptionFacts> {
  // Only an authentic cursor of this session names an incarnation worth reading: the session and
  // it are then read in one store round trip.
  const read = cursor.kind === 'ok' ? { incarnationId: cursor.fields.incarnation, afterSeq: cursor.fields.seq } : undefined;
  const { session, view } = await readStore(read);
  const ownerGone = !!session && (await fleet.ownerGone(session));
  return {
    session,
    ownerGone,
    ownerHealth: session ? fleet.health(session.owner) : undefined,
    cursor,
    view: session ? view : null,
    journal: context.journal,
    now: context.now,
  };
}
