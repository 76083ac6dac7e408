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
 * - mac: AES-256(stream key, seq as a 16-byte big-endian block), base64url (22 characters), where
 *   stream key = HMAC-SHA256(mac key, `1.<incarnation>.<session tag>`). The stream key binds the
 *   version, incarnation and tag; AES under it is a pseudorandom function of the one block that
 *   holds seq, so the mac authenticates every field. A stream computes its key once and then
 *   numbers its events in batches, one AES call per batch (see CursorIssuer): an HMAC per event
 *   cost more than everything else the gateway does to an event together.
 *
 * The signing key is the first of a list (cursor.secret, then cursor.previousSecrets), and every key
 * of the list verifies: a rotation (docs/security.md) turns no cursor in flight foreign.
 *
 * At most 65 characters, all in `A-Z a-z 0-9 . _ -`. The cursor carries no replica event id or
 * address; the store maps it to those. The encoding is canonical: decode accepts exactly the string
 * that encode produces for its fields and session, so a replayed event's cursor (E3) is equal as a
 * string to the one it carried first.
 */

import { createCipheriv, createHmac, createSecretKey, hkdfSync, randomBytes, timingSafeEqual, type Cipher, type KeyObject } from 'node:crypto';
import { GatewayError } from '../errors.js';

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

/** `previous`: the index among the previous keys of the one that verified the cursor; absent for the signing key. */
export type DecodeResult =
  | { kind: 'foreign'; why: ForeignWhy }
  | { kind: 'session_mismatch'; fields: CursorFields; previous?: number }
  | { kind: 'ok'; fields: CursorFields; previous?: number };

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
// Each mac is laid out in 18 bytes (two zero bytes after it) before one base64url pass over the
// batch: 18 bytes are 24 characters, of which the first 22 are exactly the mac's own encoding.
const MAC_STRIDE = 18;
const MAC_STRIDE_CHARS = 24;
const CIPHER = 'aes-256-ecb';
// Session tags (and log fingerprints) kept, at most, each; a cache is emptied when full (cheaper than LRU, and a miss costs
// one HMAC). Session ids longer than this are not kept at all.
const TAG_CACHE_SIZE = 10_000;
const TAG_CACHE_MAX_ID = 256;
const MAC_PATTERN = /^[A-Za-z0-9_-]{22}$/;
const PARTS = 5;
// Separate subkeys, so that a session tag can never stand in for a MAC or the reverse.
const HKDF_SALT = 'mcp-resume-gateway/cursor';
const TAG_INFO = 'v1 session-tag';
const MAC_INFO = 'v1 mac';
const FINGERPRINT_INFO = 'v1 key fingerprint';
const FINGERPRINT_BYTES = 8;
const PRINCIPAL_INFO = 'v1 principal';
/** 128 bits: no two credentials of a fleet share a principal by chance. */
const PRINCIPAL_BYTES = 16;
const SESSION_INFO = 'v1 session fingerprint';
/** 48 bits, 12 hex characters: short enough to read and search, and sessions alive at once do not share one by chance. */
const SESSION_FINGERPRINT_BYTES = 6;

// Random bytes are drawn for many ids at once: one call per stream cost as much as the rest of
// opening it.
const ID_POOL_IDS = 256;
let idPool = Buffer.alloc(0);
let idPoolAt = 0;

/** A fresh incarnation id: 12 random bytes, 16 characters of base64url. */
export function newIncarnationId(): string {
  if (idPoolAt >= idPool.length) {
    idPool = randomBytes(INCARNATION_BYTES * ID_POOL_IDS);
    idPoolAt = 0;
  }
  const id = idPool.toString('base64url', idPoolAt, idPoolAt + INCARNATION_BYTES);
  idPoolAt += INCARNATION_BYTES;
  return id;
}

/** One cursor secret's subkeys, each derived apart (HKDF) so that none can stand in for another. */
class CursorKey {
  readonly #tagKey: KeyObject;
  readonly #macKey: KeyObject;
  readonly #principalKey: KeyObject;
  readonly #sessionKey: KeyObject;
  readonly #tags = new Map<string, string>();
  readonly #sessions = new Map<string, string>();
  readonly fingerprint: string;

  constructor(ikm: Buffer) {
    const derive = (info: string): KeyObject =>
      createSecretKey(Buffer.from(hkdfSync('sha256', ikm, HKDF_SALT, info, 32)));
    this.#tagKey = derive(TAG_INFO);
    this.#macKey = derive(MAC_INFO);
    this.#principalKey = derive(PRINCIPAL_INFO);
    this.#sessionKey = derive(SESSION_INFO);
    this.fingerprint = createHmac('sha256', derive(FINGERPRINT_INFO)).update(FINGERPRINT_INFO).digest().subarray(0, FINGERPRINT_BYTES).toString('base64url');
  }

  principal(material: string): string {
    return createHmac('sha256', this.#principalKey).update(material).digest().subarray(0, PRINCIPAL_BYTES).toString('base64url');
  }

  // UTF-16 code units rather than UTF-8: UTF-8 maps every lone surrogate to U+FFFD, so two distinct
  // session ids could share a tag. Remembered for the sessions seen last: every stream of a
  // session needs its tag, and a session has many short POST streams.
  tag(sessionId: string): string {
    return remembered(this.#tags, sessionId, () => createHmac('sha256', this.#tagKey).update(Buffer.from(sessionId, 'utf16le')).digest().subarray(0, TAG_BYTES).toString('base64url'));
  }

  /** A subkey of its own: a logged fingerprint says nothing of the session's cursor tag, nor the reverse. */
  sessionFingerprint(sessionId: string): string {
    return remembered(this.#sessions, sessionId, () => createHmac('sha256', this.#sessionKey).update(Buffer.from(sessionId, 'utf16le')).digest().subarray(0, SESSION_FINGERPRINT_BYTES).toString('hex'));
  }

  streamKey(incarnation: string, tag: string): Buffer {
    return createHmac('sha256', this.#macKey).update(`${VERSION}.${incarnation}.${tag}`, 'latin1').digest();
  }
}

/** The value of `sessionId` in `cache`, computed once; the cache is emptied when full, and very long ids are not kept. */
function remembered(cache: Map<string, string>, sessionId: string, compute: () => string): string {
  let value = cache.get(sessionId);
  if (value === undefined) {
    value = compute();
    if (typeof sessionId === 'string' && sessionId.length <= TAG_CACHE_MAX_ID) {
      if (cache.size >= TAG_CACHE_SIZE) cache.clear();
      cache.set(sessionId, value);
    }
  }
  return value;
}

/**
 * The fleet's cursor keys: the first signs every cursor issued, and each one verifies (a rotation,
 * see docs/security.md). setKeys changes them in place, so that every issuer made before follows
 * at its next batch: a stream open across a rotation stops issuing cursors of the old signing key.
 */
export class CursorCodec {
  #keys: readonly CursorKey[];
  #generation = 0;

  /**
   * `secret` signs and verifies, each of `previous` only verifies. Each at least 32 bytes (a
   * string counts its UTF-8 bytes), all different. Throws GW_CURSOR_SECRET_INVALID.
   */
  constructor(secret: string | Uint8Array, previous: readonly (string | Uint8Array)[] = []) {
    this.#keys = cursorKeys(secret, previous);
  }

  /** Replaces the keys (as the constructor takes them); nothing changes when they are invalid (throws). */
  setKeys(secret: string | Uint8Array, previous: readonly (string | Uint8Array)[] = []): void {
    this.#keys = cursorKeys(secret, previous);
    this.#generation++;
  }

  /**
   * Names the signing key without revealing it (an HMAC of a constant under a subkey of its own):
   * a gateway that verifies this fingerprint accepts this one's cursors.
   */
  get fingerprint(): string {
    return this.#keys[0]!.fingerprint;
  }

  /** The fingerprint of every key that verifies: the signing key's first, then the previous keys' in order. */
  get fingerprints(): readonly string[] {
    return this.#keys.map((key) => key.fingerprint);
  }

  /** @internal Counts setKeys: an issuer whose keys are older takes the new ones. */
  get generation(): number {
    return this.#generation;
  }

  /**
   * A session's principal (CONTRACT.md §8 J6): a keyed fingerprint of the client's credential
   * material under the signing key (a subkey of its own), so that neither the store nor a log
   * holds anything from which the credential could be guessed offline.
   */
  principal(material: string): string {
    return this.#keys[0]!.principal(material);
  }

  /**
   * How a session appears in logs and spans: an HMAC of its id under a subkey of the signing key,
   * 12 hex characters. The same on every instance that signs with the same key; nothing in it
   * gives the id away, and without the key it cannot be computed from the id.
   */
  sessionFingerprint(sessionId: string): string {
    return this.#keys[0]!.sessionFingerprint(sessionId);
  }

  /** The session's fingerprint under every key, the signing key's first: what instances signing with another key of the list print. */
  sessionFingerprints(sessionId: string): readonly string[] {
    return this.#keys.map((key) => key.sessionFingerprint(sessionId));
  }

  /** The principals of `material` under the previous keys, in order: a session bound before a rotation holds one of them. */
  previousPrincipals(material: string): string[] {
    return this.#keys.slice(1).map((key) => key.principal(material));
  }

  /** The cursor for `fields` in `sessionId`. Throws RangeError on fields that no cursor can carry. */
  encode(sessionId: string, fields: CursorFields): string {
    return this.issuer(sessionId, fields.incarnation).encode([fields.seq])[0]!;
  }

  /** Numbers the events of one incarnation in one session. Throws RangeError on a malformed incarnation. */
  issuer(sessionId: string, incarnation: string): CursorIssuer {
    if (typeof incarnation !== 'string' || !INCARNATION_PATTERN.test(incarnation)) {
      throw new RangeError('cursor incarnation must be 16 characters of base64url');
    }
    return new CursorIssuer(this, sessionId, incarnation);
  }

  /** @internal An issuer's framing and cipher under the signing key. */
  signing(sessionId: string, incarnation: string): { head: string; middle: string; cipher: Cipher } {
    const key = this.#keys[0]!;
    const tag = key.tag(sessionId);
    return { head: `${VERSION}.${incarnation}.`, middle: `.${tag}.`, cipher: macCipher(key.streamKey(incarnation, tag)) };
  }

  /**
   * What `value` (a `Last-Event-ID`) is, for a request of `sessionId`. Checks shape, then MAC, then
   * session (CONTRACT §5: foreign_cursor before session_mismatch), under the signing key first and
   * then each previous key (`previous`: the index of the one that verified it). Never throws; per
   * key at most two HMACs and one AES block, and only for a value of at most 128 characters that
   * has the shape of a cursor.
   */
  decode(value: string, sessionId: string): DecodeResult {
    const parsed = parseCursor(value);
    if (parsed.kind === 'foreign') return parsed;
    const { incarnation, seq, tag, mac } = parsed.parts;
    const keys = this.#keys;
    for (let k = 0; k < keys.length; k++) {
      const key = keys[k]!;
      // Compare the base64url texts, not decoded bytes: Node's decoder ignores the spare low bits of
      // the last character, and a second spelling of the same MAC would break canonicity.
      if (!equalAscii(mac, macText(macCipher(key.streamKey(incarnation, tag)), [seq]).slice(0, MAC_LENGTH))) continue;
      const fields = { incarnation, seq };
      const previous = k === 0 ? {} : { previous: k - 1 };
      if (typeof sessionId !== 'string' || !equalAscii(tag, key.tag(sessionId))) {
        return { kind: 'session_mismatch', fields, ...previous };
      }
      return { kind: 'ok', fields, ...previous };
    }
    return foreign('bad_mac');
  }
}

/** The keys of `secret` and `previous`, checked. Throws GW_CURSOR_SECRET_INVALID. */
function cursorKeys(secret: string | Uint8Array, previous: readonly (string | Uint8Array)[]): CursorKey[] {
  if (!Array.isArray(previous)) throw new GatewayError('GW_CURSOR_SECRET_INVALID', 'the previous cursor secrets must be a list');
  const material = [secret, ...previous].map((value, i) => keyMaterial(value, i === 0 ? 'the cursor secret' : `previous cursor secret ${i}`));
  try {
    material.forEach((ikm, i) => {
      const first = material.findIndex((other) => other.equals(ikm));
      if (first < i) {
        throw new GatewayError('GW_CURSOR_SECRET_INVALID', `previous cursor secret ${i} is the same as ${first === 0 ? 'the cursor secret' : `previous cursor secret ${first}`}`);
      }
    });
    return material.map((ikm) => new CursorKey(ikm));
  } finally {
    for (const ikm of material) ikm.fill(0);
  }
}

function keyMaterial(secret: string | Uint8Array, name: string): Buffer {
  let ikm: Buffer;
  if (typeof secret === 'string') ikm = Buffer.from(secret, 'utf8');
  else if (secret instanceof Uint8Array) ikm = Buffer.from(secret);
  else throw new GatewayError('GW_CURSOR_SECRET_INVALID', `${name} must be a string or a Buffer`);
  if (ikm.length < MIN_SECRET_BYTES) {
    throw new GatewayError('GW_CURSOR_SECRET_INVALID', `${name} must be at least ${MIN_SECRET_BYTES} bytes, got ${ikm.length}`);
  }
  return ikm;
}

/**
 * AES under a stream key, whole blocks without padding: each block is enciphered alone, at once,
 * so one cipher serves the whole stream and is never finalised. The key is wiped once it is in.
 */
function macCipher(streamKey: Buffer): Cipher {
  const cipher = createCipheriv(CIPHER, streamKey, null).setAutoPadding(false);
  streamKey.fill(0);
  return cipher;
}

/** The macs of `seqs` in one base64url text, MAC_STRIDE_CHARS characters each, of which the first MAC_LENGTH are the mac. */
function macText(cipher: Cipher, seqs: readonly number[]): string {
  const n = seqs.length;
  const blocks = Buffer.alloc(n * MAC_BYTES);
  for (let i = 0; i < n; i++) {
    const seq = seqs[i]!;
    if (!Number.isSafeInteger(seq) || seq < 0) {
      throw new RangeError(`cursor seq must be a non-negative safe integer, got ${String(seq)}`);
    }
    blocks.writeUInt32BE(Math.floor(seq / 0x1_0000_0000), i * MAC_BYTES + 8);
    blocks.writeUInt32BE(seq >>> 0, i * MAC_BYTES + 12);
  }
  const enciphered = cipher.update(blocks);
  const spaced = Buffer.alloc(n * MAC_STRIDE);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < MAC_BYTES; j++) spaced[i * MAC_STRIDE + j] = enciphered[i * MAC_BYTES + j]!;
  }
  return spaced.toString('base64url');
}

/**
 * The cursors of one incarnation in one session: the session tag and the stream key are computed
 * once per signing key, and a batch of positions costs one AES call and one base64url pass.
 */
export class CursorIssuer {
  readonly #codec: CursorCodec;
  readonly #sessionId: string;
  readonly #incarnation: string;
  #generation: number;
  #head: string;
  #middle: string;
  #cipher: Cipher;

  /** @internal Made by CursorCodec.issuer. */
  constructor(codec: CursorCodec, sessionId: string, incarnation: string) {
    this.#codec = codec;
    this.#sessionId = sessionId;
    this.#incarnation = incarnation;
    this.#generation = codec.generation;
    ({ head: this.#head, middle: this.#middle, cipher: this.#cipher } = codec.signing(sessionId, incarnation));
  }

  /** The cursors of positions `seqs`, in order. Throws RangeError on a seq that no cursor can carry. */
  encode(seqs: readonly number[]): string[] {
    const text = this.#macText(seqs);
    const out = new Array<string>(seqs.length);
    for (let i = 0; i < seqs.length; i++) {
      out[i] = this.#head + seqs[i]!.toString(36) + this.#middle + text.slice(i * MAC_STRIDE_CHARS, i * MAC_STRIDE_CHARS + MAC_LENGTH);
    }
    return out;
  }

  /**
   * The cursors of positions `seqs` as bytes, each between `before` and `after` (a writer's framing,
   * such as an SSE id line): the same characters as encode's, without a string for each cursor.
   * Throws RangeError on a seq that no cursor can carry.
   */
  lines(seqs: readonly number[], before: string, after: string): CursorLines {
    const macs = Buffer.from(this.#macText(seqs), 'latin1');
    return new CursorLines(Buffer.from(before + this.#head, 'latin1'), Buffer.from(this.#middle, 'latin1'), Buffer.from(after, 'latin1'), seqs, new Uint8Array(macs.buffer, macs.byteOffset, macs.length));
  }

  /** The macs under the codec's signing key as it is now (a rotation since the last batch is taken up). */
  #macText(seqs: readonly number[]): string {
    if (this.#generation !== this.#codec.generation) {
      this.#generation = this.#codec.generation;
      ({ head: this.#head, middle: this.#middle, cipher: this.#cipher } = this.#codec.signing(this.#sessionId, this.#incarnation));
    }
    return macText(this.#cipher, seqs);
  }
}

/** A batch of cursors as bytes (CursorIssuer.lines): each one's length, and each one written where it goes. */
export class CursorLines {
  readonly #head: Buffer;
  readonly #middle: Buffer;
  readonly #after: Buffer;
  readonly #seqs: readonly number[];
  /** A plain Uint8Array: read byte by byte, it is quicker than a Buffer. */
  readonly #macs: Uint8Array;

  /** @internal Made by CursorIssuer.lines. */
  constructor(head: Buffer, middle: Buffer, after: Buffer, seqs: readonly number[], macs: Uint8Array) {
    this.#head = head;
    this.#middle = middle;
    this.#after = after;
    this.#seqs = seqs;
    this.#macs = macs;
  }

  /** The bytes of the i-th line. */
  length(i: number): number {
    return this.#head.length + base36Length(this.#seqs[i]!) + this.#middle.length + MAC_LENGTH + this.#after.length;
  }

  /** Writes the i-th line into `out` at `at`; returns its length. */
  write(i: number, out: Buffer, at: number): number {
    let p = put(this.#head, out, at);
    const seq = this.#seqs[i]!;
    const digits = base36Length(seq);
    // Canonical base36, as Number.prototype.toString(36) writes it.
    for (let k = digits - 1, v = seq; k >= 0; k--) {
      const q = quotient36(v);
      out[p + k] = BASE36[v - q * 36]!;
      v = q;
    }
    p = put(this.#middle, out, p + digits);
    const macs = this.#macs;
    const from = i * MAC_STRIDE_CHARS;
    for (let j = 0; j < MAC_LENGTH; j++) out[p + j] = macs[from + j]!;
    p = put(this.#after, out, p + MAC_LENGTH);
    return p - at;
  }
}

const BASE36 = new Uint8Array(Buffer.from('0123456789abcdefghijklmnopqrstuvwxyz', 'latin1'));
/** 36^1 ... 36^10: a safe integer has at most 11 base36 digits. */
const POWERS36 = Array.from({ length: 10 }, (_, i) => 36 ** (i + 1));

function base36Length(seq: number): number {
  let digits = 1;
  while (digits <= POWERS36.length && seq >= POWERS36[digits - 1]!) digits++;
  return digits;
}

/**
 * The integer quotient of a safe integer by 36, without a floating-point remainder (slow): v / 36
 * is v's quotient plus at most 35/36, and for v below 2^53 its rounding error is far below the
 * 1/36 that would carry it to the next integer.
 */
function quotient36(v: number): number {
  return Math.floor(v / 36);
}

/** Copies `bytes` whole into `out` at `at` (set does not make a view, as copy of a range does); returns where it ended. */
function put(bytes: Buffer, out: Buffer, at: number): number {
  out.set(bytes, at);
  return at + bytes.length;
}

/** A value with the shape of a cursor, its fields read but not authenticated. */
export interface CursorParts extends CursorFields {
  readonly tag: string;
  readonly mac: string;
}

/**
 * The shape checks of decode, without the key: the fields of a value that looks like a cursor,
 * which only decode can tell authentic (explain shows them for a cursor that is not).
 */
export function parseCursor(value: string): { kind: 'parsed'; parts: CursorParts } | { kind: 'foreign'; why: ForeignWhy } {
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
  return { kind: 'parsed', parts: { incarnation, seq, tag, mac } };
}

function foreign(why: ForeignWhy): { kind: 'foreign'; why: ForeignWhy } {
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
