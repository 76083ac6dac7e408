/**
 * A gateway as its own process, started with the real CLI on a configuration file, so that tests
 * can send it SIGTERM or SIGKILL. Listens on free ports and reports them from its log.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';
import type { Teardown } from './gateway.js';

const CLI = fileURLToPath(new URL('../../src/cli.js', import.meta.url));

export interface GatewayProcess {
  url: string;
  adminUrl: string;
  /** Every JSON log line so far. */
  readonly logs: Record<string, unknown>[];
  /** Sends `signal`; resolves with the exit code once the process exited. */
  stop(signal: NodeJS.Signals): Promise<number | null>;
}

const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export async function startGatewayProcess(t: Teardown, settings: Record<string, unknown>): Promise<GatewayProcess> {
  const dir = await mkdtemp(join(tmpdir(), 'gw-process-'));
  const file = join(dir, 'gateway.yaml');
  await writeFile(file, stringify({ listen: { port: 0 }, admin: { port: 0 }, health: { intervalMs: 60_000 }, ...settings }));
  const child = spawn(process.execPath, [CLI, '--config', file], { stdio: ['ignore', 'pipe', 'inherit'] });
  running.add(child);
  const exited = once(child, 'exit').then(([code]) => {
    running.delete(child);
    return code as number | null;
  });
  t.teardown(async () => {
    if (running.has(child)) child.kill('SIGKILL');
    await exited;
  });
  const logs: Record<string, unknown>[] = [];
  const listening = new Promise<Record<string, unknown>>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const entry = JSON.parse(line) as Record<string, unknown>;
      logs.push(entry);
      if (entry['msg'] === 'gateway listening') resolve(entry);
    });
    void exited.then((code) => reject(new Error(`the gateway exited with ${code} before listening`)));
  });
  const ready = await listening;
  return {
    url: String(ready['mcp']),
    adminUrl: String(ready['admin']),
    logs,
    stop: (signal) => {
      child.kill(signal);
      return exited;
    },
  };
}
