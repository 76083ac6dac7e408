/**
 * Demo replicas as child processes, so that tests can kill one for real (SIGKILL: no goodbye, the
 * port refuses at once) and bring it back on the same port with none of its sessions.
 */
import { fileURLToPath } from 'node:url';
import { jsonLine, readyLine, spawnProcess, type Proc, type Teardown } from './processes.js';

/** Tests compile to build/test/, the demo's sources to build/demo/src/. */
const REPLICA_JS = fileURLToPath(new URL('../../demo/src/replica.js', import.meta.url));

export interface ReplicaProcessOptions {
  id: string;
  host?: string;
  /** 0 (the default) lets the replica pick; restarts reuse whatever it picked. */
  port?: number;
  maxEvents?: number;
  /** false: the replica keeps no event log (--no-event-store), like the SDK's default server. */
  eventStore?: boolean;
  /** Misbuilt on purpose (--renumber): event ids a counter that a Last-Event-ID sets back, nothing replayed. */
  renumber?: 'from-cursor' | 'from-1';
}

export interface ReplicaProcess {
  readonly id: string;
  readonly url: string;
  readonly port: number;
  /** Of the current process: changes on restart. */
  readonly pid: number;
  /** How the current process ended, once it has. */
  readonly exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  /** Resolves once the process has exited (at once if it already had). */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Kills the process if it runs and starts a new one on the same port. */
  restart(): Promise<void>;
}

export type { Teardown } from './processes.js';

export async function spawnReplicas(
  t: Teardown,
  count: number,
  opts: { idPrefix?: string } & Omit<ReplicaProcessOptions, 'id' | 'port'> = {},
): Promise<ReplicaProcess[]> {
  const { idPrefix = 'r', ...rest } = opts;
  return Promise.all(Array.from({ length: count }, (_, i) => spawnReplica(t, { ...rest, id: `${idPrefix}${i + 1}` })));
}

export async function spawnReplica(t: Teardown, opts: ReplicaProcessOptions): Promise<ReplicaProcess> {
  let current = await launch(t, { ...opts, port: opts.port ?? 0 });
  const { url, port } = current.listening;
  const kill = async (signal: NodeJS.Signals = 'SIGKILL'): Promise<void> => {
    await current.proc.kill(signal);
  };
  return {
    id: opts.id,
    url,
    port,
    get pid() {
      return current.listening.pid;
    },
    get exit() {
      return current.proc.exit;
    },
    kill,
    restart: async () => {
      await kill();
      current = await launch(t, { ...opts, port });
    },
  };
}

interface Launched {
  proc: Proc;
  listening: { id: string; url: string; port: number; pid: number };
}

async function launch(t: Teardown, opts: ReplicaProcessOptions & { port: number }): Promise<Launched> {
  const args = [REPLICA_JS, '--id', opts.id, '--port', String(opts.port)];
  if (opts.host !== undefined) args.push('--host', opts.host);
  if (opts.maxEvents !== undefined) args.push('--max-events', String(opts.maxEvents));
  if (opts.eventStore === false) args.push('--no-event-store');
  if (opts.renumber !== undefined) args.push('--renumber', opts.renumber);
  const proc = spawnProcess(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], t });
  try {
    const listening = await readyLine(proc, `replica ${opts.id}`, (line) => {
      const entry = jsonLine(line);
      if (entry?.['event'] !== 'listening') throw new Error('not a listening line');
      return { id: String(entry['id']), url: String(entry['url']), port: Number(entry['port']), pid: Number(entry['pid']) };
    });
    // The rest of its output is drained, never read.
    proc.child.stdout?.resume();
    return { proc, listening };
  } catch (err) {
    await proc.kill();
    throw err;
  }
}
