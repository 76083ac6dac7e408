#!/usr/bin/env node
// The test suite runs a real redis-server, and makes the certificates of its TLS tests with
// openssl. Make sure both are there: install what is missing with apt-get where this runs as root
// (Debian's redis-server is built with TLS), otherwise say exactly what to do.
import { execFileSync, spawnSync } from 'node:child_process';

function have(cmd) {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

const needed = ['redis-server', 'openssl'];
let missing = needed.filter((cmd) => !have(cmd));
if (missing.length === 0) process.exit(0);

const root = typeof process.getuid === 'function' && process.getuid() === 0;
if (root && have('apt-get')) {
  console.log(`${missing.join(' and ')} missing: installing with apt-get (the tests run a real redis-server, over TLS too)`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
  execFileSync('apt-get', ['install', '-y', '-qq', ...missing], { stdio: 'inherit', env });
  missing = needed.filter((cmd) => !have(cmd));
  if (missing.length === 0) process.exit(0);
}
console.error(
  `The tests need ${missing.join(' and ')} on the PATH (redis-server: Redis 7 or newer, built with TLS) and cannot install it here.\n` +
    `  Debian/Ubuntu: sudo apt-get install -y ${missing.join(' ')}\n` +
    `  macOS:         brew install ${missing.map((cmd) => (cmd === 'redis-server' ? 'redis' : cmd)).join(' ')}\n` +
    'Then run npm test again.',
);
process.exit(1);
