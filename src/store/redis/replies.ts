/**
 * The scripts' replies, parsed: anything unexpected (a malformed or partly evicted record) is a
 * store failure, never a session or an incarnation.
 */

import type { IncarnationRecord, IncarnationView, JsonRpcId, SessionRecord, SessionState } from '../types.js';

function isSessionState(state: string): state is SessionState {
  return state === 'active' || state === 'terminated' || state === 'lost';
}

/** HMGET's reply: null for a field the hash does not have. */
const isFieldArray = (value: unknown): value is (string | null)[] =>
  Array.isArray(value) && value.every((v) => v === null || typeof v === 'string');

/** The fields in the order touchSession() (Lua) reads them; anything unexpected is a store failure, not a session. */
export function toRecord(fields: unknown): SessionRecord {
  if (!isFieldArray(fields)) throw new Error(`malformed session record: ${JSON.stringify(fields)}`);
  const [sessionId, owner, ownerEpoch, state, createdAt] = fields;
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
  return { sessionId, owner, ownerEpoch, state, createdAt: created };
}

const isJsonRpcId = (id: unknown): id is JsonRpcId => typeof id === 'string' || (typeof id === 'number' && Number.isFinite(id));
const isStringArray = (value: unknown): value is string[] => Array.isArray(value) && value.every((v) => typeof v === 'string');

/** The reply of readIncarnation() (Lua); anything unexpected is a store failure, not an incarnation. */
export function toView(id: string, reply: unknown): IncarnationView {
  if (!Array.isArray(reply) || reply.length !== 3) throw new Error(`malformed incarnation reply: ${JSON.stringify(reply)}`);
  const [fields, currentGet, ids] = reply as [unknown, unknown, unknown];
  if (!isStringArray(fields) || !isStringArray(ids) || (currentGet !== null && typeof currentGet !== 'string')) {
    throw new Error(`malformed incarnation reply: ${JSON.stringify(reply)}`);
  }
  const [sessionId, owner, kind, state, head, base, attach, pending] = fields;
  const numbers = [head, base, attach].map(Number);
  const pendingIds: unknown = pending === undefined ? undefined : JSON.parse(pending);
  if (
    sessionId === undefined ||
    owner === undefined ||
    (kind !== 'get' && kind !== 'post') ||
    (state !== 'open' && state !== 'closed') ||
    !numbers.every(Number.isSafeInteger) ||
    !Array.isArray(pendingIds) ||
    !pendingIds.every(isJsonRpcId)
  ) {
    throw new Error(`malformed incarnation record: ${JSON.stringify(fields)}`);
  }
  const [h, b, a] = numbers as [number, number, number];
  const record: IncarnationRecord = { id, sessionId, owner, kind, state, head: h, base: b, attach: a, pending: pendingIds };
  const positions = ids.map((upstreamId) => (upstreamId === '' ? null : upstreamId));
  return { record, currentGet: currentGet ?? undefined, at: positions[0], after: positions.slice(1) };
}
