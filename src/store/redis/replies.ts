/**
 * The scripts' replies, parsed: anything unexpected (a malformed or partly evicted record) is a
 * store failure, never a session or an incarnation.
 */

import type { IncarnationRecord, IncarnationView, JournalRead, JsonRpcId, SessionRecord, SessionState } from '../types.js';

function isSessionState(state: string): state is SessionState {
  return state === 'active' || state === 'terminated' || state === 'lost';
}

/** HMGET's reply: null for a field the hash does not have. */
const isFieldArray = (value: unknown): value is (string | null)[] =>
  Array.isArray(value) && value.every((v) => v === null || typeof v === 'string');

/** The fields in the order touchSession() (Lua) reads them; anything unexpected is a store failure, not a session. */
export function toRecord(fields: unknown): SessionRecord {
  if (!isFieldArray(fields)) throw new Error(`malformed session record: ${JSON.stringify(fields)}`);
  const [sessionId, owner, ownerEpoch, state, createdAt, endpoint, principal] = fields;
  const created = Number(createdAt);
  if (
    sessionId == null ||
    owner == null ||
    ownerEpoch == null ||
    state == null ||
    !isSessionState(state) ||
    !Number.isSafeInteger(created)
  ) {
    throw new Error(`malformed session record: ${JSON.stringify(fields)}`);
  }
  return {
    sessionId,
    owner,
    ownerEpoch,
    state,
    createdAt: created,
    ...(typeof endpoint === 'string' ? { endpoint } : {}),
    ...(typeof principal === 'string' ? { principal } : {}),
  };
}

const isJsonRpcId = (id: unknown): id is JsonRpcId => typeof id === 'string' || (typeof id === 'number' && Number.isFinite(id));
const isStringArray = (value: unknown): value is string[] => Array.isArray(value) && value.every((v) => typeof v === 'string');

/** The fields of readRecord() (Lua); anything unexpected is a store failure, not an incarnation. */
function toIncarnation(id: string, fields: unknown): IncarnationRecord {
  if (!isStringArray(fields)) throw new Error(`malformed incarnation record: ${JSON.stringify(fields)}`);
  const [sessionId, owner, kind, state, head, base, attach, pending, pump, pumpUntil, tailUntil, journaled, held, clientSeq, holderSpan] = fields;
  const numbers = [head, base, attach, pumpUntil, tailUntil, clientSeq].map(Number);
  const pendingIds: unknown = pending === undefined ? undefined : JSON.parse(pending);
  if (
    sessionId === undefined ||
    owner === undefined ||
    (kind !== 'get' && kind !== 'post') ||
    (state !== 'open' && state !== 'closed' && state !== 'diverged') ||
    !numbers.every(Number.isSafeInteger) ||
    !Array.isArray(pendingIds) ||
    !pendingIds.every(isJsonRpcId) ||
    pump === undefined ||
    holderSpan === undefined ||
    (journaled !== '1' && journaled !== '0') ||
    (held !== '1' && held !== '0')
  ) {
    throw new Error(`malformed incarnation record: ${JSON.stringify(fields)}`);
  }
  const [h, b, a, pu, tu, cs] = numbers as [number, number, number, number, number, number];
  return {
    id,
    sessionId,
    owner,
    kind,
    state,
    head: h,
    base: b,
    attach: a,
    pending: pendingIds,
    pump,
    pumpUntil: pu,
    tailUntil: tu,
    held: held === '1',
    clientSeq: cs,
    ...(holderSpan !== '' ? { holderSpan } : {}),
    journaled: journaled === '1',
  };
}

/** The reply of readIncarnation() (Lua); anything unexpected is a store failure, not an incarnation. */
export function toView(id: string, reply: unknown): IncarnationView {
  if (!Array.isArray(reply) || reply.length !== 3) throw new Error(`malformed incarnation reply: ${JSON.stringify(reply)}`);
  const [fields, currentGet, ids] = reply as [unknown, unknown, unknown];
  if (!isStringArray(ids) || (currentGet !== null && typeof currentGet !== 'string')) {
    throw new Error(`malformed incarnation reply: ${JSON.stringify(reply)}`);
  }
  const record = toIncarnation(id, fields);
  const positions = ids.map((upstreamId) => (upstreamId === '' ? null : upstreamId));
  return { record, currentGet: currentGet ?? undefined, at: positions[0], after: positions.slice(1) };
}

/** The reply of the read journal script: { fields, first position, payloads }. */
export function toJournalRead(id: string, reply: unknown): JournalRead {
  if (!Array.isArray(reply) || reply.length !== 3) throw new Error(`malformed journal reply: ${JSON.stringify(reply)}`);
  const [fields, first, payloads] = reply as [unknown, unknown, unknown];
  if (!Number.isSafeInteger(first) || !isStringArray(payloads)) throw new Error(`malformed journal reply: ${JSON.stringify(reply)}`);
  const from = first as number;
  return { record: toIncarnation(id, fields), events: payloads.map((payload, i) => ({ seq: from + i, payload })) };
}
