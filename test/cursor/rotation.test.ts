/**
 * The codec with a key list (cursor/codec.ts, docs/security.md#cursor-keys): the first key signs,
 * every key verifies, and setKeys changes them in place for the issuers made before. The principal
 * of a credential is found again under a previous key.
 */
import t from 'tap';
import { CursorCodec, newIncarnationId } from '../../src/cursor/codec.js';
import { GatewayError } from '../../src/errors.js';
import { credentialMaterial } from '../../src/trust/principal.js';

const OLD = 'old-secret-0123456789abcdefghijklmnopqrstuvwxyz';
const NEW = 'new-secret-0123456789abcdefghijklmnopqrstuvwxyz';
const THIRD = 'third-secret-0123456789abcdefghijklmnopqrstuvw';
const SESSION = 'session-1';

t.test('the first key signs; every key verifies, and says which one did', async (t) => {
  const old = new CursorCodec(OLD);
  const fresh = new CursorCodec(NEW);
  const both = new CursorCodec(NEW, [THIRD, OLD]);
  const fields = { incarnation: newIncarnationId(), seq: 41 };

  t.equal(both.encode(SESSION, fields), fresh.encode(SESSION, fields), 'the signing key writes the cursor, the previous ones add nothing to it');
  t.strictSame(both.decode(fresh.encode(SESSION, fields), SESSION), { kind: 'ok', fields }, 'the signing key: no previous index');
  t.strictSame(both.decode(old.encode(SESSION, fields), SESSION), { kind: 'ok', fields, previous: 1 }, 'a previous key: its index');
  t.strictSame(both.decode(old.encode(SESSION, fields), 'another-session'), { kind: 'session_mismatch', fields, previous: 1 }, 'the session tag is checked under the key that verified');
  t.strictSame(old.decode(both.encode(SESSION, fields), SESSION), { kind: 'foreign', why: 'bad_mac' }, 'a codec without the new key finds its cursors foreign');
  t.strictSame(new CursorCodec(OLD, [NEW]).decode(both.encode(SESSION, fields), SESSION), { kind: 'ok', fields, previous: 0 }, 'one that lists it as previous verifies them');
  t.strictSame(both.decode(new CursorCodec('x'.repeat(32)).encode(SESSION, fields), SESSION), { kind: 'foreign', why: 'bad_mac' }, 'a key not listed stays foreign');

  t.equal(both.fingerprint, fresh.fingerprint, 'the fingerprint is the signing key’s');
  t.strictSame(both.fingerprints, [fresh.fingerprint, new CursorCodec(THIRD).fingerprint, old.fingerprint], 'then the previous keys’, in order');
});

t.test('keys that are too short, the same twice or not strings are refused, and setKeys then changes nothing', async (t) => {
  const codes = (fn: () => unknown) => {
    try {
      fn();
      return 'none';
    } catch (err) {
      return err instanceof GatewayError ? `${err.code}: ${err.message}` : String(err);
    }
  };
  t.equal(codes(() => new CursorCodec(NEW, ['short'])), 'GW_CURSOR_SECRET_INVALID: previous cursor secret 1 must be at least 32 bytes, got 5');
  t.equal(codes(() => new CursorCodec(NEW, [NEW])), 'GW_CURSOR_SECRET_INVALID: previous cursor secret 1 is the same as the cursor secret');
  t.equal(codes(() => new CursorCodec(NEW, [OLD, Buffer.from(OLD)])), 'GW_CURSOR_SECRET_INVALID: previous cursor secret 2 is the same as previous cursor secret 1', 'the same bytes, as a string or a Buffer');
  t.equal(codes(() => new CursorCodec(NEW, [42 as unknown as string])), 'GW_CURSOR_SECRET_INVALID: previous cursor secret 1 must be a string or a Buffer');
  t.equal(codes(() => new CursorCodec(NEW, OLD as unknown as string[])), 'GW_CURSOR_SECRET_INVALID: the previous cursor secrets must be a list');

  const codec = new CursorCodec(OLD);
  const fields = { incarnation: newIncarnationId(), seq: 3 };
  const cursor = codec.encode(SESSION, fields);
  t.match(codes(() => codec.setKeys(NEW, [NEW])), /^GW_CURSOR_SECRET_INVALID/);
  t.strictSame(codec.decode(cursor, SESSION), { kind: 'ok', fields }, 'the keys in force stay');
});

t.test('setKeys: an issuer made before signs with the new key from its next batch', async (t) => {
  const codec = new CursorCodec(OLD);
  const incarnation = newIncarnationId();
  const issuer = codec.issuer(SESSION, incarnation);
  const [before] = issuer.encode([1]);
  t.equal(before, new CursorCodec(OLD).encode(SESSION, { incarnation, seq: 1 }));

  // Step 2 of a rotation: the new key signs, the old one verifies.
  codec.setKeys(NEW, [OLD]);
  const [after] = issuer.encode([2]);
  t.equal(after, new CursorCodec(NEW).encode(SESSION, { incarnation, seq: 2 }), 'the open issuer follows');
  const lines = issuer.lines([3], 'id: ', '\n');
  const out = Buffer.alloc(lines.length(0));
  lines.write(0, out, 0);
  t.equal(out.toString('latin1'), `id: ${new CursorCodec(NEW).encode(SESSION, { incarnation, seq: 3 })}\n`, 'in its byte form too');
  t.strictSame(codec.decode(before!, SESSION), { kind: 'ok', fields: { incarnation, seq: 1 }, previous: 0 }, 'the old cursor still verifies');

  // Step 3: the old key goes.
  codec.setKeys(NEW);
  t.strictSame(codec.decode(before!, SESSION), { kind: 'foreign', why: 'bad_mac' }, 'a cursor of a key no longer listed is foreign');
  t.strictSame(codec.decode(after!, SESSION), { kind: 'ok', fields: { incarnation, seq: 2 } });
  t.equal(codec.generation, 2, 'each change counted');
});

t.test('the principal of a credential is found again under a previous key, and only for that credential', async (t) => {
  const material = (token: string) => credentialMaterial({ authorization: `Bearer ${token}` }, ['authorization']);
  const before = new CursorCodec(OLD);
  const bound = before.principal(material('alice'));

  for (const [name, codec] of [
    ['the new key verifying only', new CursorCodec(OLD, [NEW])],
    ['the new key signing', new CursorCodec(NEW, [OLD])],
  ] as const) {
    const { principal, previous } = { principal: codec.principal(material('alice')), previous: codec.previousPrincipals(material('alice')) };
    t.ok(principal === bound || previous.includes(bound), `${name}: a session bound before matches the same credential`);
    t.notOk(codec.principal(material('bob')) === bound || codec.previousPrincipals(material('bob')).includes(bound), `${name}: and no other credential`);
  }
  const rotated = new CursorCodec(NEW, [OLD]);
  t.not(rotated.principal(material('alice')), bound, 'under the signing key a principal of its own (the session is bound to it again)');
  t.strictSame(new CursorCodec(NEW).previousPrincipals(material('alice')), [], 'no previous key: nothing more to match');
  t.notOk(new CursorCodec(NEW).principal(material('alice')) === bound, 'once the old key is gone, the old principal no longer matches');
});
