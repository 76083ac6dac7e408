/** credentialMaterial and the principal fingerprint (trust/principal.ts, CONTRACT.md §8 J6). */
import t from 'tap';
import { CursorCodec } from '../../src/cursor/codec.js';
import { credentialMaterial } from '../../src/trust/principal.js';

const codec = new CursorCodec('x'.repeat(32));
const of = (headers: Record<string, string | string[]>, names = ['authorization']) => codec.principal(credentialMaterial(headers, names));

t.test('the same credential gives the same principal; any other credential another', async (t) => {
  t.equal(of({ authorization: 'Bearer a' }), of({ authorization: 'Bearer a', 'x-other': 'ignored' }), 'headers not named do not count');
  t.not(of({ authorization: 'Bearer a' }), of({ authorization: 'Bearer b' }));
  t.not(of({}), of({ authorization: '' }), 'a missing header is not an empty one');
  t.not(of({ 'x-api-key': 'k', cookie: '' }, ['x-api-key', 'cookie']), of({ 'x-api-key': '', cookie: 'k' }, ['x-api-key', 'cookie']), 'values stay with their header');
  t.equal(of({ authorization: 'Bearer a' }, []), of({}, []), 'no credential headers configured: every request is the same principal');
});

t.test('the principal reveals nothing of the credential and depends on the key', async (t) => {
  const principal = of({ authorization: 'Bearer secret-token' });
  t.match(principal, /^[A-Za-z0-9_-]{22}$/, '128 bits, base64url');
  t.notMatch(principal, /secret/);
  const other = new CursorCodec('y'.repeat(32));
  t.not(other.principal(credentialMaterial({ authorization: 'Bearer secret-token' }, ['authorization'])), principal, 'another key, another principal');
});
