/**
 * A real redis-server for one test file: its own loopback port and temp dir, killed on teardown
 * and on process exit (including the SIGTERM that tap sends to a test that times out).
 */

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { command, freePort, spawnRedis, type RedisProcess, type Teardown } from './redis-process.js';

export interface RedisServer {
  readonly url: string;
  readonly port: number;
  /** Kills the server (SIGKILL, nothing saved); restart() starts it again. */
  stop(): Promise<void>;
  /** Sends `signal` and waits for the process to exit. */
  kill(signal: NodeJS.Signals): Promise<void>;
  /** Stops and starts again on the same port; `keepData` saves the dataset first and reloads it. */
  restart(opts: { keepData: boolean }): Promise<void>;
  /** Stops after saving the dataset (SHUTDOWN SAVE); up() starts it again on the same port with it. */
  down(): Promise<void>;
  up(): Promise<void>;
  /** SIGSTOP: connections stay open but nothing is answered, like a blocked Redis. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  flushall(): Promise<void>;
}

const START_ATTEMPTS = 3;

/**
 * The server's processes are killed by this helper's own teardown, registered before anything
 * the test starts on the server. A process of restart() or up() with a teardown of its own would
 * be killed first (tap runs teardowns last in, first out), before the gateways still using it
 * close: a gateway closing against a dead store waits out shutdown.graceMs (10 s by default) for
 * records it could not write. processes.ts still kills them when the run ends.
 */
const KILLED_BY_THE_HELPER: Teardown = { teardown: () => undefined };

export async function startRedisServer(t: Teardown): Promise<RedisServer> {
  const dir = await mkdtemp(join(tmpdir(), 'gw-redis-'));
  let port = 0;
  let server: RedisProcess | null = null;
  let paused = false;

  async function start(): Promise<void> {
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--logfile', 'redis.log'];
    // No snapshots and no AOF: only restart({ keepData: true }) writes the dataset, on purpose.
    args.push('--save', '', '--appendonly', 'no');
    server = await spawnRedis(KILLED_BY_THE_HELPER, { dir, port, logfile: 'redis.log', args });
    paused = false;
  }

  async function kill(signal: NodeJS.Signals): Promise<void> {
    const proc = server;
    if (proc === null) return;
    server = null;
    const exited = proc.kill(signal);
    // A stopped process acts on SIGTERM only once it runs again.
    if (paused && proc.pid !== undefined) process.kill(proc.pid, 'SIGCONT');
    paused = false;
    await exited;
  }

  function signal(name: NodeJS.Signals): void {
    if (server?.pid !== undefined) process.kill(server.pid, name);
  }

  async function down(): Promise<void> {
    if (paused) throw new Error('resume() the server before saving its dataset');
    // SHUTDOWN SAVE writes dump.rdb even with `--save ''`; the next process loads it. The server
    // closes the connection instead of answering.
    const exited = server?.exited ?? Promise.resolve();
    await command(port, ['SHUTDOWN', 'SAVE']).catch(() => undefined);
    await exited;
    server = null;
  }

  async function restart({ keepData }: { keepData: boolean }): Promise<void> {
    if (keepData) {
      await down();
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
    down,
    up: start,
    pause() {
      signal('SIGSTOP');
      paused = true;
    },
    resume() {
      signal('SIGCONT');
      paused = false;
    },
    async flushall() {
      const reply = await command(port, ['FLUSHALL']);
      if (reply !== 'OK') throw new Error(`FLUSHALL answered ${String(reply)}`);
    },
  };
}
