/**
 * A redis-server as managed services run it: TLS only (no plain port), client certificates
 * required, the default user off and the users an ACL file names. Its certificates are made here
 * with openssl: an authority, the server's certificate (for 127.0.0.1 and localhost) and a client
 * certificate it signs, and a second authority that signs nothing of this server.
 */

import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { command, freePort, spawnRedis, type RedisProcess, type Reply, type Teardown, type Via } from './redis-process.js';

const run = promisify(execFile);

export interface TlsFiles {
  /** The authority that signs the server's certificate and the client's. */
  readonly ca: string;
  /** An authority that signs nothing of this server. */
  readonly otherCa: string;
  readonly serverCert: string;
  readonly serverKey: string;
  readonly clientCert: string;
  readonly clientKey: string;
}

export interface TlsRedis {
  readonly port: number;
  readonly files: TlsFiles;
  /** rediss:// URL of the server for this user. */
  url(user: string, password: string): string;
  /** One command as the test's own administrator (every permission), over TLS with the client certificate. */
  admin(args: string[]): Promise<Reply>;
  /** Every key the server holds (SCAN, as the administrator). */
  keys(): Promise<string[]>;
}

const SECURITY = fileURLToPath(new URL('../../../docs/security.md', import.meta.url));

/**
 * The ACL file line of docs/security.md ("Redis ACL"), exactly as documented, for this user,
 * password and key prefix.
 */
export async function documentedAclLine(user: string, password: string, keyPrefix: string): Promise<string> {
  const lines = (await readFile(SECURITY, 'utf8')).split('\n').filter((line) => line.startsWith('user <user> '));
  if (lines.length !== 1) throw new Error(`docs/security.md holds ${lines.length} ACL lines, not one`);
  return lines[0]!.replaceAll('<user>', user).replaceAll('<password>', password).replaceAll('<prefix>', keyPrefix);
}

/** The same rules as ACL SETUSER's arguments: what an operator types for a user of an existing server. */
export function setUser(line: string): string[] {
  const [, ...rules] = line.split(' ');
  return ['ACL', 'SETUSER', ...rules];
}

const ADMIN: readonly [string, string] = ['test-admin', 'test-admin-password'];
const START_ATTEMPTS = 3;

/** A key and a certificate of `subject`, signed by the authority `ca` (its .crt and .key), with `extensions`. */
async function signed(dir: string, name: string, subject: string, ca: string, serial: number, extensions: string): Promise<void> {
  await writeFile(join(dir, `${name}.ext`), `${extensions}\n`);
  await run('openssl', ['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', subject], { cwd: dir });
  await run('openssl', ['x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`, '-set_serial', String(serial), '-days', '2', '-out', `${name}.crt`, '-extfile', `${name}.ext`], { cwd: dir });
}

async function authority(dir: string, name: string): Promise<void> {
  await run('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`], { cwd: dir });
}

export async function makeCertificates(dir: string): Promise<TlsFiles> {
  await Promise.all([authority(dir, 'ca'), authority(dir, 'other-ca')]);
  await Promise.all([
    signed(dir, 'server', '/CN=localhost', 'ca', 1, 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth'),
    signed(dir, 'client', '/CN=gateway', 'ca', 2, 'extendedKeyUsage=clientAuth'),
  ]);
  const at = (file: string) => join(dir, file);
  return {
    ca: at('ca.crt'),
    otherCa: at('other-ca.crt'),
    serverCert: at('server.crt'),
    serverKey: at('server.key'),
    clientCert: at('client.crt'),
    clientKey: at('client.key'),
  };
}

/** Starts the server with `users`, lines of an ACL file, beside the administrator; killed on teardown. */
export async function startTlsRedis(t: Teardown, users: readonly string[]): Promise<TlsRedis> {
  const dir = await mkdtemp(join(tmpdir(), 'gw-redis-tls-'));
  let server: RedisProcess | undefined;
  t.teardown(async () => {
    await server?.kill();
    await rm(dir, { recursive: true, force: true });
  });
  const files = await makeCertificates(dir);
  await writeFile(join(dir, 'users.acl'), ['user default off', `user ${ADMIN[0]} on >${ADMIN[1]} ~* &* +@all`, ...users, ''].join('\n'));
  const [ca, cert, key] = await Promise.all([readFile(files.ca), readFile(files.clientCert), readFile(files.clientKey)]);
  const via: Via = { tls: { ca, cert, key }, auth: ADMIN };
  let port = 0;
  for (let attempt = 1; server === undefined; attempt++) {
    port = await freePort();
    const args = ['--port', '0', '--tls-port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--logfile', 'redis.log', '--save', '', '--appendonly', 'no'];
    args.push('--tls-cert-file', files.serverCert, '--tls-key-file', files.serverKey, '--tls-ca-cert-file', files.ca, '--tls-auth-clients', 'yes', '--aclfile', join(dir, 'users.acl'));
    try {
      server = await spawnRedis({ teardown: () => undefined }, { dir, port, logfile: 'redis.log', args, via });
    } catch (err) {
      // A port taken by someone else between freePort() and the start gets one more try elsewhere.
      if (attempt === START_ATTEMPTS) throw err;
    }
  }

  const admin = (args: string[]) => command(port, args, via);
  return {
    port,
    files,
    url: (user, password) => `rediss://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${port}`,
    admin,
    async keys() {
      const keys: string[] = [];
      let cursor = '0';
      do {
        const reply = await admin(['SCAN', cursor, 'COUNT', '1000']);
        if (!Array.isArray(reply) || typeof reply[0] !== 'string' || !Array.isArray(reply[1])) throw new Error(`SCAN answered ${String(reply)}`);
        cursor = reply[0];
        keys.push(...reply[1].map(String));
      } while (cursor !== '0');
      return keys;
    },
  };
}
