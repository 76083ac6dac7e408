/** credentialMaterial and the principal fingerprint (trust/principal.ts, CONTRACT.md §8 J6). */
import t from 'tap';
import { CursorCodec } from '../../src/cursor/codec.js';
import { createServer } from 'node:http';
import { Registry } from 'prom-client';
import { parseConfig } from '../../src/config/load.js';
import { CursorKeys } from '../../src/cursor/keys.js';
import { createLogger } from '../../src/logger.js';
import { createMetrics } from '../../src/metrics.js';
import { createMemoryStore } from '../../src/store/memory.js';
import { createPrincipals, credentialMaterial } from '../../src/trust/principal.js';
import { Upstreams } from '../../src/upstream/index.js';

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

/**
 * The check against an owner that cannot say (a real HTTP server on loopback as the owner): never
 * served, never the owner's health, 503 GW_PRINCIPAL_UNVERIFIED.
 */
t.test('another credential and an owner that fails the check or does not answer it: unverified', async (t) => {

  let answer: 'fail' | 'silent' | 'accept' = 'fail';
  const pings: string[] = [];
  const owner = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      pings.push(`${req.method} ${String(req.headers['authorization'])} ${String(req.headers['mcp-session-id'])} ${body}`);
      if (answer === 'fail') res.writeHead(500).end();
      else if (answer === 'accept') res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":"x","result":{}}');
    });
  });
  await new Promise<void>((resolve) => owner.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    owner.closeAllConnections();
    owner.close();
  });
  const port = (owner.address() as { port: number }).port;
  // Time enough for an answer on a loaded machine, but for the owner that does not answer.
  const withTimeout = (ms: number) => parseConfig(`replicas: [{ id: r1, url: "http://127.0.0.1:${port}/mcp" }]\nsecurity: { principalCheckTimeoutMs: ${ms} }\n`, 'test.yaml', {});
  const answering = withTimeout(30_000);
  let config = answering;
  const store = createMemoryStore();
  const logger = createLogger('silent');
  const upstreams = new Upstreams(config.upstream);
  t.teardown(() => upstreams.close());
  const metrics = createMetrics(new Registry());
  const principals = createPrincipals({
    config: () => config,
    keys: new CursorKeys({ secret: 'k'.repeat(32) }, store, logger),
    store,
    upstreams,
    replica: (id) => config.replicas.find((r) => r.id === id),
    metrics,
    logger,
  });
  const bound = await principals.of({ authorization: 'Bearer old' });
  await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e', principal: bound }, 60_000);
  const session = (await store.touchSession('s1', 60_000))!;
  const request = { headers: { authorization: 'Bearer new' }, url: '/mcp' };

  t.same(await principals.check(request, session, false), { kind: 'refused', code: 'GW_PRINCIPAL_UNVERIFIED', owner: 'r1' }, 'a 5xx');
  t.match(pings[0], /^POST Bearer new s1 .*"method":"ping"/, 'the owner was asked with a ping carrying the request\'s credential');
  answer = 'silent';
  config = withTimeout(200);
  t.same(await principals.check(request, session, false), { kind: 'refused', code: 'GW_PRINCIPAL_UNVERIFIED', owner: 'r1' }, 'no answer within principalCheckTimeoutMs');
  t.equal((await store.touchSession('s1', 60_000))?.principal, bound, 'the session keeps its principal');
  t.same(await principals.check(request, session, true), { kind: 'refused', code: 'GW_PRINCIPAL_REFUSED', owner: 'r1' }, 'the owner gone: nobody is asked');
  t.equal(pings.length, 2, 'no ping to a gone owner');
  answer = 'accept';
  config = answering;
  t.same(await principals.check(request, session, false), { kind: 'allowed' }, 'accepted');
  t.equal((await store.touchSession('s1', 60_000))?.principal, await principals.of(request.headers), 'and the session bound to it');
  t.same(await principals.check({ headers: { authorization: 'Bearer old' }, url: '/mcp' }, session, true), { kind: 'allowed' }, 'its bound principal is served with the owner gone');
  const results = (await metrics.principalChecks.get()).values.map((v) => `${v.labels.result}=${v.value}`).sort();
  t.same(results, ['accepted=1', 'match=1', 'owner_gone=1', 'unverified=2']);
});

/**
 * The principal is keyed by the cursor keys: a rotation (docs/security.md#rotating-the-cursor-key)
 * keeps a bound session matching its own credential, even with the owner gone (nobody could accept
 * it then), and never matches another.
 */
t.test('a session bound before a rotation of the cursor keys still matches its credential, and is bound again under the signing key', async (t) => {
  const OLD = 'old-secret-0123456789abcdefghijklmnopqrstuvwxyz';
  const NEW = 'new-secret-0123456789abcdefghijklmnopqrstuvwxyz';
  const config = parseConfig('replicas: [{ id: r1, url: "http://127.0.0.1:9/mcp" }]\n', 'test.yaml', {});
  const store = createMemoryStore();
  const logger = createLogger('silent');
  const upstreams = new Upstreams(config.upstream);
  t.teardown(() => upstreams.close());
  const metrics = createMetrics(new Registry());
  const keys = new CursorKeys({ secret: OLD }, store, logger);
  const principals = createPrincipals({ config: () => config, keys, store, upstreams, replica: (id) => config.replicas.find((r) => r.id === id), metrics, logger });
  const alice = { headers: { authorization: 'Bearer alice' }, url: '/mcp' };
  const bob = { headers: { authorization: 'Bearer bob' }, url: '/mcp' };
  const session = async (id: string) => (await store.touchSession(id, 60_000))!;
  await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e', principal: await principals.of(alice.headers) }, 60_000);
  await store.bindSession({ sessionId: 's2', owner: 'r1', ownerEpoch: 'e', principal: await principals.of(alice.headers) }, 60_000);
  const boundOld = (await session('s1')).principal;

  keys.reconfigure({ secret: OLD, previousSecrets: [NEW] });
  t.same(await principals.check(alice, await session('s1'), true), { kind: 'allowed' }, 'step 1: the same principal');
  t.equal((await session('s1')).principal, boundOld, 'nothing to bind again');

  keys.reconfigure({ secret: NEW, previousSecrets: [OLD] });
  t.same(await principals.check(bob, await session('s1'), true), { kind: 'refused', code: 'GW_PRINCIPAL_REFUSED', owner: 'r1' }, 'step 2: another credential matches under no key');
  t.same(await principals.check(alice, await session('s1'), true), { kind: 'allowed' }, 'step 2: the same credential matches under the previous key, the owner gone');
  const boundNew = (await session('s1')).principal;
  t.not(boundNew, boundOld, 'and the session is bound again');
  t.equal(boundNew, await principals.of(alice.headers), 'under the signing key');

  keys.reconfigure({ secret: NEW });
  t.same(await principals.check(alice, await session('s1'), true), { kind: 'allowed' }, 'step 3: it still matches once the old key is gone');
  t.same(await principals.check(alice, await session('s2'), true), { kind: 'refused', code: 'GW_PRINCIPAL_REFUSED', owner: 'r1' }, 'a session not seen during the rotation is bound under a key dropped since: no match');
  const results = (await metrics.principalChecks.get()).values.map((v) => `${v.labels.result}=${v.value}`).sort();
  t.same(results, ['match=3', 'owner_gone=2']);
});
