/**
 * Processes of a benchmark run: free loopback ports, children that die with the run (and on exit),
 * and what the OS says about a process tree: CPU seconds (utime + stime of /proc/PID/stat, all
 * threads, children included) and resident memory (VmRSS).
 */
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { once } from 'node:events';
import { readFile, readdir } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { onExit } from 'signal-exit';

const running = new Set<ChildProcess>();
// On exit and on the signals that end a run (Ctrl-C, tap's timeout), nothing is left behind.
onExit(() => {
  for (const child of running) child.kill('SIGKILL');
});

/** A port that was free a moment ago. */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  server.close();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  return address.port;
}

export interface Child {
  readonly proc: ChildProcess;
  readonly pid: number;
  /** Resolves once the process has exited. */
  readonly exited: Promise<void>;
  /** Sends `signal` (SIGTERM by default), then SIGKILL after `graceMs`; resolves on exit. */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<void>;
}

/** A child process that is killed when the run ends, whatever way it ends. */
export function startChild(command: string, args: readonly string[], options: SpawnOptions = {}): Child {
  const proc = spawn(command, args, { stdio: 'ignore', ...options });
  if (proc.pid === undefined) throw new Error(`cannot start ${command}`);
  running.add(proc);
  const exited = new Promise<void>((resolve) => {
    if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
    proc.once('exit', () => resolve());
    proc.once('error', () => resolve());
  }).then(() => {
    running.delete(proc);
  });
  return {
    proc,
    pid: proc.pid,
    exited,
    async stop(signal = 'SIGTERM', graceMs = 3000) {
      if (!running.has(proc)) return;
      proc.kill(signal);
      const timer = setTimeout(() => proc.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Polls `check` every 20 ms until it is true; throws after `deadlineMs`, with the last error seen. */
export async function waitFor(what: string, deadlineMs: number, check: () => Promise<boolean> | boolean): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      if (await check()) return;
    } catch (err) {
      last = err;
    }
    await delay(20);
  }
  throw new Error(`${what}: not within ${deadlineMs} ms${last ? ` (last error: ${String(last)})` : ''}`);
}

/** True when something accepts TCP connections on 127.0.0.1:port. */
export function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** `pid` and all its descendants (Linux /proc/PID/task/TID/children). */
export async function processTree(pid: number): Promise<number[]> {
  const out = [pid];
  for (let i = 0; i < out.length; i++) {
    const current = out[i]!;
    const tasks = await readdir(`/proc/${current}/task`).catch(() => [] as string[]);
    for (const tid of tasks) {
      const children = await readFile(`/proc/${current}/task/${tid}/children`, 'utf8').catch(() => '');
      for (const child of children.split(' ')) if (child.trim() !== '') out.push(Number(child));
    }
  }
  return out;
}

let ticksPerSecond: number | undefined;
function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    const out = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
    const value = Number(out.stdout?.trim());
    ticksPerSecond = Number.isFinite(value) && value > 0 ? value : 100;
  }
  return ticksPerSecond;
}

/** utime + stime of one process, all threads, in seconds; 0 for a process that is not there. */
async function cpuSecondsOf(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  if (stat === undefined) return 0;
  // The command name (field 2) may hold spaces: fields are counted after its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields 14 and 15 of stat(5) are the 12th and 13th after the name.
  return (Number(fields[11]) + Number(fields[12])) / clockTicks();
}

/** CPU seconds used so far by `pid` and its descendants (nginx's workers, for instance). */
export async function treeCpuSeconds(pid: number): Promise<number> {
  let total = 0;
  for (const p of await processTree(pid)) total += await cpuSecondsOf(p);
  return total;
}

/** Resident memory of `pid` and its descendants, in bytes. */
export async function treeRssBytes(pid: number): Promise<number> {
  let total = 0;
  for (const p of await processTree(pid)) {
    const status = await readFile(`/proc/${p}/status`, 'utf8').catch(() => '');
    const kb = status.match(/^VmRSS:\s+(\d+) kB/m)?.[1];
    if (kb !== undefined) total += Number(kb) * 1024;
  }
  return total;
}

/** The hard limit on open files of this process (children inherit it). */
export async function openFilesLimit(): Promise<number> {
  const limits = await readFile('/proc/self/limits', 'utf8').catch(() => '');
  const hard = limits.match(/^Max open files\s+\S+\s+(\S+)/m)?.[1];
  return hard === undefined || hard === 'unlimited' ? Number.POSITIVE_INFINITY : Number(hard);
}

export function have(command: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' }).status === 0;
}
