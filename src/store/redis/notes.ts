/**
 * Binding notes on the wire: one pub/sub message per change, published by the script that made
 * it. A session id has no LF or CR (it travels in a header); a replica id and an epoch have no space.
 */

import type { BindingNote } from '../types.js';

export function encodeNote(note: BindingNote): string {
  return note.kind === 'ended' ? `ended ${note.sessionId}` : `retired ${note.replicaId} ${note.epoch}`;
}

/** The note a message carries; undefined for anything else (a newer gateway's note, say). */
export function decodeNote(payload: string): BindingNote | undefined {
  if (payload.startsWith('ended ')) return { kind: 'ended', sessionId: payload.slice('ended '.length) };
  const retired = /^retired (\S+) (\S+)$/.exec(payload);
  if (retired) return { kind: 'retired', replicaId: retired[1]!, epoch: retired[2]! };
  return undefined;
}
