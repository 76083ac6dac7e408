/**
 * Properties of the cursor codec (src/cursor/codec.ts) against what a client may send back: any
 * mutation of a real cursor (characters changed, dropped, added or swapped, parts taken from other
 * real cursors, the position respelled) is foreign, unless it is exactly another real cursor, and
 * then it decodes as that one; decode never throws, whatever it is given.
 */
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { CursorCodec, type CursorFields, type DecodeResult } from '../../src/cursor/codec.js';
import { property, type NamedProperty } from '../helpers/property.js';

const codec = new CursorCodec('a-property-secret-of-at-least-32-bytes');
/** The characters of E2, and some that are not. */
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~-';
const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

const incarnationArb = fc.uint8Array({ minLength: 12, maxLength: 12 }).map((b) => Buffer.from(b).toString('base64url'));
const seqArb = fc.oneof(fc.constantFrom(0, 1, 35, 36, 1295, 1296, Number.MAX_SAFE_INTEGER - 1), fc.nat(5000), fc.maxSafeNat().map((n) => Math.min(n, Number.MAX_SAFE_INTEGER - 1)));
const sessionArb = fc.oneof(fc.uuid(), fc.string({ maxLength: 40 }), fc.string({ unit: 'binary', maxLength: 40 }), fc.constantFrom('\uD800', '\uDC00', ''));
const charArb = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...ALPHABET) },
  fc.constantFrom('+', '/', '=', ' ', '\0', '\n', '\u00b7', '\uff11', 'é', '😀', '\uD800'),
  fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }),
);

type Mutation =
  | { op: 'set'; at: number; c: string }
  | { op: 'delete'; at: number; n: number }
  | { op: 'insert'; at: number; s: string }
  | { op: 'swap'; at: number; with: number }
  | { op: 'case'; at: number }
  | { op: 'part'; part: number; from: number }
  | { op: 'seq'; delta: number; spelling: 'plain' | 'upper' | 'zero' | 'decimal' }
  | { op: 'mac-spare-bits' };

const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ op: fc.constant('set' as const), at: fc.nat(), c: charArb }),
  fc.record({ op: fc.constant('delete' as const), at: fc.nat(), n: fc.integer({ min: 1, max: 30 }) }),
  fc.record({ op: fc.constant('insert' as const), at: fc.nat(), s: fc.string({ unit: charArb, minLength: 1, maxLength: 4 }) }),
  fc.record({ op: fc.constant('swap' as const), at: fc.nat(), with: fc.nat() }),
  fc.record({ op: fc.constant('case' as const), at: fc.nat() }),
  fc.record({ op: fc.constant('part' as const), part: fc.nat(4), from: fc.nat() }),
  fc.record({ op: fc.constant('seq' as const), delta: fc.integer({ min: -2, max: 2 }), spelling: fc.constantFrom('plain' as const, 'upper' as const, 'zero' as const, 'decimal' as const) }),
  fc.constant({ op: 'mac-spare-bits' as const }),
);

interface Real {
  cursor: string;
  session: string;
  fields: CursorFields;
}

/** A cursor, mutated in turn by each of `mutations`; `others` lend their parts. */
function mutate(cursor: string, others: readonly string[], mutations: readonly Mutation[]): string {
  let s = cursor;
  for (const m of mutations) {
    const at = (n: number) => (s.length === 0 ? 0 : n % s.length);
    switch (m.op) {
      case 'set':
        s = s.slice(0, at(m.at)) + m.c + s.slice(at(m.at) + 1);
        break;
      case 'delete':
        s = s.slice(0, at(m.at)) + s.slice(at(m.at) + m.n);
        break;
      case 'insert':
        s = s.slice(0, m.at % (s.length + 1)) + m.s + s.slice(m.at % (s.length + 1));
        break;
      case 'swap': {
        const chars = [...s];
        const [i, j] = [at(m.at), at(m.with)];
        [chars[i], chars[j]] = [chars[j]!, chars[i]!];
        s = chars.join('');
        break;
      }
      case 'case': {
        const c = s.charAt(at(m.at));
        const flipped = c === c.toUpperCase() ? c.toLowerCase() : c.toUpperCase();
        s = s.slice(0, at(m.at)) + flipped + s.slice(at(m.at) + 1);
        break;
      }
      case 'part': {
        const parts = s.split('.');
        const donor = others[m.from % others.length]!.split('.');
        if (m.part < parts.length) parts[m.part] = donor[m.part]!;
        s = parts.join('.');
        break;
      }
      case 'seq': {
        const parts = s.split('.');
        const seq = parseInt(parts[2] ?? '', 36);
        if (parts.length !== 5 || !Number.isSafeInteger(seq) || seq + m.delta < 0) break;
        const text = (seq + m.delta).toString(36);
        parts[2] = m.spelling === 'upper' ? text.toUpperCase() : m.spelling === 'zero' ? `0${text}` : m.spelling === 'decimal' ? String(seq + m.delta) : text;
        s = parts.join('.');
        break;
      }
      case 'mac-spare-bits': {
        // The last character of a 22-character mac has 4 bits that Node's decoder ignores.
        const last = s.charAt(s.length - 1);
        const i = B64.indexOf(last);
        if (i >= 0) s = s.slice(0, -1) + B64[i ^ 1]!;
        break;
      }
    }
  }
  return s;
}

const scenarioArb = fc.record({
  sessions: fc.uniqueArray(sessionArb, { minLength: 2, maxLength: 2 }),
  incarnations: fc.tuple(incarnationArb, incarnationArb),
  seqs: fc.tuple(seqArb, fc.integer({ min: 1, max: 40 })),
  mutations: fc.array(mutationArb, { minLength: 1, maxLength: 4 }),
});

/** The value decoded as the real cursor it is (ok in its session, session_mismatch in another), else foreign. */
function expected(value: string, session: string, reals: readonly Real[]): DecodeResult['kind'] | DecodeResult {
  const real = reals.find((r) => r.cursor === value);
  if (!real) return 'foreign';
  return real.session === session ? { kind: 'ok', fields: real.fields } : { kind: 'session_mismatch', fields: real.fields };
}

export const codecProperties: readonly NamedProperty[] = [
  property(
    'any mutation of a real cursor is foreign, never another session’s or another position’s cursor',
    scenarioArb,
    ({ sessions, incarnations, seqs: [seq, step], mutations }) => {
      const [a, b] = sessions as [string, string];
      const reals: Real[] = [];
      for (const session of [a, b]) {
        for (const incarnation of incarnations) {
          for (const s of [seq, seq + 1, seq + step]) {
            const fields = { incarnation, seq: Math.min(s, Number.MAX_SAFE_INTEGER) };
            reals.push({ cursor: codec.encode(session, fields), session, fields });
          }
        }
      }
      const original = reals[0]!;
      const value = mutate(original.cursor, reals.slice(1).map((r) => r.cursor), mutations);
      for (const session of [a, b]) {
        const result = codec.decode(value, session);
        const want = expected(value, session, reals);
        if (want === 'foreign') assert.equal(result.kind, 'foreign', `${JSON.stringify(value)} in ${JSON.stringify(session)}: ${JSON.stringify(result)}`);
        else assert.deepStrictEqual(result, want);
      }
    },
    {
      numRuns: 200,
      examples: [
        // The same bytes spelled otherwise (the mac's spare bits): still foreign.
        { sessions: ['s1', 's2'], incarnations: ['AAAAAAAAAAAAAAAA', 'BBBBBBBBBBBBBBBB'], seqs: [7, 1], mutations: [{ op: 'mac-spare-bits' }] },
        // Another position in the seq's place, and the seq spelled in capitals or with a leading zero.
        { sessions: ['s1', 's2'], incarnations: ['AAAAAAAAAAAAAAAA', 'BBBBBBBBBBBBBBBB'], seqs: [35, 1], mutations: [{ op: 'seq', delta: 1, spelling: 'plain' }] },
        { sessions: ['s1', 's2'], incarnations: ['AAAAAAAAAAAAAAAA', 'BBBBBBBBBBBBBBBB'], seqs: [35, 1], mutations: [{ op: 'seq', delta: 0, spelling: 'upper' }] },
        { sessions: ['s1', 's2'], incarnations: ['AAAAAAAAAAAAAAAA', 'BBBBBBBBBBBBBBBB'], seqs: [35, 1], mutations: [{ op: 'seq', delta: 0, spelling: 'zero' }] },
        // Another session's tag, with or without its mac.
        { sessions: ['s1', 's2'], incarnations: ['AAAAAAAAAAAAAAAA', 'BBBBBBBBBBBBBBBB'], seqs: [7, 1], mutations: [{ op: 'part', part: 3, from: 5 }] },
        { sessions: ['s1', 's2'], incarnations: ['AAAAAAAAAAAAAAAA', 'BBBBBBBBBBBBBBBB'], seqs: [7, 1], mutations: [{ op: 'part', part: 3, from: 5 }, { op: 'part', part: 4, from: 5 }] },
      ],
    },
  ),
  property(
    'decode never throws, whatever the value and the session',
    fc.tuple(fc.anything(), fc.oneof(sessionArb, fc.anything())),
    ([value, session]) => {
      const result = codec.decode(value as string, session as string);
      assert.ok(result.kind === 'foreign' || typeof value === 'string');
    },
    { numRuns: 300 },
  ),
];
