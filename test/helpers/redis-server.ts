/**
 * A real redis-server for one test file: its own loopback port and temp dir, killed on teardown
 * and on process exit (including the SIGTERM that tap sends to a test that times out).
 */

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { onExit } from 'signal-exit';

export interface RedisServer {
  readonly url: string;
  readonly port: number;
  /** Kills the server (SIGKILL, nothing saved); restart() starts it again. */
  stop(): Promise<void>;
  /** Sends `signal` and waits for the process to exit. */
  kill(signal: NodeJS.Signals): Promise<void>;
  /** Stops and starts again on the same port; `keepData` saves the dataset first and reloads it. */
  restart(opts: { keepData: boolean }): Promise<void>;
  /** SIGSTOP: connections stay open but nothing is answered, like a blocked Redis. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  flushall(): Promise<void>;
}

/** Anything with tap's teardown, so that the server dies with the test that started it. */
interface Teardown {
  teardown(fn: () => unknown): void;
}

const READY_DEADLINE_MS = 10_000;
const POLL_INTERVAL_MS = 10;
const START_ATTEMPTS = 3;
/** A PING to a server that is up answers in microseconds; this only bounds a stuck one. */
const COMMAND_DEADLINE_MS = 1_000;

export async function startRedisServer(t: Teardown): Promise<RedisServer> {
  const dir = await mkdtemp(join(tmpdir(), 'gw-redis-'));
  let port = 0;
  let child: ChildProcess | null = null;
  let paused = false;
  // SIGKILL works on a paused process too, and nothing needs to be saved.
  const removeExitHook = onExit(() => {
    child?.kill('SIGKILL');
  });

  async function start(): Promise<void> {
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--logfile', 'redis.log'];
    // No snapshots and no AOF: only restart({ keepData: true }) writes the dataset, on purpose.
    args.push('--save', '', '--appendonly', 'no');
    const proc = spawn('redis-server', args, { cwd: dir, stdio: 'ignore' });
    child = proc;
    paused = false;
    const exited = exitOf(proc);
    const deadline = Date.now() + READY_DEADLINE_MS;
    while (proc.exitCode === null && proc.signalCode === null && Date.now() < deadline) {
      if ((await command(port, ['PING']).catch(() => '')) === '+PONG\r\n') {
        // Another test file may have taken the port between freePort() and now: check that the
        // server answering is ours.
        const info = await command(port, ['INFO', 'server']);
        if (info.includes(`process_id:${proc.pid}\r\n`)) return;
        break;
      }
      await Promise.race([delay(POLL_INTERVAL_MS), exited]);
    }
    const log = await readFile(join(dir, 'redis.log'), 'utf8').catch(() => '(no log)');
    await kill('SIGKILL');
    throw new Error(`redis-server on port ${port} did not answer PING:\n${log}`);
  }

  async function kill(signal: NodeJS.Signals): Promise<void> {
    const proc = child;
    if (proc === null) return;
    child = null;
    const exited = exitOf(proc);
    proc.kill(signal);
    // A stopped process acts on SIGTERM only once it runs again.
    if (paused) proc.kill('SIGCONT');
    paused = false;
    await exited;
  }

  async function restart({ keepData }: { keepData: boolean }): Promise<void> {
    if (keepData) {
      if (paused) throw new Error('resume() the server before restart({ keepData: true })');
      // SHUTDOWN SAVE writes dump.rdb even with `--save ''`; the new process loads it.
      const exited = child === null ? Promise.resolve() : exitOf(child);
      await command(port, ['SHUTDOWN', 'SAVE']);
      await exited;
      child = null;
    } else {
      await kill('SIGKILL');
      await rm(join(dir, 'dump.rdb'), { force: true });
    }
    await start();
  }

  async function stop(): Promise<void> {
    await kill('SIGKILL');
  }

  t.teardown(async () => {
    await stop();
    removeExitHook();
    await rm(dir, { recursive: true, force: true });
  });

  // A port taken by someone else between freePort() and start() gets one more try elsewhere.
  for (let attempt = 1; ; attempt++) {
    port = await freePort();
    try {
      await start();
      break;
    } catch (err) {
      if (attempt === START_ATTEMPTS) {
        // Top-level callers crash here before tap runs teardowns.
        await rm(dir, { recursive: true, force: true });
        throw err;
      }
    }
  }

  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    stop,
    kill,
    restart,
    pause() {
      child?.kill('SIGSTOP');
      paused = true;
    },
    resume() {
      child?.kill('SIGCONT');
      paused = false;
    },
    async flushall() {
      const reply = await command(port, ['FLUSHALL']);
      if (reply !== '+OK\r\n') throw new Error(`FLUSHALL answered ${reply}`);
    },
  };
}

/** Resolves once `proc` has exited (at once if it already has) or failed to start. */
function exitOf(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    proc.once('exit', () => resolve());
    proc.once('error', () => resolve());
  });
}

/** A port that was free a moment ago; redis-server binds it with SO_REUSEADDR. */
async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  server.close();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  return address.port;
}

/**
 * Sends one command over a fresh connection and resolves with the raw reply ('' if the server
 * closes without one, as SHUTDOWN does). Only simple replies and bulk strings are read whole,
 * which is all this helper sends for. A raw socket keeps the helper independent of the client
 * under test.
 */
function command(port: number, args: string[]): Promise<string> {
  const payload = `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
  return new Promise((resolve, reject) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    let reply = Buffer.alloc(0);
    socket.setTimeout(COMMAND_DEADLINE_MS, () => socket.destroy(new Error(`${args[0]} timed out`)));
    socket.on('connect', () => socket.write(payload));
    socket.on('data', (chunk: Buffer) => {
      reply = Buffer.concat([reply, chunk]);
      if (isComplete(reply)) {
        socket.destroy();
        resolve(reply.toString('utf8'));
      }
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(reply.toString('utf8')));
  });
}

function isComplete(reply: Buffer): boolean {
  const headerEnd = reply.indexOf('\r\n');
  if (headerEnd === -1) return false;
  if (reply[0] !== 0x24 /* '$' */) return true;
  const length = Number(reply.subarray(1, headerEnd).toString('latin1'));
  return length < 0 || reply.length >= headerEnd + 2 + length + 2;
}
