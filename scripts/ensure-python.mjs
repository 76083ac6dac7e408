#!/usr/bin/env node
// The interoperability test runs the official MCP Python SDK (test/python/requirements.txt) from a
// virtual environment in .venv-test. Make it: python3 (3.10 or newer) and its venv module with
// apt-get where this runs as root, then pip with whatever index pip is configured with. Where that
// cannot be done, the reason is written to .venv-test/unavailable and the test skips with it: the
// rest of the suite does not depend on Python, so this never fails the run.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const venv = `${root}.venv-test`;
const python = `${venv}/bin/python`;
const requirements = `${root}test/python/requirements.txt`;
const installed = `${venv}/installed.txt`;
const unavailable = `${venv}/unavailable`;
const wanted = readFileSync(requirements, 'utf8');

const run = (cmd, args, opts = {}) => spawnSync(cmd, args, { stdio: 'inherit', ...opts }).status === 0;
const quiet = (cmd, args) => spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;
// mcp 2.x needs Python 3.10; a venv needs the venv module and ensurepip (Debian: python3-venv).
const usable = () => quiet('python3', ['-c', 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))']);

function giveUp(reason) {
  mkdirSync(venv, { recursive: true });
  writeFileSync(unavailable, `${reason}\n`);
  console.warn(`The Python SDK test will be skipped: ${reason}`);
  process.exit(0);
}

if (existsSync(installed) && readFileSync(installed, 'utf8') === wanted && quiet(python, ['-c', 'import mcp'])) process.exit(0);

if (!usable()) {
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (isRoot && quiet('sh', ['-c', 'command -v apt-get'])) {
    console.log('python3 with venv is missing: installing it with apt-get (the Python SDK test needs it)');
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    run('apt-get', ['update', '-qq'], { env });
    run('apt-get', ['install', '-y', '-qq', 'python3', 'python3-venv'], { env });
  }
  if (!usable()) giveUp('python3 3.10 or newer with its venv module is not installed and could not be (Debian: apt-get install python3 python3-venv)');
}

rmSync(venv, { recursive: true, force: true });
if (!run('python3', ['-m', 'venv', venv])) giveUp('python3 -m venv .venv-test failed');
// --retries 0: an index that cannot be reached is skipped at once for the next one pip knows,
// instead of five backed-off retries per package.
if (!run(python, ['-m', 'pip', 'install', '-q', '--retries', '0', '-r', requirements])) {
  giveUp(`pip could not install ${wanted.split('\n').filter((l) => l && !l.startsWith('#')).join(', ')} from the package index pip is configured with`);
}
writeFileSync(installed, wanted);
