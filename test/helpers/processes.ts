/**
 * Child processes of tests and benchmarks, one lifecycle for all of them: spawned, awaited until
 * ready, and killed on teardown and whenever this process ends, including the SIGTERM that tap
 * sends to a test file that times out and a Ctrl-C (signal-exit), so that no run leaves a
 * redis-server, replica or gateway behind holding a port.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { createInterface } from 'node:readline';
import { onExit } from 'signal-exit';

/** Anything with tap's teardown, so that the processes die with the test that started them. */
export interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Proc {
  readonly child: ChildProcess;
  readonly pid: number;
  /** How the process ended, once it has. */
  readonly exit: Exit | undefined;
  /** Resolves once the process has exited (or failed to start), whatever made it. */
  readonly exited: Promise<Exit>;
  /** The last few KB of stderr when it is piped, for error messages. */
  stderrTail(): string;
  /** Sends `signal` (SIGKILL by default) unless the process has exited; resolves on exit. */
  kill(signal?: NodeJS.Signals): Promise<Exit>;
  /** Sends `signal` (SIGTERM by default), then SIGKILL after `graceMs`; resolves on exit. */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<Exit>;
}

export interface ProcOptions extends SpawnOptions {
  /** Kills the process (SIGKILL) when this test ends; without it, only when the run ends. */
  t?: Teardown;
}

const running = new Set<ChildProcess>();
// SIGKILL: nothing of a test's processes needs saving, and nothing may outlive the run.
onExit(() => {
  for (const child of running) child.kill('SIGKILL');
});

const STDERR_TAIL_CHARS = 4_000;
const DEFAULT_GRACE_MS = 3_000;

/** Spawns `command`; stdio is 'ignore' unless `options` says otherwise. */
export function spawnProcess(command: string, args: readonly string[], options: ProcOptions = {}): Proc {
  const { t, ...spawnOptions } = options;
  const child = spawn(command, args, { stdio: 'ignore', ...spawnOptions });
  running.add(child);
  let exit: Exit | undefined;
  const exited = new Promise<Exit>((resolve) => {
    const done = (value: Exit): void => {
      running.delete(child);
      exit ??= value;
      resolve(exit);
    };
    child.once('exit', (code, signal) => done({ code, signal }));
    // ENOENT and the like: there is no process to wait for.
    child.once('error', () => done({ code: null, signal: null }));
  });
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-STDERR_TAIL_CHARS);
  });
  const kill = (signal: NodeJS.Signals = 'SIGKILL'): Promise<Exit> => {
    if (exit === undefined) child.kill(signal);
    return exited;
  };
  t?.teardown(() => kill());
  return {
    child,
    pid: child.pid ?? -1,
    get exit() {
      return exit;
    },
    exited,
    stderrTail: () => stderr,
    kill,
    async stop(signal = 'SIGTERM', graceMs = DEFAULT_GRACE_MS) {
      if (exit !== undefined) return exit;
      child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      const result = await exited;
      clearTimeout(timer);
      return result;
    },
  };
}

export interface Output extends Exit {
  stdout: string;
  stderr: string;
}

/** Everything a child with piped stdout and stderr writes, once it has exited and both are closed. */
export function outputOf(child: ChildProcess): Promise<Output> {
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr?.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

/**
 * How long a process may take to say it is ready before the test gives up: a limit on failure, not
 * an expected duration. A node process that loads the MCP SDK has been seen to take over 30 s on
 * the 2-core machine with a load average above 20.
 */
export const READY_DEADLINE_MS = 120_000;

/**
 * Resolves with the first stdout line that `match` maps to a value (stdout must be piped); rejects
 * if the process exits first, with its exit and stderr, or after `deadlineMs`; a `match` that throws
 * rejects with the line it choked on.
 */
export function readyLine<T>(proc: Proc, what: string, match: (line: string) => T | undefined, deadlineMs = READY_DEADLINE_MS): Promise<T> {
  const stdout = proc.child.stdout;
  if (!stdout) return Promise.reject(new Error(`${what}: stdout is not piped`));
  return new Promise<T>((resolve, reject) => {
    const lines = createInterface({ input: stdout });
    const timer = setTimeout(() => fail(new Error(`${what}: not ready within ${deadlineMs} ms${tail()}`)), deadlineMs);
    const tail = () => (proc.stderrTail() === '' ? '' : `: ${proc.stderrTail()}`);
    function fail(err: Error): void {
      clearTimeout(timer);
      lines.off('line', onLine);
      reject(err);
    }
    function onLine(line: string): void {
      let value: T | undefined;
      try {
        value = match(line);
      } catch (err) {
        fail(new Error(`${what}: said ${JSON.stringify(line)}`, { cause: err }));
        return;
      }
      if (value === undefined) return;
      clearTimeout(timer);
      lines.off('line', onLine);
      resolve(value);
    }
    lines.on('line', onLine);
    void proc.exited.then((exit) => fail(new Error(`${what}: exited (${exit.code ?? exit.signal}) before it was ready${tail()}`)));
  });
}

/** The JSON object on `line`, or undefined when it is not one. */
export function jsonLine(line: string): Record<string, unknown> | undefined {
  try {
    const value = JSON.parse(line) as unknown;
    return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

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
