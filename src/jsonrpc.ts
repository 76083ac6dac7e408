/**
 * The ids of the JSON-RPC messages a body carries (one message or a batch): the requests a POST
 * sends, and the responses an SSE event answers them with. One parse for both; what is not JSON
 * carries none.
 */
import type { JsonRpcId } from './store/types.js';

/** The ids of the JSON-RPC requests in a POST body (the raw bytes; anything else has none). */
export function requestIds(body: unknown): JsonRpcId[] {
  return Buffer.isBuffer(body) ? messageIds(body.toString('utf8'), 'request') : [];
}

/** The same, from a body already parsed (by era classification): a body is never parsed twice. */
export function parsedRequestIds(parsed: unknown): JsonRpcId[] {
  return idsOf(parsed, 'request');
}

/** The ids of the JSON-RPC responses (result or error) in an SSE event's data. */
export function responseIds(data: string): JsonRpcId[] {
  // Most events are notifications and progress: no parse for what cannot hold an id.
  return data.includes('"id"') ? messageIds(data, 'response') : [];
}

function messageIds(text: string, kind: 'request' | 'response'): JsonRpcId[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return [];
  }
  return idsOf(parsed, kind);
}

/** A request has a method; a response has none, and a result or an error. Notifications have no id. */
function idsOf(parsed: unknown, kind: 'request' | 'response'): JsonRpcId[] {
  const ids: JsonRpcId[] = [];
  for (const m of Array.isArray(parsed) ? parsed : [parsed]) {
    if (!m || typeof m !== 'object') continue;
    const isRequest = 'method' in m;
    if (kind === 'request' ? !isRequest : isRequest || !('result' in m || 'error' in m)) continue;
    const id = (m as { id?: unknown }).id;
    if (typeof id === 'string' || typeof id === 'number') ids.push(id);
  }
  return ids;
}
