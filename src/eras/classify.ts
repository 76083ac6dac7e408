/**
 * Which protocol era a request belongs to (CONTRACT.md §9), decided from the body as the SDK v2
 * server decides it (`classifyInboundRequest`): a JSON-RPC message whose `params._meta` holds
 * `io.modelcontextprotocol/protocolVersion` is modern (2026-07-28), everything else is legacy and
 * keeps the rules of §3 to §8. For a modern request the standard headers that mirror the body
 * are checked against it (M1): the specification asks every intermediary that reads the body to
 * refuse a disagreement, so that no hop routes on a header the server would not act on.
 *
 * Pure: no I/O, and the body is parsed at most once. A body that can not carry the claim (no
 * `protocolVersion` in its bytes) is not parsed at all, so legacy traffic pays one byte search.
 */
import { headerValue } from '../headers.js';

export const PROTOCOL_VERSION_META_KEY = 'io.modelcontextprotocol/protocolVersion';
/** The first modern revision; revisions are dates, so later ones compare greater. */
const FIRST_MODERN_VERSION = '2026-07-28';

/**
 * The claim's key without its prefix: a JSON encoder may escape the `/` (`\/`), never the
 * letters, so a body without these bytes holds no claim.
 */
const CLAIM_BYTES = Buffer.from('protocolVersion');

/** The body field that `Mcp-Name` mirrors, per method (SEP-2243, and SEP-2663 for tasks). */
const NAME_SOURCE: Readonly<Record<string, string>> = {
  'tools/call': 'name',
  'prompts/get': 'name',
  'resources/read': 'uri',
  'tasks/get': 'taskId',
  'tasks/update': 'taskId',
  'tasks/cancel': 'taskId',
};

/**
 * The methods of the modern era, for metric labels: any other name a client sends is counted as
 * `other`, so that a client can not grow the label set.
 */
const KNOWN_METHODS = new Set([
  'completion/complete',
  'logging/setLevel',
  'notifications/cancelled',
  'notifications/progress',
  'ping',
  'prompts/get',
  'prompts/list',
  'resources/list',
  'resources/read',
  'resources/templates/list',
  'server/discover',
  'subscriptions/listen',
  'tasks/cancel',
  'tasks/get',
  'tasks/list',
  'tasks/result',
  'tasks/update',
  'tools/call',
  'tools/list',
]);

/** `method` as a metric label value, from a bounded set. */
export function methodLabel(method: string): string {
  return KNOWN_METHODS.has(method) ? method : 'other';
}

/** What an answer shows in place of an Mcp-Name that carries a task id. */
const TASK_ID_WITHHELD = '(a task id, withheld)';

const BASE64_PREFIX = '=?base64?';
const BASE64_SUFFIX = '?=';
const BASE64_CANONICAL = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

export interface ModernMessage {
  method: string;
  id: string | number | null;
  params: Record<string, unknown>;
}

export type Era =
  /** `parsed` is the body when classifying had to parse it, for whoever reads it next. */
  | { kind: 'legacy'; parsed?: unknown }
  | { kind: 'modern'; message: ModernMessage }
  /** A modern request whose `header` disagrees with its body, and why (GW_HEADER_MISMATCH). */
  | { kind: 'mismatch'; message: ModernMessage; header: string; why: string };

type Headers = Record<string, string | string[] | undefined>;

export function classify(httpMethod: string, headers: Headers, body: unknown): Era {
  if (httpMethod !== 'POST' || !Buffer.isBuffer(body) || body.indexOf(CLAIM_BYTES) === -1) return { kind: 'legacy' };
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    // The replica answers a body that is not JSON as it sees fit.
    return { kind: 'legacy' };
  }
  const message = modernMessage(parsed);
  if (message === undefined) return { kind: 'legacy', parsed };
  const disagreement = mismatch(headers, message);
  if (disagreement === undefined) return { kind: 'modern', message };
  return { kind: 'mismatch', message, ...disagreement };
}

/**
 * The message when it makes the modern claim. Batches are legacy (the modern era has none; the
 * replica refuses one that mixes eras), and so is an `initialize` unless its claim names a modern
 * revision, as the SDK decides.
 */
function modernMessage(parsed: unknown): ModernMessage | undefined {
  if (!isObject(parsed) || typeof parsed['method'] !== 'string') return undefined;
  const params = parsed['params'];
  if (!isObject(params)) return undefined;
  const meta = params['_meta'];
  if (!isObject(meta) || !(PROTOCOL_VERSION_META_KEY in meta)) return undefined;
  const method = parsed['method'];
  const claimed = meta[PROTOCOL_VERSION_META_KEY];
  if (method === 'initialize' && !(typeof claimed === 'string' && claimed >= FIRST_MODERN_VERSION)) return undefined;
  const id = parsed['id'];
  return { method, id: typeof id === 'string' || typeof id === 'number' ? id : null, params };
}

/** The first standard header that disagrees with the body; a header that is absent agrees. */
function mismatch(headers: Headers, message: ModernMessage): { header: string; why: string } | undefined {
  const version = trimmed(headers, 'mcp-protocol-version');
  const claimed = (message.params['_meta'] as Record<string, unknown>)[PROTOCOL_VERSION_META_KEY];
  if (version !== undefined && typeof claimed === 'string' && version !== claimed) {
    return { header: version, why: `the body envelope names protocol version ${claimed} but the MCP-Protocol-Version header names ${version}` };
  }
  const method = trimmed(headers, 'mcp-method');
  if (method !== undefined && method !== message.method) {
    return { header: method, why: `the body names method ${message.method} but the Mcp-Method header names ${method}` };
  }
  const field = Object.hasOwn(NAME_SOURCE, message.method) ? NAME_SOURCE[message.method] : undefined;
  const name = trimmed(headers, 'mcp-name');
  if (field === undefined || name === undefined) return undefined;
  const decoded = decodeName(name);
  if (decoded === undefined) return { header: field === 'taskId' ? TASK_ID_WITHHELD : name, why: 'the Mcp-Name header carries an invalid Base64 sentinel value' };
  const value = message.params[field];
  if (typeof value === 'string' && value !== decoded) {
    // A task id is a bearer secret (§9 M2): the answer does not echo either value.
    if (field === 'taskId') return { header: TASK_ID_WITHHELD, why: 'the body carries params.taskId but the Mcp-Name header names another task' };
    return { header: name, why: `the body carries params.${field}="${value}" but the Mcp-Name header names "${decoded}"` };
  }
  return undefined;
}

/** A header value without the optional whitespace around it (RFC 9110 §5.5). */
function trimmed(headers: Headers, name: string): string | undefined {
  const value = headerValue(headers, name);
  return value === undefined ? undefined : value.replace(/^[ \t]+|[ \t]+$/g, '');
}

/** `Mcp-Name` as sent, or decoded from its `=?base64?…?=` form; undefined when that is broken. */
export function decodeName(value: string): string | undefined {
  if (!(value.startsWith(BASE64_PREFIX) && value.endsWith(BASE64_SUFFIX))) return value;
  const b64 = value.slice(BASE64_PREFIX.length, value.length - BASE64_SUFFIX.length);
  if (!BASE64_CANONICAL.test(b64)) return undefined;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(Buffer.from(b64, 'base64'));
  } catch {
    return undefined;
  }
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}
