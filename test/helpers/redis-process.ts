/**
 * What the Redis helpers (single server, cluster, sentinel) share: redis-server processes on free
 * loopback ports (through processes.ts, so killed on teardown and whenever the run ends), and one
 * command at a time over a raw socket, so that the helpers stay independent of the client under
 * test.
 */

import { readFile } from 'node:fs/promises';
import { createConnection } from 'node:net';
import { connect as connectTls, type ConnectionOptions } from 'node:tls';
import { join } from 'node:path';
import { READY_DEADLINE_MS, spawnProcess, type Teardown } from './processes.js';
import { waitFor } from './wait.js';

export type { Teardown } from './processes.js';
export { freePort } from './processes.js';
export { waitFor, POLL_INTERVAL_MS } from './wait.js';

export type Reply = string | number | null | Error | Reply[];

/** A command to a server that is up answers in microseconds; this only bounds a stuck one. */
const COMMAND_DEADLINE_MS = 5_000;

export interface RedisProcess {
  readonly port: number;
  readonly pid: number | undefined;
  /** Resolves once the process has exited, whatever made it exit. */
  readonly exited: Promise<void>;
  /** Sends `signal` (SIGKILL by default) and waits for the process to exit. */
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/**
 * Starts `redis-server` with `args` (which must bind `port`), logging to `<dir>/<logfile>`, and
 * waits until it answers PING as itself: another test file may have taken the port meanwhile.
 */
export async function spawnRedis(t: Teardown, opts: { dir: string; port: number; logfile: string; args: string[]; via?: Via }): Promise<RedisProcess> {
  const proc = spawnProcess('redis-server', opts.args, { cwd: opts.dir, t });
  const exited = proc.exited.then(() => undefined);
  const kill = async (signal: NodeJS.Signals = 'SIGKILL'): Promise<void> => {
    await proc.kill(signal);
  };
  // Done waiting once it answers PING (as itself, or as another process that holds the port) or exits.
  let ours = false;
  await waitFor(`redis-server on port ${opts.port} answering PING`, READY_DEADLINE_MS, async () => {
    if (proc.exit !== undefined) return true;
    if ((await command(opts.port, ['PING'], opts.via).catch(() => '')) !== 'PONG') return false;
    const info = await command(opts.port, ['INFO', 'server'], opts.via);
    ours = typeof info === 'string' && info.includes(`process_id:${proc.pid}\r\n`);
    return true;
  }).catch(() => undefined);
  if (ours) return { port: opts.port, pid: proc.pid, exited, kill };
  const log = await readFile(join(opts.dir, opts.logfile), 'utf8').catch(() => '(no log)');
  await kill();
  throw new Error(`redis-server on port ${opts.port} did not answer PING:\n${log}`);
}

/**
 * Starts run side by side: waits until every one has settled, then throws the first failure, so
 * that a retry never runs beside a start still in flight.
 */
export async function settled<T>(starts: Promise<T>[]): Promise<T[]> {
  const results = await Promise.allSettled(starts);
  const failed = results.find((r) => r.status === 'rejected');
  if (failed !== undefined) throw failed.reason;
  return results.map((r) => (r as PromiseFulfilledResult<T>).value);
}

/** How to reach a server that speaks TLS only, or that wants a login: what `command` sends first. */
export interface Via {
  readonly tls?: ConnectionOptions;
  /** User and password, sent as AUTH before the command. */
  readonly auth?: readonly [string, string];
}

/** Sends one command over a fresh connection; an error reply resolves as an Error, a closed connection rejects. */
export function command(port: number, args: string[], via: Via = {}): Promise<Reply> {
  const commands = via.auth === undefined ? [args] : [['AUTH', ...via.auth], args];
  const payload = commands.map((c) => `*${c.length}\r\n${c.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`).join('');
  return new Promise((resolve, reject) => {
    const socket = via.tls === undefined ? createConnection({ port, host: '127.0.0.1' }) : connectTls({ port, host: '127.0.0.1', ...via.tls });
    let buffer = Buffer.alloc(0);
    socket.setTimeout(COMMAND_DEADLINE_MS, () => socket.destroy(new Error(`${args[0]} timed out`)));
    socket.on(via.tls === undefined ? 'connect' : 'secureConnect', () => socket.write(payload));
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      const replies: Reply[] = [];
      for (let at = 0; replies.length < commands.length; ) {
        const parsed = parse(buffer, at);
        if (parsed === undefined) return;
        replies.push(parsed.value);
        at = parsed.end;
      }
      socket.destroy();
      // A refused login is the answer: the command was not run.
      resolve(replies[0] instanceof Error ? replies[0] : replies[replies.length - 1]!);
    });
    socket.on('error', reject);
    socket.on('close', () => reject(new Error(`${args[0]}: connection closed without a reply`)));
  });
}

/** One RESP2 reply from `at`, or undefined while it is incomplete. */
function parse(buffer: Buffer, at: number): { value: Reply; end: number } | undefined {
  const lineEnd = buffer.indexOf('\r\n', at);
  if (lineEnd === -1) return undefined;
  const line = buffer.subarray(at + 1, lineEnd).toString('utf8');
  const next = lineEnd + 2;
  switch (buffer[at]) {
    case 0x2b /* + */:
      return { value: line, end: next };
    case 0x2d /* - */:
      return { value: new Error(line), end: next };
    case 0x3a /* : */:
      return { value: Number(line), end: next };
    case 0x24 /* $ */: {
      const length = Number(line);
      if (length < 0) return { value: null, end: next };
      if (buffer.length < next + length + 2) return undefined;
      return { value: buffer.subarray(next, next + length).toString('utf8'), end: next + length + 2 };
    }
    case 0x2a /* * */: {
      const count = Number(line);
      if (count < 0) return { value: null, end: next };
      const items: Reply[] = [];
      let end = next;
      for (let i = 0; i < count; i++) {
        const item = parse(buffer, end);
        if (item === undefined) return undefined;
        items.push(item.value);
        end = item.end;
      }
      return { value: items, end };
    }
    default:
      throw new Error(`unexpected RESP type ${String.fromCharCode(buffer[at] ?? 0)}`);
  }
}

/** A flat [field, value, ...] reply (SENTINEL REPLICAS entries) as an object. */
export function fields(reply: Reply): Record<string, string> {
  const out: Record<string, string> = {};
  if (!Array.isArray(reply)) return out;
  for (let i = 0; i + 1 < reply.length; i += 2) out[String(reply[i])] = String(reply[i + 1]);
  return out;
}
