#!/usr/bin/env node
// The test suite runs a real redis-server. Make sure there is one: install it with apt-get where
// this runs as root, otherwise say exactly what to do.
import { execFileSync, spawnSync } from 'node:child_process';

function have(cmd) {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

if (have('redis-server')) process.exit(0);

const root = typeof process.getuid === 'function' && process.getuid() === 0;
if (root && have('apt-get')) {
  console.log('redis-server is missing: installing it with apt-get (the tests run a real one)');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
  execFileSync('apt-get', ['install', '-y', '-qq', 'redis-server'], { stdio: 'inherit', env });
  if (have('redis-server')) process.exit(0);
}
console.error(
  'The tests need redis-server (Redis 6 or newer) on the PATH and cannot install it here.\n' +
    '  Debian/Ubuntu: sudo apt-get install -y redis-server\n' +
    '  macOS:         brew install redis\n' +
    'Then run npm test again.',
);
process.exit(1);
