/**
 * The wire format of a resumption that is not a continuation (CONTRACT.md §5), in one place.
 */
import type { JsonRpcId } from '../store/types.js';
import type { NewStreamReason } from './decide.js';

export const RESUMPTION_HEADER = 'mcp-resumption';
export const REASON_HEADER = 'mcp-resumption-reason';
export const STREAM_RESET_METHOD = 'notifications/gateway/stream_reset';
/** JSON-RPC error code for a request whose outcome the gateway cannot know, and for 410. */
export const NOT_RESUMABLE_CODE = -32010;

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

export function outcomeUnknownError(id: JsonRpcId, reason: NewStreamReason): string {
  return JSON.stringify({
    jsonrpc: '2.0',
    id,
    error: {
      code: NOT_RESUMABLE_CODE,
      message: "Stream not resumable; the request's outcome is unknown",
      data: { resumed: false, reason },
    },
  });
}

export function rejectBody(reason: NewStreamReason): string {
  return JSON.stringify({
    jsonrpc: '2.0',
    id: null,
    error: {
      code: NOT_RESUMABLE_CODE,
      message: 'Last-Event-ID cannot be resumed; reconnect without it',
      data: { resumed: false, reason },
    },
  });
}
