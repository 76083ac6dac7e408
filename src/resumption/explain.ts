/**
 * Why a client got (or would get) `resumed: false`: a cursor decoded with the fleet's key, what the
 * store holds for it, and the answer a resumption with it would get now, from the real decision
 * (decide.ts) on the facts the proxy would gather (facts.ts), read without touching anything.
 * Used by `mcp-resume-gateway explain` and by the admin listener's /debug endpoints.
 *
 * Never shown: the cursor secret (only its fingerprint), the store's address or password, the
 * replicas' own event ids, JSON-RPC request ids (a count only). A session id is shown as the
 * operator gave it, with its fingerprint: how the logs and spans name it.
 */
import { parseCursor, type CursorCodec, type DecodeResult, type ForeignWhy } from '../cursor/codec.js';
import type { Fleet, Health } from '../fleet/index.js';
import { INCARNATIONS_LISTED, type IncarnationRecord, type IncarnationState, type IncarnationView, type SessionRecord, type Store } from '../store/types.js';
import { decide, type Decision, type Reason } from './decide.js';
import { gatherFacts } from './facts.js';
import { echoLastEventId } from './signal.js';

/** The key cursors are checked with, and where it comes from. */
export interface ExplainKey {
  readonly codec: CursorCodec;
  readonly source: 'configured' | 'agreed';
}

export interface ExplainDeps {
  readonly store: Store;
  readonly mode: 'signal' | 'reject';
  /** resumption.journal.enabled. */
  readonly journal: boolean;
  /** The key; null when none is configured and none was agreed through the store yet. Rejects with a StoreError. */
  readonly key: () => Promise<ExplainKey | null>;
  /** The owner's epoch check (R4), against the store. */
  readonly fleet: Pick<Fleet, 'ownerGone'>;
  /** The owner's health as this process sees it; undefined where it is not known (the command line). */
  readonly health: (replica: string) => Health | undefined;
}

export interface IncarnationSummary {
  readonly id: string;
  readonly kind: 'get' | 'post';
  readonly state: IncarnationState;
  readonly owner: string;
  /** The recorded window: positions base..head have their records. */
  readonly base: number;
  readonly head: number;
  readonly attach: number;
  /** POST streams: requests whose responses have not passed yet (a count: the ids are the client's). */
  readonly pendingCalls: number;
  /** J1: the journal holds the bytes of every position base..head. */
  readonly journaled: boolean;
  /** J3: the instance that pumps the stream, and until when (ISO time); absent when none. */
  readonly pump?: { readonly instance: string; readonly until: string };
}

export interface Explanation {
  readonly cursor: {
    /** The value as given, printable ASCII only, at most 128 characters. */
    readonly value: string;
    /** The fields read from its shape; absent when it does not even look like a cursor. */
    readonly incarnation?: string;
    readonly position?: number;
    /** The MAC checked with the key: valid, invalid, or not checked (no key). */
    readonly mac: 'valid' | 'invalid' | 'not_checked';
    /** Why the value is a foreign cursor, when it is one. */
    readonly foreign?: ForeignWhy | 'no_key';
    /** Its session tag against the session given: match, mismatch, or not checked. */
    readonly session: 'match' | 'mismatch' | 'not_checked';
    /**
     * The key: its fingerprint is the signing key's; `previous`, when a previous key verified the
     * cursor, names it (its index in cursor.previousSecrets and its fingerprint).
     */
    readonly key: {
      readonly source: 'configured' | 'agreed' | 'none';
      readonly fingerprint?: string;
      readonly previous?: { readonly index: number; readonly fingerprint: string };
    };
  };
  /** The session as the store holds it; null when it holds none (or no session was given). */
  readonly session: SessionSummary | null;
  /** How the logs and spans name the session given (see sessionFingerprints); absent without a session or a key. */
  readonly sessionFingerprints?: SessionFingerprints;
  /** The cursor's incarnation, when the cursor is authentic and of the session given. */
  readonly incarnation: {
    readonly recorded: boolean;
    readonly record?: IncarnationSummary;
    /** The cursor's position is within the recorded window. */
    readonly positionRecorded?: boolean;
    /** A newer GET incarnation of the session exists (E4); undefined for POST streams. */
    readonly supersededBy?: string;
  } | null;
  /** What a resumption with this cursor (and this session) would get now. */
  readonly resumption: ResumptionAnswer;
  /** What the explanation could not see, and why. */
  readonly notes: readonly string[];
}

export interface SessionSummary {
  readonly id: string;
  readonly state: SessionRecord['state'];
  readonly owner: string;
  readonly ownerEpoch: string;
  readonly createdAt: string;
  /** R4: the owner is gone (its epoch retired, or it left the configuration). */
  readonly ownerGone: boolean;
  /** The owner's health where it is known (the gateway), 'unknown' elsewhere. */
  readonly ownerHealth: Health | 'unknown';
}

export interface ResumptionAnswer {
  /** As mcp_gateway_resumptions_total counts it, or 'unavailable' for the 503 of a suspect owner. */
  readonly outcome: 'continued' | 'new_stream' | 'rejected' | 'unavailable';
  /** The reason (§5), 'none' for a continuation. */
  readonly reason: Reason | 'none';
  /** The status the client would get. */
  readonly status: number;
  readonly detail: string;
}

/**
 * How the logs and spans name a session (CursorCodec.sessionFingerprint): under the signing key,
 * and under each previous key, which instances not yet past a rotation's second step still sign
 * with (docs/security.md#cursor-keys).
 */
export interface SessionFingerprints {
  readonly current: string;
  readonly previous: readonly string[];
}

export interface SessionView {
  readonly session: SessionSummary | null;
  /** How the logs and spans name the session; absent while there is no key. */
  readonly fingerprints?: SessionFingerprints;
  readonly currentGet: string | undefined;
  /** The incarnations the store still holds, newest first (at most INCARNATIONS_LISTED). */
  readonly incarnations: readonly IncarnationSummary[];
  readonly openStreams: {
    /** Incarnations in state open: streams that may go on, through any instance. */
    readonly recorded: readonly string[];
    /** Streams of the session this instance relays right now. */
    readonly here: readonly { readonly incarnation: string; readonly replica: string }[];
  };
}

/** Explains `value` as a Last-Event-ID of a resumption in `sessionId` (none: a request without Mcp-Session-Id). Rejects with a StoreError. */
export async function explainCursor(deps: ExplainDeps, value: string, sessionId: string | undefined): Promise<Explanation> {
  const notes: string[] = [];
  const key = await deps.key();
  const shape = parseCursor(value);
  const fields = shape.kind === 'parsed' ? { incarnation: shape.parts.incarnation, position: shape.parts.seq } : {};
  // Without a session the tag is checked against none: the MAC still tells authentic from forged.
  const cursor: DecodeResult = key ? key.codec.decode(value, sessionId ?? '') : shape.kind === 'foreign' ? shape : { kind: 'foreign', why: 'bad_mac' };
  if (!key) notes.push('no cursor key: none is configured and none was agreed through the store yet, so no cursor can be authentic');
  if (sessionId === undefined) notes.push('no session given: a resumption without Mcp-Session-Id is answered session_unknown (give --session or session=)');

  const reading = sessionId !== undefined;
  const facts = await gatherFacts(
    cursor,
    async (read) => {
      if (!reading) return { session: null, view: null };
      const inspected = await deps.store.inspectSession(sessionId, 0);
      const view = read ? await deps.store.readIncarnation(sessionId, read.incarnationId, read.afterSeq) : null;
      return { session: inspected.session, view };
    },
    { ownerGone: (s) => deps.fleet.ownerGone(s), health: deps.health },
    { journal: deps.journal, now: Date.now(), instanceAlive: (instanceId) => deps.store.instanceAlive(instanceId) },
  );
  if (facts.session && facts.ownerHealth === undefined && !facts.ownerGone) {
    notes.push("the owner's health is not known here (only a running gateway probes it): a suspect owner would get 503");
  }
  if (facts.view?.record.state === 'diverged') {
    notes.push(
      `the owner ${facts.view.record.owner} sent an event of this stream under an upstream id already recorded for another event (it numbers its events anew, E6): no resumption of it is continued from the owner again; give the replica an event log that replays, or turn the journal on`,
    );
  }
  const decision = decide(facts);
  return {
    cursor: {
      value: echoLastEventId(value),
      ...fields,
      // Only a value with the shape of a cursor has its MAC checked.
      mac: !key || shape.kind === 'foreign' ? 'not_checked' : cursor.kind === 'foreign' ? 'invalid' : 'valid',
      ...(cursor.kind === 'foreign' ? { foreign: key || shape.kind === 'foreign' ? cursor.why : ('no_key' as const) } : {}),
      session: cursor.kind === 'ok' ? (sessionId === undefined ? 'not_checked' : 'match') : cursor.kind === 'session_mismatch' && sessionId !== undefined ? 'mismatch' : 'not_checked',
      key: key ? { source: key.source, fingerprint: key.codec.fingerprint, ...previousKey(key.codec, cursor) } : { source: 'none' },
    },
    session: facts.session ? summarizeSession(facts.session, facts.ownerGone, facts.ownerHealth) : null,
    ...(key && sessionId !== undefined ? { sessionFingerprints: fingerprintsOf(key.codec, sessionId) } : {}),
    incarnation: cursor.kind === 'ok' && facts.session ? summarizeView(facts.view, cursor.fields.seq) : null,
    resumption: answerOf(decision, deps.mode),
    notes,
  };
}

/** A session's owner, state, incarnations and open streams. Rejects with a StoreError. */
export async function viewSession(
  deps: Pick<ExplainDeps, 'store' | 'fleet' | 'health' | 'key'>,
  sessionId: string,
  here: readonly { incarnation: string; replica: string }[],
): Promise<SessionView> {
  const key = await deps.key();
  const inspected = await deps.store.inspectSession(sessionId, INCARNATIONS_LISTED);
  const { session } = inspected;
  const ownerGone = session ? await deps.fleet.ownerGone(session) : false;
  const incarnations = inspected.incarnations.map(summarizeIncarnation);
  return {
    session: session ? summarizeSession(session, ownerGone, deps.health(session.owner)) : null,
    ...(key ? { fingerprints: fingerprintsOf(key.codec, sessionId) } : {}),
    currentGet: inspected.currentGet,
    incarnations,
    openStreams: { recorded: incarnations.filter((i) => i.state === 'open').map((i) => i.id), here },
  };
}

function fingerprintsOf(codec: CursorCodec, sessionId: string): SessionFingerprints {
  const [current, ...previous] = codec.sessionFingerprints(sessionId);
  return { current: current!, previous };
}

/** What the client gets for a decision, in `mode`. */
function answerOf(decision: Decision, mode: 'signal' | 'reject'): ResumptionAnswer {
  switch (decision.kind) {
    case 'not_found':
      return { outcome: 'rejected', reason: decision.reason, status: 404, detail: 'Session not found (R3)' };
    case 'unavailable':
      return { outcome: 'unavailable', reason: 'none', status: 503, detail: `the owner ${decision.owner} is suspected: 503 with Retry-After` };
    case 'await_record':
      return {
        outcome: 'continued',
        reason: 'none',
        status: 200,
        detail: `position ${decision.seq} is not recorded yet, and the instance that holds the stream may still record it (written late after a store outage): the decision waits for it up to resumption.replayTimeoutMs, then decides again (unknown_stream if it never came)`,
      };
    case 'complete':
      return { outcome: 'continued', reason: 'none', status: 204, detail: 'the cursor is the last event of a stream that is over: nothing follows' };
    case 'continue':
      return {
        outcome: 'continued',
        reason: 'none',
        status: 200,
        detail: `the owner is asked to replay ${decision.expected.length} event(s) after position ${decision.seq}; a replay that is not exact is a gap (check 7)`,
      };
    case 'journal':
      return {
        outcome: 'continued',
        reason: 'none',
        status: 200,
        detail: `continued from the journal after position ${decision.seq}${decision.live ? ', then the live stream' : ', then the stream ends (its pump is gone)'}`,
      };
    case 'new_stream': {
      const calls = decision.pending.length > 0 ? `, ${decision.pending.length} call(s) fail with -32010` : '';
      if (mode === 'reject') return { outcome: 'rejected', reason: decision.reason, status: 410, detail: `410 Last-Event-ID cannot be resumed${calls}` };
      const then = decision.freshGet ? 'then a fresh GET stream from the owner' : 'then the stream ends';
      return { outcome: 'new_stream', reason: decision.reason, status: 200, detail: `the stream_reset signal${calls}, ${then}` };
    }
  }
}

function summarizeSession(session: SessionRecord, ownerGone: boolean, health: Health | undefined): SessionSummary {
  return {
    id: session.sessionId,
    state: session.state,
    owner: session.owner,
    ownerEpoch: session.ownerEpoch,
    createdAt: new Date(session.createdAt).toISOString(),
    ownerGone,
    ownerHealth: health ?? 'unknown',
  };
}

function summarizeView(view: IncarnationView | null, seq: number): Explanation['incarnation'] {
  if (!view) return { recorded: false };
  const { record } = view;
  const superseded = record.kind === 'get' && view.currentGet !== undefined && view.currentGet !== record.id;
  return {
    recorded: true,
    record: summarizeIncarnation(record),
    positionRecorded: view.at !== undefined && seq <= record.head,
    ...(superseded ? { supersededBy: view.currentGet } : {}),
  };
}

function summarizeIncarnation(record: IncarnationRecord): IncarnationSummary {
  return {
    id: record.id,
    kind: record.kind,
    state: record.state,
    owner: record.owner,
    base: record.base,
    head: record.head,
    attach: record.attach,
    pendingCalls: record.pending.length,
    journaled: record.journaled,
    ...(record.pump !== '' && record.pumpUntil > 0 ? { pump: { instance: record.pump, until: new Date(record.pumpUntil).toISOString() } } : {}),
  };
}

/** The previous key that verified `cursor`, if one did. */
function previousKey(codec: CursorCodec, cursor: DecodeResult): { previous?: { index: number; fingerprint: string } } {
  if (cursor.kind === 'foreign' || cursor.previous === undefined) return {};
  return { previous: { index: cursor.previous, fingerprint: codec.fingerprints[cursor.previous + 1]! } };
}

/** The explanation as an operator reads it in a terminal. */
export function formatExplanation(e: Explanation): string {
  const lines: string[] = [];
  const c = e.cursor;
  lines.push(`cursor       ${c.value}`);
  const previous = c.key.previous ? `; verified by cursor.previousSecrets[${c.key.previous.index}] (fingerprint ${c.key.previous.fingerprint})` : '';
  lines.push(`  key        ${c.key.source}${c.key.fingerprint ? ` (fingerprint ${c.key.fingerprint})` : ''}${previous}`);
  lines.push(`  mac        ${c.mac}${c.foreign ? ` (foreign_cursor: ${c.foreign})` : ''}`);
  if (c.incarnation !== undefined) {
    const trust = c.mac === 'valid' ? '' : ' (read from its shape, not authenticated)';
    lines.push(`  incarnation ${c.incarnation}${trust}`);
    lines.push(`  position   ${c.position}`);
  }
  lines.push(`  session    ${c.session === 'match' ? 'matches the session given' : c.session === 'mismatch' ? 'issued in another session than the one given' : 'not checked'}`);
  const s = e.session;
  if (s) {
    const owner = s.ownerGone ? 'gone' : s.ownerHealth;
    lines.push(`session      ${s.id}: ${s.state}, owner ${s.owner} (${owner}), epoch ${s.ownerEpoch || '(first)'}, created ${s.createdAt}`);
  } else {
    lines.push('session      not held by the store (unknown, expired, or ended long ago)');
  }
  const f = e.sessionFingerprints;
  if (f) lines.push(`  logged as  ${f.current}${f.previous.length > 0 ? ` (under cursor.previousSecrets: ${f.previous.join(', ')})` : ''}`);
  const inc = e.incarnation;
  if (inc && !inc.recorded) lines.push('incarnation  not recorded (never, or no longer: expired with its session)');
  if (inc?.record) {
    const r = inc.record;
    lines.push(`incarnation  ${r.id}: ${r.kind} stream, ${r.state}, owner ${r.owner}, attach ${r.attach}`);
    lines.push(`  recorded   positions ${r.base}..${r.head}; the cursor's position is ${inc.positionRecorded ? 'recorded' : 'not recorded'}`);
    lines.push(`  journal    ${r.journaled ? `positions ${Math.max(r.base, 1)}..${r.head}` : 'none'}${r.pump ? `, pumped by ${r.pump.instance} until ${r.pump.until}` : ''}`);
    if (r.kind === 'post') lines.push(`  calls      ${r.pendingCalls} awaiting their response`);
    lines.push(`  superseded ${inc.supersededBy ? `yes, by the newer GET ${inc.supersededBy}` : 'no'}`);
  }
  const a = e.resumption;
  lines.push(`resumption   ${a.outcome}${a.reason === 'none' ? '' : `, reason ${a.reason}`} (status ${a.status}): ${a.detail}`);
  for (const note of e.notes) lines.push(`note         ${note}`);
  return `${lines.join('\n')}\n`;
}
