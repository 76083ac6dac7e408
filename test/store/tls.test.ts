/**
 * The Redis store as production runs Redis: TLS only, client certificates required, and a user
 * with exactly the permissions docs/security.md ("Redis ACL") documents, one per key prefix. The
 * store contract passes so; nothing is written outside the prefix; and the start check tells a
 * store that refuses the gateway (which certificate, which credentials, which permission) from one
 * that does not answer.
 */

import { readFileSync } from 'node:fs';
import t, { type Test } from 'tap';
import { isStoreError, StoreRefusedError } from '../../src/errors.js';
import type { StoreTls } from '../../src/store/redis/connection.js';
import { createRedisStore } from '../../src/store/redis/index.js';
import type { Store } from '../../src/store/types.js';
import { refusingPort } from '../helpers/http.js';
import { documentedAclLine, setUser, startTlsRedis } from '../helpers/redis-tls.js';
import { CONTRACT_JOBS, redisHarness, storeContract } from './contract.js';

const PASSWORD = 'contract-password';
/** Far above an event-loop stall: the contract is about what the store does, not how fast. */
const TIMEOUT_MS = 5_000;

const server = await startTlsRedis(t, []);
const { files } = server;
const trusted: StoreTls = { ca: readFileSync(files.ca), cert: readFileSync(files.clientCert), key: readFileSync(files.clientKey), rejectUnauthorized: true };

const userOf = (keyPrefix: string) => `gw-${keyPrefix}`;

/** The documented user for `keyPrefix`, made on the running server with ACL SETUSER. */
async function grant(keyPrefix: string, line?: string): Promise<void> {
  const reply = await server.admin(setUser(line ?? (await documentedAclLine(userOf(keyPrefix), PASSWORD, keyPrefix))));
  if (reply !== 'OK') throw new Error(`ACL SETUSER answered ${String(reply)}`);
}

function makeStore(keyPrefix: string, opts: { tls?: StoreTls; password?: string; url?: string; timeoutMs?: number } = {}): Store {
  return createRedisStore({
    url: opts.url ?? server.url(userOf(keyPrefix), opts.password ?? PASSWORD),
    tls: opts.tls ?? trusted,
    keyPrefix,
    connectTimeoutMs: opts.timeoutMs ?? TIMEOUT_MS,
    commandTimeoutMs: opts.timeoutMs ?? TIMEOUT_MS,
  });
}

storeContract(t, 'redis over TLS as the documented user', redisHarness((keyPrefix) => makeStore(keyPrefix), grant), { jobs: CONTRACT_JOBS });

t.test('after the contract, every key in the server is under one of its prefixes', async (t) => {
  const keys = await server.keys();
  t.ok(keys.length > 0, `the contract left keys to look at (${keys.length})`);
  t.strictSame(keys.filter((key) => !/^contract-\d+:\{/.test(key)), [], 'none outside a prefix');
});

/** What checkAccess of `store` rejects with: the refusal's message, 'unavailable: ...', or 'ok'. */
async function checked(t: Test, store: Store, timeoutMs = TIMEOUT_MS): Promise<string> {
  t.teardown(() => store.close());
  try {
    await store.checkAccess(timeoutMs);
    return 'ok';
  } catch (err) {
    if (err instanceof StoreRefusedError) return err.message;
    if (isStoreError(err)) return `unavailable: ${err.message}`;
    throw err;
  }
}

t.test('the start check passes as the documented user, and leaves nothing behind', async (t) => {
  await grant('check-ok');
  t.equal(await checked(t, makeStore('check-ok')), 'ok');
  t.strictSame((await server.keys()).filter((key) => key.startsWith('check-ok:')), [], 'its keys are deleted');
});

t.test('the start check names what refuses the gateway', async (t) => {
  await grant('refused');
  const says = (store: Store) => checked(t, store);
  t.match(
    await says(makeStore('refused', { tls: { ...trusted, ca: readFileSync(files.otherCa) } })),
    /^the store refused the gateway: TLS: the server's certificate is not signed by an authority the gateway trusts \(store\.tls\.ca\)/,
    'a CA that did not sign the server',
  );
  t.match(
    await says(makeStore('refused', { tls: { ca: trusted.ca, rejectUnauthorized: true } })),
    /^the store refused the gateway: TLS: the server (requires a client certificate|does not accept the gateway's client certificate)/,
    'no client certificate',
  );
  t.match(
    await says(makeStore('refused', { tls: { ...trusted, servername: 'redis.elsewhere' } })),
    /^the store refused the gateway: TLS: the server's certificate does not name the host connected to/,
    'a servername the certificate does not hold',
  );
  t.match(await says(makeStore('refused', { password: 'wrong' })), /^the store refused the gateway: the server refused the user and password of the store URL: WRONGPASS/, 'a wrong password');

  const documented = await documentedAclLine(userOf('refused'), PASSWORD, 'refused');
  await grant('refused', documented.replace(' +hincrby', ''));
  t.match(
    await says(makeStore('refused')),
    /^the store refused the gateway: the store's user lacks a permission \(docs\/security\.md, Redis ACL\): hincrby: /,
    'a command the scripts run, named',
  );
  await grant('refused', documented.replace(' +ssubscribe', ''));
  t.match(await says(makeStore('refused')), /^the store refused the gateway: the store's user lacks a permission .*'ssubscribe'/, 'SSUBSCRIBE, named');
  await grant('refused', documented.replace(' +info', ''));
  t.match(await says(makeStore('refused')), /^the store refused the gateway: the store's user lacks a permission .*'info'/, 'INFO, named');
  await grant('refused', documented.replaceAll('~refused:{*', '~elsewhere:*'));
  t.match(await says(makeStore('refused')), /^the store refused the gateway: the store's user lacks a permission .*keys/, 'keys outside its patterns');
  await grant('refused', documented.replaceAll('&refused:{*', '&elsewhere:*'));
  t.match(await says(makeStore('refused')), /^the store refused the gateway: the store's user lacks a permission .*: spublish: .*channel/, 'a channel outside its patterns');
});

t.test('a store that does not answer is not a refusal: unavailable, with the connection error', async (t) => {
  const port = await refusingPort();
  t.match(await checked(t, makeStore('down', { url: `rediss://127.0.0.1:${port}`, timeoutMs: 300 }), 300), /^unavailable: .*ECONNREFUSED/);
});

t.test('at run time, a permission revoked is an outage, and service comes back with it', async (t) => {
  await grant('revoked');
  const store = makeStore('revoked');
  t.teardown(() => store.close());
  await store.checkAccess(TIMEOUT_MS);
  const documented = await documentedAclLine(userOf('revoked'), PASSWORD, 'revoked');
  await grant('revoked', documented.replace(' +evalsha', '').replace(' +eval', ''));
  const failed = await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 60_000).then(
    () => undefined,
    (err: unknown) => err,
  );
  t.ok(isStoreError(failed), `a StoreError, as for any outage (${String(failed)})`);
  await grant('revoked');
  t.equal(await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, 60_000), true, 'bound once the permission is back');
});
