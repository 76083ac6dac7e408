/**
 * The cursor codec (CONTRACT §4 E2, §5 checks 2 and 3): the SSE event ids the gateway issues in
 * place of the replicas' own.
 *
 *   1.<incarnation>.<seq>.<session tag>.<mac>
 *
 * - `1`: format version.
 * - incarnation: 16 base64url characters (12 random bytes, see newIncarnationId).
 * - seq: the position in the incarnation, a non-negative safe integer in canonical lowercase base36.
 * - session tag: HMAC-SHA256(tag key, session id), first 8 bytes, base64url (11 characters). Keyed, so
 *   that it says nothing about the session id to whoever lacks the secret; present, so that a valid
 *   cursor of another session is told apart from a forged one.
 * - mac: HMAC-SHA256(mac key, everything before the last dot), first 16 bytes, base64url (22).
 *
 * At most 65 characters, all in `A-Z a-z 0-9 . _ -`. The cursor carries no replica event id or
 * address; the store maps it to those. The encoding is canonical: decode accepts exactly the string
 * that encode produces for its fields and session, so a replayed event's cursor (E3) is equal as a
 * string to the one it carried first.
 */

import { createHmac, createSecretKey, hkdfSync, randomBytes, timingSafeEqual, type KeyObject } from 'node:crypto';
import { GatewayError } from './errors.js';

export interface CursorFields {
  incarnation: string;
  seq: number;
}

/** Why a value is not a cursor of this fleet: a stable code, not prose (the value is never echoed). */
export type ForeignWhy =
  | 'not_string'
  | 'too_long'
  | 'bad_byte'
  | 'bad_parts'
  | 'bad_version'
  | 'bad_incarnation'
  | 'bad_seq'
  | 'bad_tag'
  | 'bad_mac';

export type DecodeResult =
  | { kind: 'foreign'; why: ForeignWhy }
  | { kind: 'session_mismatch'; fields: CursorFields }
  | { kind: 'ok'; fields: CursorFields };

/** CONTRACT E2. */
export const CURSOR_MAX_LENGTH = 128;
/** CONTRACT E2: every cursor matches this (the codec itself never emits `~`). */
export const CURSOR_PATTERN = /^[A-Za-z0-9._~-]{1,128}$/;
/** HMAC-SHA256 keys shorter than the hash output weaken it; 32 bytes is the floor for the secret. */
export const MIN_SECRET_BYTES = 32;

const VERSION = '1';
const INCARNATION_BYTES = 12;
const INCARNATION_PATTERN = /^[A-Za-z0-9_-]{16}$/;
// Canonical base36: lowercase, no leading zero; 11 digits cover Number.MAX_SAFE_INTEGER (2gosa7pa2gv).
const SEQ_PATTERN = /^(?:0|[1-9a-z][0-9a-z]{0,10})$/;
const TAG_BYTES = 8;
const TAG_PATTERN = /^[A-Za-z0-9_-]{11}$/;
const MAC_BYTES = 16;
const MAC_LENGTH = 22;
const MAC_PATTERN = /^[A-Za-z0-9_-]{22}$/;
const PARTS = 5;
// Separate subkeys, so that a session tag can never stand in for a MAC or the reverse.
const HKDF_SALT = 'mcp-resume-gateway/cursor';
const TAG_INFO = 'v1 session-tag';
const MAC_INFO = 'v1 mac';

/** A fresh incarnation id: 12 random bytes, 16 characters of base64url. */
export function newIncarnationId(): string {
  return randomBytes(INCARNATION_BYTES).toString('base64url');
}

export class CursorCodec {
  readonly #tagKey: KeyObject;
  readonly #macKey: KeyObject;

  /** `secret`: at least 32 bytes (a string counts its UTF-8 bytes). Throws GW_CURSOR_SECRET_INVALID. */
  constructor(secret: string | Uint8Array) {
    let ikm: Buffer;
    if (typeof secret === 'string') ikm = Buffer.from(secret, 'utf8');
    else if (secret instanceof Uint8Array) ikm = Buffer.from(secret);
    else throw new GatewayError('GW_CURSOR_SECRET_INVALID', 'the cursor secret must be a string or a Buffer');
    if (ikm.length < MIN_SECRET_BYTES) {
      throw new GatewayError(
        'GW_CURSOR_SECRET_INVALID',
        `the cursor secret must be at least ${MIN_SECRET_BYTES} bytes, got ${ikm.length}`,
      );
    }
    const derive = (info: string): KeyObject =>
      createSecretKey(Buffer.from(hkdfSync('sha256', ikm, HKDF_SALT, info, 32)));
    this.#tagKey = derive(TAG_INFO);
    this.#macKey = derive(MAC_INFO);
    ikm.fill(0);
  }

  /** The cursor for `fields` in `sessionId`. Throws RangeError on fields that no cursor can carry. */
  encode(sessionId: string, fields: CursorFields): string {
    const { incarnation, seq } = fields;
    if (typeof incarnation !== 'string' || !INCARNATION_PATTERN.test(incarnation)) {
      throw new RangeError('cursor incarnation must be 16 characters of base64url');
    }
    if (!Number.isSafeInteger(seq) || seq < 0) {
      throw new RangeError(`cursor seq must be a non-negative safe integer, got ${String(seq)}`);
    }
    const signed = `${VERSION}.${incarnation}.${seq.toString(36)}.${this.#tag(sessionId)}`;
    const cursor = `${signed}.${this.#mac(signed)}`;
    if (cursor.length > CURSOR_MAX_LENGTH) throw new RangeError('cursor longer than 128 characters');
    return cursor;
  }

  /**
   * What `value` (a `Last-Event-ID`) is, for a request of `sessionId`. Checks shape, then MAC, then
   * session (CONTRACT §5: foreign_cursor before session_mismatch). Never throws; at most two HMACs,
   * and only over a value of at most 128 characters that has the shape of a cursor.
   */
  decode(value: string, sessionId: string): DecodeResult {
    if (typeof value !== 'string') return foreign('not_string');
    if (value.length > CURSOR_MAX_LENGTH) return foreign('too_long');
    for (let i = 0; i < value.length; i++) {
      if (!isCursorCodeUnit(value.charCodeAt(i))) return foreign('bad_byte');
    }
    const parts = value.split('.');
    if (parts.length !== PARTS) return foreign('bad_parts');
    const [version, incarnation, seqText, tag, mac] = parts as [string, string, string, string, string];
    if (version !== VERSION) return foreign('bad_version');
    if (!INCARNATION_PATTERN.test(incarnation)) return foreign('bad_incarnation');
    if (!SEQ_PATTERN.test(seqText)) return foreign('bad_seq');
    const seq = parseInt(seqText, 36);
    if (!Number.isSafeInteger(seq)) return foreign('bad_seq');
    if (!TAG_PATTERN.test(tag)) return foreign('bad_tag');
    if (!MAC_PATTERN.test(mac)) return foreign('bad_mac');

    // Compare the base64url texts, not decoded bytes: Node's decoder ignores the spare low bits of the
    // last character, and a second spelling of the same MAC would break canonicity.
    const signed = value.slice(0, value.length - MAC_LENGTH - 1);
    if (!equalAscii(mac, this.#mac(signed))) return foreign('bad_mac');
    const fields = { incarnation, seq };
    if (typeof sessionId !== 'string' || !equalAscii(tag, this.#tag(sessionId))) {
      return { kind: 'session_mismatch', fields };
    }
    return { kind: 'ok', fields };
  }

  // UTF-16 code units rather than UTF-8: UTF-8 maps every lone surrogate to U+FFFD, so two distinct
  // session ids could share a tag.
  #tag(sessionId: string): string {
    return createHmac('sha256', this.#tagKey)
      .update(Buffer.from(sessionId, 'utf16le'))
      .digest()
      .subarray(0, TAG_BYTES)
      .toString('base64url');
  }

  #mac(signed: string): string {
    return createHmac('sha256', this.#macKey).update(signed, 'latin1').digest().subarray(0, MAC_BYTES).toString('base64url');
  }
}

function foreign(why: ForeignWhy): DecodeResult {
  return { kind: 'foreign', why };
}

/** `A-Z a-z 0-9 . _ ~ -` (CONTRACT E2). */
function isCursorCodeUnit(c: number): boolean {
  return (
    (c >= 0x41 && c <= 0x5a) || // A-Z
    (c >= 0x61 && c <= 0x7a) || // a-z
    (c >= 0x30 && c <= 0x39) || // 0-9
    c === 0x2e || // .
    c === 0x5f || // _
    c === 0x7e || // ~
    c === 0x2d // -
  );
}

/** Constant-time equality of two ASCII strings, which callers pass with equal lengths. */
function equalAscii(a: string, b: string): boolean {
  const x = Buffer.from(a, 'latin1');
  const y = Buffer.from(b, 'latin1');
  return x.length === y.length && timingSafeEqual(x, y);
}
