/**
 * The official MCP Python SDK as real processes: its client (test/python/client.py) and an
 * MCPServer replica (test/python/replica.py), run from the virtual environment that
 * scripts/ensure-python.mjs makes in .venv-test. Where that environment could not be made, the
 * reason is there for the test to skip with.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { jsonLine, READY_DEADLINE_MS, readyLine, spawnProcess, type Exit, type Teardown } from './processes.js';
import { bound } from './wait.js';

/** Tests compile to build/test/helpers/; the Python programs and the environment stay in the repository. */
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const PYTHON = `${ROOT}.venv-test/bin/python`;
const CLIENT_PY = `${ROOT}test/python/client.py`;
const REPLICA_PY = `${ROOT}test/python/replica.py`;

/**
 * The Python to run the SDK with, or why there is none. Makes the environment first where it is
 * missing (a test file run on its own, without `npm test`).
 */
export function pythonSdk(): { python: string } | { skip: string } {
  if (!existsSync(`${ROOT}.venv-test/installed.txt`)) {
    spawnSync(process.execPath, [`${ROOT}scripts/ensure-python.mjs`], { stdio: 'inherit' });
  }
  const unavailable = `${ROOT}.venv-test/unavailable`;
  if (existsSync(unavailable)) return { skip: `the MCP Python SDK is not installed: ${readFileSync(unavailable, 'utf8').trim()}` };
  if (!existsSync(PYTHON)) return { skip: 'the MCP Python SDK is not installed: node scripts/ensure-python.mjs made no .venv-test' };
  return { python: PYTHON };
}

export interface PythonReplica {
  readonly id: string;
  readonly url: string;
}

/** An MCPServer replica with the SDK's defaults (no event store: one GET stream per session, 409 to a second). */
export async function spawnPythonReplica(t: Teardown, python: string, id: string): Promise<PythonReplica> {
  const proc = spawnProcess(python, [REPLICA_PY, '--id', id], { stdio: ['ignore', 'pipe', 'pipe'], t });
  const listening = await readyLine(proc, `python replica ${id}`, (line) => {
    const entry = jsonLine(line);
    return entry?.['event'] === 'listening' ? String(entry['url']) : undefined;
  });
  proc.child.stdout?.resume();
  return { id, url: listening };
}

/** One line of what the client reports (test/python/client.py says which events there are). */
export type ClientEvent = Record<string, unknown> & { event: string };

export interface PythonClient {
  /** Everything the client reported so far, in order. */
  readonly events: ClientEvent[];
  /**
   * Resolves with the first event from index `from` on that `match` accepts, as soon as it is
   * reported; rejects, with what was reported, if the client exits first or after `deadlineMs`.
   */
  next(what: string, match: (event: ClientEvent) => boolean, from?: number, deadlineMs?: number): Promise<ClientEvent>;
  /** A tools/call through the client's session: its text, or an error naming what the client reported. */
  call(name: string, args?: Record<string, unknown>): Promise<string>;
  /** The SDK's log messages so far. */
  logMessages(): string[];
  /** Closes the session (DELETE) and waits for the client to exit. */
  quit(): Promise<Exit>;
}

/** How long the client's part of a test step may take on a loaded machine: a limit on failure. */
const STEP_DEADLINE_MS = bound(20_000);

/** Starts the client on `url` and resolves once it has initialized. */
export async function startPythonClient(t: Teardown, python: string, url: string, opts: { bindReset?: boolean } = {}): Promise<PythonClient> {
  const args = [CLIENT_PY, url, ...(opts.bindReset === true ? ['--bind-reset'] : [])];
  const proc = spawnProcess(python, args, { stdio: ['pipe', 'pipe', 'pipe'], t });
  const events: ClientEvent[] = [];
  const listeners = new Set<() => void>();
  createInterface({ input: proc.child.stdout! }).on('line', (line) => {
    const entry = jsonLine(line);
    if (typeof entry?.['event'] !== 'string') return;
    events.push(entry as ClientEvent);
    for (const listener of listeners) listener();
  });
  void proc.exited.then(() => {
    for (const listener of listeners) listener();
  });
  const next: PythonClient['next'] = (what, match, from = 0, deadlineMs = STEP_DEADLINE_MS) =>
    new Promise((resolve, reject) => {
      let seen = from;
      const timer = setTimeout(() => done(new Error(`the Python client: ${what}: not within ${deadlineMs} ms${report()}`)), deadlineMs);
      const report = () => `; it reported:\n${events.map((e) => JSON.stringify(e)).join('\n')}\n${proc.stderrTail()}`;
      function done(result: ClientEvent | Error): void {
        clearTimeout(timer);
        listeners.delete(check);
        if (result instanceof Error) reject(result);
        else resolve(result);
      }
      function check(): void {
        for (; seen < events.length; seen++) {
          if (match(events[seen]!)) return done(events[seen]!);
        }
        if (proc.exit !== undefined) done(new Error(`the Python client: ${what}: it exited (${proc.exit.code ?? proc.exit.signal}) first${report()}`));
      }
      listeners.add(check);
      check();
    });
  let calls = 0;
  // Its start includes importing the SDK, which takes seconds of CPU.
  await next('initialized', (e) => e.event === 'initialized', 0, READY_DEADLINE_MS);
  return {
    events,
    next,
    call: async (name, callArgs = {}) => {
      const id = ++calls;
      const from = events.length;
      proc.child.stdin!.write(`${JSON.stringify({ id, call: name, arguments: callArgs })}\n`);
      const answer = await next(`the answer to tools/call ${name}`, (e) => (e.event === 'result' || e.event === 'error') && e['id'] === id, from);
      if (answer.event === 'error' || answer['isError'] === true) throw new Error(`tools/call ${name} failed: ${JSON.stringify(answer)}`);
      return String(answer['text']);
    },
    logMessages: () => events.filter((e) => e.event === 'log').map((e) => String(e['message'])),
    quit: async () => {
      proc.child.stdin!.end(`${JSON.stringify({ quit: true })}\n`);
      return proc.stop('SIGTERM', STEP_DEADLINE_MS);
    },
  };
}
