/**
 * What the store's Redis user needs, derived from the code: the commands its scripts call and the
 * ones it sends itself are exactly what the ACL line of docs/security.md grants (with what ioredis
 * sends of its own), the start check's script runs every command the other scripts run, and no
 * script builds a key name. And how a failure is told to be a refusal, by cause.
 */

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { StoreError } from '../../src/errors.js';
import { refusalOf } from '../../src/store/redis/access.js';
import { documentedAclLine } from '../helpers/redis-tls.js';

const REDIS_SRC = fileURLToPath(new URL('../../../src/store/redis/', import.meta.url));
const SCRIPTS = join(REDIS_SRC, 'scripts');
const sources = (dir: string) =>
  readdirSync(dir)
    .filter((f) => f.endsWith('.ts'))
    .map((f) => ({ file: f, text: readFileSync(join(dir, f), 'utf8') }));

/** What ioredis sends of its own: its ready check, the database of the URL, a Cluster's slot map and state. */
const CLIENT_OWN = ['info', 'select', 'cluster|slots', 'cluster|info'];
/** Methods of an ioredis client that are not Redis commands. */
const NOT_COMMANDS = new Set(['defineCommand', 'disconnect', 'on', 'off', 'once', 'pipeline']);

function scriptCommands(text: string, call = /redis\.p?call\('([A-Z]+)'/g): Set<string> {
  return new Set([...text.matchAll(call)].map((m) => m[1]!.toLowerCase()));
}

const scripts = sources(SCRIPTS).filter((s) => s.file !== 'index.ts');
const probe = scripts.find((s) => s.file === 'access.ts')!;
const others = scripts.filter((s) => s !== probe);
const called = new Set(others.flatMap((s) => [...scriptCommands(s.text)]));

t.test("the start check's script runs every command the other scripts call, and no other", async (t) => {
  t.ok(called.size > 15, `the scripts were read (${[...called].join(' ')})`);
  t.strictSame([...scriptCommands(probe.text, /try\('([A-Z]+)'/g)].sort(), [...called].sort());
});

t.test("the documented ACL line grants exactly the commands the code sends, with the client's own", async (t) => {
  const sent = new Set<string>();
  for (const { text } of sources(REDIS_SRC)) {
    for (const [, method] of text.matchAll(/\b(?:client|target)\.(\w+)\(/g)) {
      if (NOT_COMMANDS.has(method!)) continue;
      // A script runs as EVALSHA, and as EVAL when the server does not have it yet.
      if (method!.startsWith('gw')) sent.add('evalsha').add('eval');
      else sent.add(method!.toLowerCase());
    }
  }
  // QUIT needs no permission; AUTH neither.
  sent.delete('quit');
  t.ok(['get', 'spublish', 'ssubscribe', 'sunsubscribe', 'ping', 'evalsha'].every((c) => sent.has(c)), `the sources were read (${[...sent].join(' ')})`);
  const line = await documentedAclLine('u', 'p', 'x');
  const granted = [...line.matchAll(/ \+(\S+)/g)].map((m) => m[1]!);
  t.strictSame([...granted].sort(), [...new Set([...called, ...sent, ...CLIENT_OWN])].sort());
  t.equal(new Set(granted).size, granted.length, 'each once');
  t.match(line, / -@all | reset /, 'and nothing else');
});

t.test('no script builds a key name: the first argument of each command is a key it was handed', async (t) => {
  for (const { file, text } of scripts) {
    for (const [, command, first] of text.matchAll(/redis\.p?call\('([A-Z]+)',\s*([^,)]+)/g)) {
      if (command === 'SPUBLISH') continue;
      t.match(first, /^(KEYS\[\d+\]|key|indexKey)$/, `${file}: ${command} ${first}`);
    }
  }
});

t.test('a refusal, by cause; anything else may pass', async (t) => {
  const coded = (code: string, message: string) => Object.assign(new Error(message), { code });
  const cases: [string, unknown, RegExp | undefined][] = [
    ['an untrusted server certificate', coded('UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'unable to verify the first certificate'), /^TLS: the server's certificate is not signed by an authority the gateway trusts \(store\.tls\.ca\): UNABLE_TO_VERIFY_LEAF_SIGNATURE unable/],
    ['a self-signed one', coded('DEPTH_ZERO_SELF_SIGNED_CERT', 'self-signed certificate'), /not signed by an authority/],
    ['a name it does not hold', coded('ERR_TLS_CERT_ALTNAME_INVALID', "Hostname/IP does not match certificate's altnames"), /does not name the host/],
    ['no client certificate', coded('ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED', 'tlsv13 alert certificate required'), /requires a client certificate/],
    ['a client certificate of another authority', coded('ERR_SSL_TLSV1_ALERT_UNKNOWN_CA', 'tlsv1 alert unknown ca'), /does not accept the gateway's client certificate/],
    ['a plain port', coded('ERR_SSL_WRONG_VERSION_NUMBER', 'wrong version number'), /does not speak TLS/],
    ['a wrong password', new Error('WRONGPASS invalid username-password pair or user is disabled.'), /^the server refused the user and password of the store URL: WRONGPASS/],
    ['no password', new Error('NOAUTH Authentication required.'), /requires a password/],
    ['a permission, inside a StoreError', new StoreError('ping', { cause: new Error("NOPERM this user has no permissions to run the 'ping' command") }), /^the store's user lacks a permission \(docs\/security\.md, Redis ACL\): NOPERM this user/],
    ['a cluster node that refused the login', Object.assign(new Error('Failed to refresh slots cache.'), { lastNodeError: new Error('WRONGPASS invalid') }), /^the server refused the user and password/],
    ['a sentinel that did', new Error('All sentinels are unreachable. Retrying from scratch after 50ms. Last error: WRONGPASS invalid'), /^the server refused the user and password/],
    ['a store that is down', coded('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:6379'), undefined],
    ['a timeout', new StoreError('ping', { cause: new Error('no reply within 500 ms') }), undefined],
    ['ioredis closing', new Error("Stream isn't writeable and enableOfflineQueue options is false"), undefined],
    ['nothing', undefined, undefined],
  ];
  for (const [name, err, expected] of cases) {
    const said = refusalOf(err);
    if (expected === undefined) t.equal(said, undefined, name);
    else t.match(said, expected, name);
  }
});
