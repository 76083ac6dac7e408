/**
 * A gateway as its own process, started with the real CLI on a configuration file, so that tests
 * can send it SIGTERM or SIGKILL. Listens on free ports and reports them from its log.
 */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import { jsonLine, readyLine, spawnProcess, type Exit, type Teardown } from './processes.js';

const CLI = fileURLToPath(new URL('../../src/cli.js', import.meta.url));

export interface GatewayProcess {
  url: string;
  adminUrl: string;
  /** Every JSON log line so far. */
  readonly logs: Record<string, unknown>[];
  /** Every stdout line so far, as written (JSON or not). */
  readonly lines: string[];
  /** The configuration file it runs on (rewrite it, then send SIGHUP). */
  readonly file: string;
  /** How the process ended, once it has (a crash shows here). */
  readonly exit: Exit | undefined;
  /** Sends `signal` and returns at once (SIGHUP: reload). */
  signal(signal: NodeJS.Signals): void;
  /** Sends `signal`; resolves with the exit code once the process exited. */
  stop(signal: NodeJS.Signals): Promise<number | null>;
}

/** `preload`: a module the process imports before the CLI (node --import), as a test's own hook into it. */
export async function startGatewayProcess(t: Teardown, settings: Record<string, unknown>, options: { preload?: string } = {}): Promise<GatewayProcess> {
  const dir = await mkdtemp(join(tmpdir(), 'gw-process-'));
  const file = join(dir, 'gateway.yaml');
  await writeFile(file, stringify({ listen: { port: 0 }, admin: { port: 0 }, health: { intervalMs: 60_000 }, ...settings }));
  const preload = options.preload === undefined ? [] : ['--import', options.preload];
  const proc = spawnProcess(process.execPath, [...preload, CLI, '--config', file], { stdio: ['ignore', 'pipe', 'inherit'], t });
  const logs: Record<string, unknown>[] = [];
  const lines: string[] = [];
  createInterface({ input: proc.child.stdout! }).on('line', (line) => {
    lines.push(line);
    const entry = jsonLine(line);
    if (entry !== undefined) logs.push(entry);
  });
  const ready = await readyLine(proc, 'the gateway', (line) => {
    const entry = jsonLine(line);
    return entry?.['msg'] === 'gateway listening' ? entry : undefined;
  });
  return {
    url: String(ready['mcp']),
    adminUrl: String(ready['admin']),
    logs,
    lines,
    file,
    get exit() {
      return proc.exit;
    },
    signal: (signal) => {
      proc.child.kill(signal);
    },
    stop: async (signal) => (await proc.kill(signal)).code,
  };
}
