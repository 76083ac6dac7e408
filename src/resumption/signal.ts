/**
 * The wire format of a resumption that is not a continuation (CONTRACT.md §5): the headers, and
 * the events of the signal stream. Codes, methods and messages come from the registry (errors.ts);
 * the 410 of reject mode is an answer like the others (GW_NOT_RESUMABLE, answers.ts).
 */
import { ERROR_CODES } from '../errors.js';
import type { JsonRpcId } from '../store/types.js';
import type { NewStreamReason } from './decide.js';

export const RESUMPTION_HEADER = 'mcp-resumption';
export const REASON_HEADER = 'mcp-resumption-reason';
export const STREAM_RESET_METHOD = ERROR_CODES.GW_STREAM_RESET.rpc;

/** The header's value as the notification repeats it: printable ASCII only, at most 128 characters. */
export function echoLastEventId(value: string): string {
  return [...value]
    .map((c) => (c >= ' ' && c <= '~' ? c : '?'))
    .join('')
    .slice(0, 128);
}

export function streamResetNotification(reason: NewStreamReason, lastEventId: string): string {
  return JSON.stringify({
    jsonrpc: '2.0',
    method: STREAM_RESET_METHOD,
    params: { resumed: false, reason, lastEventId: echoLastEventId(lastEventId) },
  });
}

/** The `error.data` of both -32010 answers: the pending call's event and the 410. */
export function notResumed(reason: NewStreamReason) {
  return { resumed: false, reason };
}

export function outcomeUnknownError(id: JsonRpcId, reason: NewStreamReason): string {
  const { rpc, message } = ERROR_CODES.GW_OUTCOME_UNKNOWN;
  return JSON.stringify({ jsonrpc: '2.0', id, error: { code: rpc, message, data: notResumed(reason) } });
}
