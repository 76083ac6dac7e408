/**
 * Writes SSE events and comments in one canonical form: LF line endings, `name: value` lines
 * (the space after the colon is always written, so a value that itself starts with a space keeps
 * it: WHATWG HTML §9.2.5 removes exactly one), fields in the order event, id, retry, data (the
 * order the MCP SDK's own server writes), then a blank line.
 *
 * Whatever the parser reports serializes to bytes that parse back to the same item, so the
 * rewriter can re-emit upstream events without keeping their original bytes.
 */

export type SseFieldName = 'id' | 'event' | 'data' | 'retry' | 'comment';

/** A value that SSE cannot carry: writing it would change the stream's meaning for the client. */
export class SseSerializeError extends Error {
  readonly code = 'SSE_FIELD_INVALID';

  constructor(
    readonly field: SseFieldName,
    message: string,
  ) {
    super(message);
    this.name = 'SseSerializeError';
  }
}

export interface SseEventFields {
  id?: string | undefined;
  event?: string | undefined;
  data?: string | undefined;
  retry?: number | undefined;
}

const LINE_BREAK = /[\r\n]/;
const ID_FORBIDDEN = /[\r\n\0]/;

/**
 * An event with no field at all serializes to a lone blank line, which clients ignore.
 * @throws SseSerializeError for an id with CR, LF or NUL (§9.2.6: clients ignore an id with NUL),
 *   an event name or comment with CR or LF, data with CR (only LF separates data lines), or a
 *   retry that is not a non-negative safe integer.
 */
export function serializeEvent(e: SseEventFields): Buffer {
  return Buffer.from(eventText(e), 'utf8');
}

/** serializeEvent as text, for writers that join many events before encoding them once; `id` replaces the event's own. */
export function eventText(e: SseEventFields, id: string | undefined = e.id): string {
  if (id !== undefined && ID_FORBIDDEN.test(id)) throw new SseSerializeError('id', 'SSE id contains CR, LF or NUL');
  return fieldsText(e, id);
}

/**
 * eventText for an id that is a cursor of the codec: its alphabet (CONTRACT E2) holds no CR, LF or
 * NUL, so it is not checked again for every event.
 */
export function eventTextWithCursor(e: SseEventFields, cursor: string): string {
  return fieldsText(e, cursor);
}

/**
 * A journaled event (its eventText without an id, J1) with `cursor` as its id: the same text as
 * eventTextWithCursor wrote when the event first left, so a replay from the journal carries the
 * same bytes and cursor (E3). The id line follows the event line when there is one.
 */
export function journaledWithCursor(payload: string, cursor: string): string {
  if (!payload.startsWith('event: ')) return `id: ${cursor}\n${payload}`;
  const afterEvent = payload.indexOf('\n') + 1;
  return `${payload.slice(0, afterEvent)}id: ${cursor}\n${payload.slice(afterEvent)}`;
}

/** The data of a journaled event (J1: its eventText without an id), as the event carried it. */
export function journaledData(payload: string): string {
  return payload
    .split('\n')
    .filter((line) => line.startsWith('data: '))
    .map((line) => line.slice('data: '.length))
    .join('\n');
}

function fieldsText(e: SseEventFields, id: string | undefined): string {
  let out = '';
  if (e.event !== undefined) {
    if (LINE_BREAK.test(e.event)) throw new SseSerializeError('event', 'SSE event name contains CR or LF');
    out += `event: ${e.event}\n`;
  }
  if (id !== undefined) out += `id: ${id}\n`;
  if (e.retry !== undefined) {
    if (!Number.isSafeInteger(e.retry) || e.retry < 0) {
      throw new SseSerializeError('retry', 'SSE retry must be a non-negative safe integer');
    }
    out += `retry: ${e.retry}\n`;
  }
  if (e.data !== undefined) {
    if (e.data.includes('\r')) throw new SseSerializeError('data', 'SSE data contains CR');
    out += `data: ${e.data.includes('\n') ? e.data.replaceAll('\n', '\ndata: ') : e.data}\n`;
  }
  return `${out}\n`;
}

/** `text` is written right after the colon, as the parser reports it (": ping" ↔ " ping"). */
export function serializeComment(text: string): Buffer {
  return Buffer.from(commentText(text), 'utf8');
}

/** serializeComment as text. */
export function commentText(text: string): string {
  if (LINE_BREAK.test(text)) throw new SseSerializeError('comment', 'SSE comment contains CR or LF');
  return `:${text}\n`;
}
