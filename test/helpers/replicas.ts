/**
 * Demo replicas as child processes, so that tests can kill one for real (SIGKILL: no goodbye, the
 * port refuses at once) and bring it back on the same port with none of its sessions.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/** Tests compile to build/test/, sources to build/src/. */
const REPLICA_JS = fileURLToPath(new URL('../../src/demo/replica.js', import.meta.url));

export interface ReplicaProcessOptions {
  id: string;
  host?: string;
  /** 0 (the default) lets the replica pick; restarts reuse whatever it picked. */
  port?: number;
  maxEvents?: number;
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

/** What we need of tap's `t`; any test framework with a teardown hook will do. */
export interface Teardown {
  teardown(fn: () => unknown): void;
}

const running = new Set<ChildProcess>();
// A crashed test run must not leave replicas holding ports.
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export async function spawnReplicas(
  t: Teardown,
  count: number,
  opts: { idPrefix?: string; host?: string; maxEvents?: number } = {},
): Promise<ReplicaProcess[]> {
  const { idPrefix = 'r', ...rest } = opts;
  return Promise.all(Array.from({ length: count }, (_, i) => spawnReplica(t, { ...rest, id: `${idPrefix}${i + 1}` })));
}

export async function spawnReplica(t: Teardown, opts: ReplicaProcessOptions): Promise<ReplicaProcess> {
  let current = await launch({ ...opts, port: opts.port ?? 0 });
  const { url, port } = current.listening;

  const kill = async (signal: NodeJS.Signals = 'SIGKILL'): Promise<void> => {
    if (current.exit === undefined) current.child.kill(signal);
    await current.exited;
  };
  t.teardown(() => kill());

  return {
    id: opts.id,
    url,
    port,
    get pid() {
      return current.listening.pid;
    },
    get exit() {
      return current.exit;
    },
    kill,
    restart: async () => {
      await kill();
      current = await launch({ ...opts, port });
    },
  };
}

interface Launched {
  child: ChildProcess;
  listening: { id: string; url: string; port: number; pid: number };
  exit: ReplicaProcess['exit'];
  exited: Promise<void>;
}

async function launch(opts: ReplicaProcessOptions & { port: number }): Promise<Launched> {
  const args = [REPLICA_JS, '--id', opts.id, '--port', String(opts.port)];
  if (opts.host !== undefined) args.push('--host', opts.host);
  if (opts.maxEvents !== undefined) args.push('--max-events', String(opts.maxEvents));
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(child);

  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-4000);
  });
  const launched = { child, exit: undefined } as Launched;
  launched.exited = new Promise((resolve) => {
    child.once('exit', (code, signal) => {
      running.delete(child);
      launched.exit = { code, signal };
      resolve();
    });
  });

  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  const firstLine = await new Promise<string>((resolve, reject) => {
    lines.once('line', resolve);
    child.once('error', reject);
    void launched.exited.then(() =>
      reject(new Error(`replica ${opts.id} exited (${launched.exit?.code ?? launched.exit?.signal}) before listening: ${stderr}`)),
    );
  });
  try {
    const listening = JSON.parse(firstLine) as Launched['listening'] & { event: string };
    if (listening.event !== 'listening') throw new Error('not a listening line');
    launched.listening = { id: listening.id, url: listening.url, port: listening.port, pid: listening.pid };
    return launched;
  } catch (err) {
    child.kill('SIGKILL');
    throw new Error(`replica ${opts.id} said ${JSON.stringify(firstLine)}`, { cause: err });
  }
}
