import assert from 'node:assert/strict';
import { createCipheriv, createHash, createHmac, hkdfSync, randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import fc from 'fast-check';
import {
  CURSOR_MAX_LENGTH,
  CURSOR_PATTERN,
  CursorCodec,
  newIncarnationId,
  parseCursor,
  type CursorFields,
  type DecodeResult,
} from '../../src/cursor/codec.js';
import { GatewayError } from '../../src/errors.js';
import { checkProperties } from '../helpers/property.js';
import { codecProperties } from './codec.properties.js';

const SECRET = 'test-secret-0123456789abcdefghijklmnopqrstuvwxyz';
const codec = new CursorCodec(SECRET);
const SESSION = '3f1c2b9e-7a4d-4e8b-9c1a-0d2e3f4a5b6c';
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~-';

// fast-check shrinks only on a thrown failure, hence node:assert inside the properties.
function check<Ts extends [unknown, ...unknown[]]>(t: Test, property: fc.IProperty<Ts>, numRuns: number): void {
  fc.assert(property, { numRuns });
  t.pass(`${numRuns} runs`);
}

const base64url = (bytes: Uint8Array): string => Buffer.from(bytes).toString('base64url');

const incarnationArb = fc.uint8Array({ minLength: 12, maxLength: 12 }).map(base64url);
const seqArb = fc.oneof(fc.constantFrom(0, 1, 35, 36, Number.MAX_SAFE_INTEGER), fc.nat(), fc.maxSafeNat());
const fieldsArb: fc.Arbitrary<CursorFields> = fc
  .tuple(incarnationArb, seqArb)
  .map(([incarnation, seq]) => ({ incarnation, seq }));
const sessionArb = fc.oneof(
  fc.uuid(),
  fc.string(),
  fc.string({ unit: 'grapheme', maxLength: 64 }),
  fc.string({ unit: 'binary', maxLength: 64 }),
  fc.string({ unit: fc.constantFrom('{', '}', '[', ']', '"', '\\', '.', 'é', '😀', '\0', '\uD800') }),
  fc.string({ minLength: 1024, maxLength: 1024 }),
  fc.string({ unit: 'grapheme', minLength: 1024, maxLength: 1200 }),
);

/** Every single-character alteration of `s` over the alphabet, then every deletion and insertion. */
function* alterations(s: string): Generator<string> {
  for (let i = 0; i < s.length; i++) {
    for (const c of ALPHABET) if (c !== s[i]) yield s.slice(0, i) + c + s.slice(i + 1);
    yield s.slice(0, i) + s.slice(i + 1);
  }
  for (let i = 0; i <= s.length; i++) for (const c of ALPHABET) yield s.slice(0, i) + c + s.slice(i);
}

t.test('newIncarnationId is 16 base64url characters of 12 random bytes, and fresh', async (t) => {
  const ids = new Set<string>();
  for (let i = 0; i < 1000; i++) {
    const id = newIncarnationId();
    assert.match(id, /^[A-Za-z0-9_-]{16}$/);
    assert.equal(Buffer.from(id, 'base64url').length, 12);
    ids.add(id);
  }
  t.equal(ids.size, 1000);
});

t.test('the secret is a string or Buffer of at least 32 bytes, else GW_CURSOR_SECRET_INVALID', async (t) => {
  const invalid: unknown[] = ['', 'x'.repeat(31), Buffer.alloc(31), 'é'.repeat(15), undefined, null, 42, {}, ['x'.repeat(40)]];
  const thrown = (secret: unknown): unknown => {
    try {
      new CursorCodec(secret as string);
    } catch (err) {
      return err;
    }
    return undefined;
  };
  for (const secret of invalid) {
    const err = thrown(secret);
    t.ok(err instanceof GatewayError && err.code === 'GW_CURSOR_SECRET_INVALID', `rejects ${JSON.stringify(secret)}`);
  }
  for (const secret of ['x'.repeat(32), 'é'.repeat(16), Buffer.alloc(32, 1), new Uint8Array(64), randomBytes(32)]) {
    t.equal(thrown(secret), undefined);
  }
  const err = thrown('short-secret-value');
  t.ok(err instanceof Error && !err.message.includes('short-secret-value'), 'the message does not reveal the secret');
});

t.test('the format: 1.<incarnation>.<seq base36>.<11-char tag>.<22-char mac>', async (t) => {
  const cursor = codec.encode(SESSION, { incarnation: 'AAAAAAAAAAAAAAAA', seq: 1295 });
  t.match(cursor, /^1\.AAAAAAAAAAAAAAAA\.zz\.[A-Za-z0-9_-]{11}\.[A-Za-z0-9_-]{22}$/);
  t.equal(codec.encode(SESSION, { incarnation: 'AAAAAAAAAAAAAAAA', seq: 0 }).split('.')[2], '0');
  const longest = codec.encode(SESSION, { incarnation: newIncarnationId(), seq: Number.MAX_SAFE_INTEGER });
  t.equal(longest.split('.')[2], '2gosa7pa2gv');
  t.equal(longest.length, 65, 'the longest cursor is 65 characters');
});

t.test('round trip over sessions and fields, within E2, canonical', async (t) => {
  check(
    t,
    fc.property(sessionArb, fieldsArb, (session, fields) => {
      const cursor = codec.encode(session, fields);
      assert.match(cursor, CURSOR_PATTERN);
      assert.ok(cursor.length <= CURSOR_MAX_LENGTH);
      assert.deepEqual(codec.decode(cursor, session), { kind: 'ok', fields });
      assert.equal(codec.encode(session, fields), cursor, 'deterministic');
    }),
    1000,
  );
});

t.test('the mac is AES-256 of the seq block under HMAC(mac key, "1.<incarnation>.<tag>") (known answer)', async (t) => {
  // Recomputed here from the secret with the primitives themselves, so that the construction the
  // module header describes cannot drift from the code.
  const ikm = Buffer.from(SECRET, 'utf8');
  const subkey = (info: string) => Buffer.from(hkdfSync('sha256', ikm, 'mcp-resume-gateway/cursor', info, 32));
  const tag = createHmac('sha256', subkey('v1 session-tag')).update(Buffer.from(SESSION, 'utf16le')).digest().subarray(0, 8).toString('base64url');
  const incarnation = 'AbCdEfGhIjKlMnOp';
  const streamKey = createHmac('sha256', subkey('v1 mac')).update(`1.${incarnation}.${tag}`, 'latin1').digest();
  for (const seq of [0, 1, 35, 2 ** 32, 2 ** 32 + 1, Number.MAX_SAFE_INTEGER]) {
    const block = Buffer.alloc(16);
    block.writeBigUInt64BE(BigInt(seq), 8);
    const cipher = createCipheriv('aes-256-ecb', streamKey, null).setAutoPadding(false);
    const mac = Buffer.concat([cipher.update(block), cipher.final()]).toString('base64url');
    t.equal(codec.encode(SESSION, { incarnation, seq }), `1.${incarnation}.${seq.toString(36)}.${tag}.${mac}`, `seq ${seq}`);
  }
});

t.test('an issuer numbers a batch exactly as encode numbers each position alone', async (t) => {
  check(
    t,
    fc.property(sessionArb, incarnationArb, fc.array(seqArb, { minLength: 0, maxLength: 40 }), (session, incarnation, seqs) => {
      const issuer = codec.issuer(session, incarnation);
      const batch = issuer.encode(seqs);
      assert.deepEqual(batch, seqs.map((seq) => codec.encode(session, { incarnation, seq })));
      // The issuer keeps one cipher for the stream: a second batch is numbered the same way.
      assert.deepEqual(issuer.encode(seqs), batch);
    }),
    300,
  );
  t.throws(() => codec.issuer(SESSION, 'short'), RangeError);
  t.throws(() => codec.issuer(SESSION, newIncarnationId()).encode([1, -1]), RangeError);
});

t.test('an issuer writes a batch as bytes with the same characters as encode, each line where it is asked to', async (t) => {
  check(
    t,
    fc.property(sessionArb, incarnationArb, fc.array(fc.oneof(seqArb, fc.constantFrom(0, 35, 36, 1295, 1296, Number.MAX_SAFE_INTEGER)), { minLength: 0, maxLength: 40 }), (session, incarnation, seqs) => {
      const issuer = codec.issuer(session, incarnation);
      const lines = issuer.lines(seqs, 'id: ', '\n');
      const expected = issuer.encode(seqs).map((cursor) => `id: ${cursor}\n`);
      const out = Buffer.alloc(seqs.length * 100, '#');
      let at = 1;
      for (let i = seqs.length - 1; i >= 0; i--) {
        assert.equal(lines.length(i), expected[i]!.length);
        assert.equal(lines.write(i, out, at), expected[i]!.length);
        assert.equal(out.toString('latin1', at, at + expected[i]!.length), expected[i]);
        assert.equal(out[at - 1], 0x23, 'nothing written before the line');
        at += expected[i]!.length + 1;
      }
    }),
    300,
  );
  t.throws(() => codec.issuer(SESSION, newIncarnationId()).lines([1, 2 ** 53], '', ''), RangeError);
});

t.test('session tags stay right when the codec cache of them fills and empties', async (t) => {
  const fresh = new CursorCodec(SECRET);
  const first = fresh.encode(SESSION, { incarnation: 'AAAAAAAAAAAAAAAA', seq: 7 });
  // More sessions than the cache keeps: it empties at least once on the way.
  for (let i = 0; i < 10_050; i++) fresh.encode(`other-${i}`, { incarnation: 'AAAAAAAAAAAAAAAA', seq: 1 });
  t.same(fresh.decode(first, SESSION), { kind: 'ok', fields: { incarnation: 'AAAAAAAAAAAAAAAA', seq: 7 } });
  t.equal(fresh.decode(first, 'other-5').kind, 'session_mismatch');
  t.equal(fresh.encode(SESSION, { incarnation: 'AAAAAAAAAAAAAAAA', seq: 7 }), first, 'the same cursor again');
  t.equal(codec.encode(SESSION, { incarnation: 'AAAAAAAAAAAAAAAA', seq: 7 }), first, 'as another codec of the secret writes it');
  const long = 'x'.repeat(300);
  t.equal(fresh.decode(fresh.encode(long, { incarnation: 'AAAAAAAAAAAAAAAA', seq: 1 }), long).kind, 'ok', 'long session ids are not cached, and still right');
});

t.test('codecs built from the same secret, as string or Buffer, agree', async (t) => {
  const twin = new CursorCodec(Buffer.from(SECRET, 'utf8'));
  check(
    t,
    fc.property(sessionArb, fieldsArb, (session, fields) => {
      const cursor = codec.encode(session, fields);
      assert.equal(twin.encode(session, fields), cursor);
      assert.deepEqual(twin.decode(cursor, session), { kind: 'ok', fields });
    }),
    200,
  );
});

t.test('every single-character alteration of a valid cursor is foreign (exhaustive)', async (t) => {
  const cases: [string, CursorFields][] = [
    [SESSION, { incarnation: 'AAAAAAAAAAAAAAAA', seq: 0 }],
    [SESSION, { incarnation: '-_-_-_-_-_-_-_-_', seq: 36 }],
    ['{"a":"é😀"}', { incarnation: newIncarnationId(), seq: Number.MAX_SAFE_INTEGER }],
    ['x'.repeat(1024), { incarnation: newIncarnationId(), seq: 123456789 }],
  ];
  for (const [session, fields] of cases) {
    const cursor = codec.encode(session, fields);
    const notForeign: [string, DecodeResult][] = [];
    let tried = 0;
    for (const altered of alterations(cursor)) {
      tried++;
      const result = codec.decode(altered, session);
      if (result.kind !== 'foreign') notForeign.push([altered, result]);
    }
    t.equal(tried, cursor.length * ALPHABET.length + (cursor.length + 1) * ALPHABET.length, `${tried} alterations`);
    t.strictSame(notForeign, [], `none of ${cursor}'s alterations decodes`);
  }
});

t.test('a cursor of a codec with another secret is foreign', async (t) => {
  const other = new CursorCodec(randomBytes(32));
  check(
    t,
    fc.property(sessionArb, fieldsArb, (session, fields) => {
      assert.deepEqual(other.decode(codec.encode(session, fields), session), { kind: 'foreign', why: 'bad_mac' });
      assert.deepEqual(codec.decode(other.encode(session, fields), session), { kind: 'foreign', why: 'bad_mac' });
    }),
    300,
  );
});

t.test('a valid cursor presented in another session is session_mismatch, with its fields', async (t) => {
  check(
    t,
    fc.property(sessionArb, sessionArb, fieldsArb, (a, b, fields) => {
      fc.pre(a !== b);
      assert.deepEqual(codec.decode(codec.encode(a, fields), b), { kind: 'session_mismatch', fields });
    }),
    500,
  );
  // Distinct in UTF-16 but equal in UTF-8 (each lone surrogate becomes U+FFFD there).
  const fields = { incarnation: newIncarnationId(), seq: 7 };
  t.equal(codec.decode(codec.encode('\uD800', fields), '\uDC00').kind, 'session_mismatch');
  t.equal(codec.decode(codec.encode('s', fields), undefined as unknown as string).kind, 'session_mismatch');
});

t.test('distinct fields or sessions give distinct cursors', async (t) => {
  check(
    t,
    fc.property(sessionArb, sessionArb, fieldsArb, fieldsArb, (s1, s2, f1, f2) => {
      fc.pre(s1 !== s2 || f1.incarnation !== f2.incarnation || f1.seq !== f2.seq);
      assert.notEqual(codec.encode(s1, f1), codec.encode(s2, f2));
    }),
    1000,
  );
  const inc = newIncarnationId();
  const seen = new Set<string>();
  for (let seq = 0; seq < 2000; seq++) seen.add(codec.encode(SESSION, { incarnation: inc, seq }));
  for (let i = 0; i < 2000; i++) seen.add(codec.encode(SESSION, { incarnation: newIncarnationId(), seq: 5 }));
  t.equal(seen.size, 4000);
});

t.test('encode refuses fields that no cursor can carry', async (t) => {
  const inc = newIncarnationId();
  const bad: CursorFields[] = [
    { incarnation: inc, seq: -1 },
    { incarnation: inc, seq: 1.5 },
    { incarnation: inc, seq: Number.NaN },
    { incarnation: inc, seq: Number.POSITIVE_INFINITY },
    { incarnation: inc, seq: Number.MAX_SAFE_INTEGER + 1 },
    { incarnation: inc, seq: '1' as unknown as number },
    { incarnation: inc.slice(1), seq: 1 },
    { incarnation: `${inc}A`, seq: 1 },
    { incarnation: `${inc.slice(1)}.`, seq: 1 },
    { incarnation: `${inc.slice(1)}+`, seq: 1 },
    { incarnation: `${inc.slice(1)}=`, seq: 1 },
    { incarnation: 12 as unknown as string, seq: 1 },
  ];
  for (const fields of bad) t.throws(() => codec.encode(SESSION, fields), RangeError, JSON.stringify(fields));
});

t.test('shape is checked before the MAC: non-canonical or malformed parts are foreign for their shape', async (t) => {
  const fields = { incarnation: 'AbCdEfGhIjKlMnOp', seq: 10 };
  const valid = codec.encode(SESSION, fields);
  const [v, inc, seq, tag, mac] = valid.split('.') as [string, string, string, string, string];
  t.equal(seq, 'a');
  const join = (...parts: string[]): string => parts.join('.');
  const expect: [string, string][] = [
    [join('2', inc, seq, tag, mac), 'bad_version'],
    [join('01', inc, seq, tag, mac), 'bad_version'],
    [join('', inc, seq, tag, mac), 'bad_version'],
    [join(v, inc.slice(1), seq, tag, mac), 'bad_incarnation'],
    [join(v, `${inc}A`, seq, tag, mac), 'bad_incarnation'],
    [join(v, inc, '0a', tag, mac), 'bad_seq'],
    [join(v, inc, 'A', tag, mac), 'bad_seq'],
    [join(v, inc, '00', tag, mac), 'bad_seq'],
    [join(v, inc, '', tag, mac), 'bad_seq'],
    [join(v, inc, '-1', tag, mac), 'bad_seq'],
    [join(v, inc, '2gosa7pa2gw', tag, mac), 'bad_seq'], // MAX_SAFE_INTEGER + 1
    [join(v, inc, 'zzzzzzzzzzz', tag, mac), 'bad_seq'],
    [join(v, inc, '100000000000', tag, mac), 'bad_seq'],
    [join(v, inc, seq, tag.slice(1), mac), 'bad_tag'],
    [join(v, inc, seq, `${tag}A`, mac), 'bad_tag'],
    [join(v, inc, seq, tag, mac.slice(1)), 'bad_mac'],
    [join(v, inc, seq, tag, `${mac}A`), 'bad_mac'],
    [join(v, inc, seq, tag, `${mac.slice(0, 21)}~`), 'bad_mac'],
    [join(v, inc, seq, tag), 'bad_parts'],
    [join(v, inc, seq, tag, mac, ''), 'bad_parts'],
    ['', 'bad_parts'],
    [`${valid}\n`, 'bad_byte'],
    [` ${valid}`, 'bad_byte'],
    [valid.replace('.', '\u00b7'), 'bad_byte'],
    [valid.replace('1', '\uff11'), 'bad_byte'],
    [valid.padEnd(129, '~'), 'too_long'],
  ];
  for (const [value, why] of expect) t.strictSame(codec.decode(value, SESSION), { kind: 'foreign', why }, JSON.stringify(value));
  // Node's base64url decoder ignores the last character's spare bits; the MAC is compared as text.
  const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const sibling = mac.slice(0, 21) + (B64[B64.indexOf(mac.charAt(21)) ^ 1] as string);
  t.strictSame(Buffer.from(sibling, 'base64url'), Buffer.from(mac, 'base64url'), 'another spelling of the same bytes');
  t.strictSame(codec.decode(join(v, inc, seq, tag, sibling), SESSION), { kind: 'foreign', why: 'bad_mac' });
  t.strictSame(codec.decode(valid, SESSION), { kind: 'ok', fields });
});

t.test('upstream-style and legacy ids are foreign', async (t) => {
  const ids = [
    '0',
    '1',
    '42',
    '9007199254740993',
    '-1',
    '868476be-1-1',
    '_GET_stream_123',
    '_GET_stream_0',
    'f47ac10b-58cc-4372-a567-0e02b2c3d479',
    'f47ac10b-58cc-4372-a567-0e02b2c3d479_1700000000000_abc123',
    '1.AAAAAAAAAAAAAAAA.0',
    '1.....',
    '....',
    '1',
    '~',
    'undefined',
    'null',
    '%00',
  ];
  for (const id of ids) t.equal(codec.decode(id, SESSION).kind, 'foreign', id);
  check(
    t,
    fc.property(fc.uuid(), fc.nat(), (uuid, n) => {
      for (const id of [uuid, String(n), `${uuid}-${n}`, `_GET_stream_${n}`, `${uuid.slice(0, 8)}-${n}-${n % 7}`]) {
        assert.equal(codec.decode(id, uuid).kind, 'foreign');
      }
    }),
    500,
  );
});

t.test('random input is foreign and never throws', async (t) => {
  const latin1 = fc.uint8Array({ maxLength: 8192 }).map((b) => Buffer.from(b).toString('latin1'));
  const utf8 = fc.uint8Array({ maxLength: 512 }).map((b) => Buffer.from(b).toString('utf8'));
  const inAlphabet = fc.string({ unit: fc.constantFrom(...ALPHABET), maxLength: 160 });
  const shaped = fc
    .tuple(
      fc.constantFrom('1', '0', '2', ''),
      fc.string({ unit: fc.constantFrom(...ALPHABET.replace('.', '')), minLength: 14, maxLength: 18 }),
      fc.oneof(fc.maxSafeNat().map((n) => n.toString(36)), fc.string({ unit: fc.constantFrom(...'0123456789abcdefzA'), maxLength: 13 })),
      fc.string({ unit: fc.constantFrom(...ALPHABET.replace('.', '')), minLength: 10, maxLength: 12 }),
      fc.string({ unit: fc.constantFrom(...ALPHABET.replace('.', '')), minLength: 21, maxLength: 23 }),
    )
    .map((parts) => parts.join('.'));
  const anyString = fc.oneof(
    fc.string({ maxLength: 8192 }),
    fc.string({ unit: 'binary', maxLength: 8192 }),
    fc.string({ unit: 'grapheme', maxLength: 256 }),
    latin1,
    utf8,
    inAlphabet,
    shaped,
  );
  check(
    t,
    fc.property(anyString, sessionArb, (value, session) => {
      const result = codec.decode(value, session);
      assert.equal(result.kind, 'foreign');
    }),
    3000,
  );
  t.strictSame(codec.decode('x'.repeat(1 << 20), SESSION), { kind: 'foreign', why: 'too_long' });
  for (const value of [undefined, null, 42, ['a'], {}, Buffer.from('1.a')]) {
    t.strictSame(codec.decode(value as unknown as string, SESSION), { kind: 'foreign', why: 'not_string' });
  }
});

t.test('a valid cursor with noise around it is foreign', async (t) => {
  check(
    t,
    fc.property(fieldsArb, inAlphabetNonEmpty(), inAlphabetNonEmpty(), (fields, before, after) => {
      const cursor = codec.encode(SESSION, fields);
      for (const value of [before + cursor, cursor + after, before + cursor + after, cursor + cursor]) {
        assert.equal(codec.decode(value, SESSION).kind, 'foreign');
      }
    }),
    500,
  );
});

function inAlphabetNonEmpty(): fc.Arbitrary<string> {
  return fc.string({ unit: fc.constantFrom(...ALPHABET), minLength: 1, maxLength: 40 });
}

t.test('parseCursor: the fields of anything shaped like a cursor, authentic or not; why otherwise', async (t) => {
  const incarnation = newIncarnationId();
  const cursor = codec.encode('s1', { incarnation, seq: 42 });
  const parsed = parseCursor(cursor);
  t.match(parsed, { kind: 'parsed', parts: { incarnation, seq: 42 } });
  const other = new CursorCodec(randomBytes(32));
  t.match(parseCursor(other.encode('s1', { incarnation, seq: 7 })), { kind: 'parsed', parts: { incarnation, seq: 7 } }, 'a cursor of another key has the same shape');
  t.equal(codec.decode(other.encode('s1', { incarnation, seq: 7 }), 's1').kind, 'foreign', 'which only decode tells apart');
  t.same(parseCursor('not-a-cursor'), { kind: 'foreign', why: 'bad_parts' });
  t.same(parseCursor(`${cursor}x`), { kind: 'foreign', why: 'bad_mac' });
});

checkProperties(t, codecProperties);

t.test("a session's fingerprint: keyed, the same under the same key, another under another, nothing of the id in it", async (t) => {
  const ids = [SESSION, 's1', 'short', 'sess-0123456789abcdef-secret', '\ud800', 'x'.repeat(300)];
  for (const id of ids) {
    const fingerprint = codec.sessionFingerprint(id);
    t.match(fingerprint, /^[0-9a-f]{12}$/, '12 hex characters');
    t.equal(new CursorCodec(SECRET).sessionFingerprint(id), fingerprint, 'a codec of the same secret (another instance) gives the same');
    t.equal(codec.sessionFingerprint(id), fingerprint, 'again the same (remembered or not)');
    t.not(new CursorCodec(randomBytes(32)).sessionFingerprint(id), fingerprint, 'another key gives another');
    t.notOk(fingerprint.includes(id.slice(0, 4)) && id.length >= 4, 'no prefix of the id in it');
    // An unkeyed digest of the id, which anyone holding it could compute, is not what is logged.
    const unkeyed = createHash('sha256').update(id).digest('hex');
    t.notOk(unkeyed.startsWith(fingerprint), 'not an unkeyed digest of the id');
  }
  t.not(codec.sessionFingerprint('s1'), codec.sessionFingerprint('s2'), 'two sessions, two fingerprints');
  const tagged = codec.encode('s1', { incarnation: newIncarnationId(), seq: 1 }).split('.')[3]!;
  t.notOk(Buffer.from(tagged, 'base64url').toString('hex').startsWith(codec.sessionFingerprint('s1').slice(0, 8)), 'not the session tag a cursor carries');
});

t.test("a session's fingerprint across a rotation: the signing key's first, then each previous key's", async (t) => {
  const next = 'next-secret-0123456789abcdefghijklmnopqrstuvwxyz';
  const rotated = new CursorCodec(next, [SECRET]);
  t.equal(rotated.sessionFingerprint(SESSION), new CursorCodec(next).sessionFingerprint(SESSION), 'named under the key that signs');
  t.same(rotated.sessionFingerprints(SESSION), [new CursorCodec(next).sessionFingerprint(SESSION), codec.sessionFingerprint(SESSION)]);
  const live = new CursorCodec(SECRET);
  live.setKeys(next, [SECRET]);
  t.equal(live.sessionFingerprint(SESSION), rotated.sessionFingerprint(SESSION), 'a reload that switches the signing key switches the name');
});
