/**
 * Processes of a benchmark run: free loopback ports, children that die with the run (and on exit),
 * and what the OS says about a process tree: CPU seconds (utime + stime of /proc/PID/stat, all
 * threads, children included) and resident memory (VmRSS).
 */
import { spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { readFile, readdir } from 'node:fs/promises';
import { createConnection } from 'node:net';
import { spawnProcess, type Proc } from '../../test/helpers/processes.js';

// One lifecycle for the children of tests and benchmarks (test/helpers/processes.ts): they die
// with the run, on exit and on the signals that end one (Ctrl-C, tap's timeout).
export { freePort } from '../../test/helpers/processes.js';
export { waitFor } from '../../test/helpers/wait.js';

export interface Child {
  readonly proc: ChildProcess;
  readonly pid: number;
  /** The shared process handle, for readyLine() and the like. */
  readonly handle: Proc;
  /** Resolves once the process has exited. */
  readonly exited: Promise<void>;
  /** Sends `signal` (SIGTERM by default), then SIGKILL after `graceMs`; resolves on exit. */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<void>;
}

/** A child process that is killed when the run ends, whatever way it ends. */
export function startChild(command: string, args: readonly string[], options: SpawnOptions = {}): Child {
  const handle = spawnProcess(command, args, options);
  if (handle.child.pid === undefined) throw new Error(`cannot start ${command}`);
  return {
    proc: handle.child,
    pid: handle.pid,
    handle,
    exited: handle.exited.then(() => undefined),
    async stop(signal = 'SIGTERM', graceMs = 3000) {
      await handle.stop(signal, graceMs);
    },
  };
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
