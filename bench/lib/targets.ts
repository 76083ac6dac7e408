/**
 * What a benchmark runs against, every piece its own process on loopback, started from nothing and
 * stopped at the end: the upstreams (the fast bench upstream, the demo SDK replica), Redis, and the
 * proxies in front of them (the gateway through its real CLI, nginx, haproxy) from the templates in
 * bench/templates/.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { stringify } from 'yaml';
import { jsonLine, readyLine } from '../../test/helpers/processes.js';
import { accepts, freePort, have, startChild, waitFor, type Child } from './procs.js';

const BUILD = new URL('../../', import.meta.url);
const GATEWAY_CLI = fileURLToPath(new URL('src/cli.js', BUILD));
const REPLICA_CLI = fileURLToPath(new URL('demo/src/replica.js', BUILD));
const UPSTREAM_CLI = fileURLToPath(new URL('bench/upstream.js', BUILD));
const FLOOR_CLI = fileURLToPath(new URL('bench/floor.js', BUILD));
/** Templates live beside the sources: build/bench/lib/ -> bench/templates/. */
const TEMPLATES = new URL('../../../bench/templates/', import.meta.url);
/**
 * How long a process of the run may take to be ready: a gateway loads its modules in about a second
 * on an idle machine, and took 20 s on a shared one under a load average of 20.
 */
const START_DEADLINE_MS = 60_000;

export type ProxyKind = 'direct' | 'nginx' | 'haproxy' | 'node-floor' | GatewayKind;
/**
 * The gateway with its journal off (as before CONTRACT.md §8: the owner replays), and with it on
 * (every event journaled in Redis, continuations served from the journal), in the same run.
 */
export type GatewayKind = 'gateway-memory' | 'gateway-redis' | 'gateway-redis-journal';
export const PROXY_KINDS: readonly ProxyKind[] = ['direct', 'nginx', 'haproxy', 'node-floor', 'gateway-memory', 'gateway-redis', 'gateway-redis-journal'];
/** The targets that need the Redis server of the run. */
export const REDIS_KINDS: readonly ProxyKind[] = ['gateway-redis', 'gateway-redis-journal'];

/**
 * A target's name: a proxy kind, or a gateway variant `gateway-redis+NAME` (--variant), run in the
 * same rounds as the plain gateway so that A/B ratios come from one run.
 */
export type TargetName = ProxyKind | `${GatewayKind}+${string}`;

/** What a gateway variant changes: another checkout's build, and configuration merged over the bench's. */
export interface Variant {
  /** A checkout whose build/src/cli.js runs instead of this one's (built with npm run build:test). */
  checkout?: string;
  config?: Record<string, unknown>;
  /** Node.js options for the gateway's process, before its script (e.g. ["--max-semi-space-size=32"]). */
  node?: string[];
}

/** The proxy kind a target name runs. */
export function kindOf(name: TargetName): ProxyKind {
  return name.split('+', 1)[0] as ProxyKind;
}

/** Where a replica listens: all a proxy in front of it needs. */
export interface UpstreamAddress {
  /** The MCP endpoint, http://127.0.0.1:PORT/mcp */
  readonly url: string;
  readonly port: number;
}

export interface Upstream extends UpstreamAddress {
  readonly kind: 'fast' | 'sdk';
  readonly child: Child;
}

export interface Target {
  readonly kind: TargetName;
  /** The MCP endpoint clients use. */
  readonly url: string;
  /** The proxy process (its descendants count too); undefined for direct. */
  readonly pid: number | undefined;
  /** The gateway's Prometheus endpoint. */
  readonly metricsUrl?: string;
  /** With --gateway-heap-snapshots: the folder a heap snapshot of the gateway lands in on SIGUSR2. */
  readonly heapSnapshotDir?: string;
  stop(): Promise<void>;
}

export interface RedisServer {
  readonly url: string;
  readonly pid: number;
  /** `INFO commandstats` as calls per command. */
  commandStats(): Promise<Map<string, number>>;
  flushall(): Promise<void>;
  stop(): Promise<void>;
}

/** Reads one JSON line from a child's stdout (the replicas print one when they listen). */
async function firstJsonLine(child: Child, what: string): Promise<Record<string, unknown>> {
  const line = await readyLine(child.handle, what, (text) => {
    const parsed = jsonLine(text);
    if (parsed === undefined) throw new Error('not a JSON object');
    return parsed;
  }, START_DEADLINE_MS);
  // The rest of its output is drained, never read.
  child.proc.stdout?.resume();
  return line;
}

export async function startFastUpstream(workers = 1): Promise<Upstream> {
  const port = workers > 1 ? await freePort() : 0;
  const child = startChild(process.execPath, [UPSTREAM_CLI, '--port', String(port), '--workers', String(workers)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await firstJsonLine(child, 'bench upstream');
  const actual = Number(line['port']);
  return { kind: 'fast', url: `http://127.0.0.1:${actual}/mcp`, port: actual, child };
}

export async function startSdkReplica(id = 'sdk1'): Promise<Upstream> {
  const child = startChild(process.execPath, [REPLICA_CLI, '--id', id, '--port', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await firstJsonLine(child, 'demo replica');
  const port = Number(line['port']);
  return { kind: 'sdk', url: String(line['url']), port, child };
}

export async function startRedis(dir: string): Promise<RedisServer> {
  const port = await freePort();
  const child = startChild('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no', '--logfile', 'redis.log'], { cwd: dir });
  const url = `redis://127.0.0.1:${port}`;
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => 50 });
  // Refused connections while the server starts are expected; the wait below reports a real failure.
  client.on('error', () => undefined);
  await waitFor('redis-server', START_DEADLINE_MS, async () => {
    if (client.status !== 'ready') await client.connect().catch(() => undefined);
    return (await client.ping()) === 'PONG';
  });
  return {
    url,
    pid: child.pid,
    async commandStats() {
      const info = await client.info('commandstats');
      const calls = new Map<string, number>();
      for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(match[1]!, Number(match[2]));
      return calls;
    },
    async flushall() {
      await client.flushall();
    },
    async stop() {
      client.disconnect();
      await child.stop('SIGKILL');
    },
  };
}

export interface ProxyOptions {
  /** Scratch directory of the run: configurations, pid and log files. */
  dir: string;
  upstreams: readonly UpstreamAddress[];
  redisUrl?: string;
  /** Gateway log level; access lines cost CPU, and nginx and haproxy run without access logs. */
  gatewayLog: string;
  /** Connections the gateway may hold per replica: each open SSE stream holds one. */
  gatewayConnections: number;
  /** The open-files limit the proxies run under (finite). */
  openFiles: number;
  /** When set, each gateway (and the node floor) writes a V8 CPU profile (.cpuprofile) here as it stops. */
  gatewayCpuProfDir?: string;
  /** When set, each gateway writes a V8 heap snapshot in a folder of its own here on SIGUSR2 (idle takes two). */
  gatewayHeapSnapshotDir?: string;
  /** Gateway variants by name (the part after '+' in a target name). */
  variants?: ReadonlyMap<string, Variant>;
}

export async function startTarget(name: TargetName, opts: ProxyOptions): Promise<Target> {
  const kind = kindOf(name);
  switch (kind) {
    case 'direct': {
      const first = opts.upstreams[0];
      if (!first) throw new Error('no upstream');
      return { kind, url: first.url, pid: undefined, stop: async () => undefined };
    }
    case 'nginx':
      return startNginx(opts);
    case 'haproxy':
      return startHaproxy(opts);
    case 'node-floor':
      return startFloor(opts);
    case 'gateway-memory':
    case 'gateway-redis':
    case 'gateway-redis-journal': {
      const variantName = name.slice(kind.length + 1);
      const variant = variantName === '' ? {} : opts.variants?.get(variantName);
      if (variant === undefined) throw new Error(`no variant named ${variantName}`);
      return startGateway(kind, name, variant, opts);
    }
  }
}

/** `over` merged into `base`, objects key by key, anything else replaced. */
function merged(base: Record<string, unknown>, over: Record<string, unknown>): Record<string, unknown> {
  const out = { ...base };
  for (const [key, value] of Object.entries(over)) {
    const into = out[key];
    const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
    out[key] = isObject(into) && isObject(value) ? merged(into, value) : value;
  }
  return out;
}

function scratch(opts: ProxyOptions, name: string): Promise<string> {
  return mkdtemp(join(opts.dir, `${name}-`));
}

async function fill(template: string, values: Record<string, string>): Promise<string> {
  let text = await readFile(new URL(template, TEMPLATES), 'utf8');
  for (const [key, value] of Object.entries(values)) text = text.replaceAll(`{{${key}}}`, value);
  const left = text.match(/\{\{[A-Z_]+\}\}/);
  if (left) throw new Error(`${template}: ${left[0]} has no value`);
  return text;
}

async function tail(file: string): Promise<string> {
  const text = await readFile(file, 'utf8').catch(() => '(no log)');
  return text.split('\n').slice(-20).join('\n');
}

async function startGateway(kind: GatewayKind, name: TargetName, variant: Variant, opts: ProxyOptions): Promise<Target> {
  const dir = await scratch(opts, name.replace('+', '-'));
  const [port, adminPort] = [await freePort(), await freePort()];
  const redis = REDIS_KINDS.includes(kind);
  const config = merged({
    listen: { host: '127.0.0.1', port },
    admin: { host: '127.0.0.1', port: adminPort },
    path: '/mcp',
    store: redis ? { type: 'redis', url: opts.redisUrl } : { type: 'memory' },
    replicas: opts.upstreams.map((u, i) => ({ id: `u${i + 1}`, url: u.url })),
    // The stream budget (upstream.maxStreams) raised with the connections for thousands of streams.
    upstream: { connections: 1024, maxStreams: Math.max(4096, opts.gatewayConnections) },
    resumption: { journal: { enabled: kind === 'gateway-redis-journal' } },
    log: { level: opts.gatewayLog },
  }, variant.config ?? {});
  if (redis && !opts.redisUrl) throw new Error(`${kind} needs Redis`);
  const file = join(dir, 'gateway.yaml');
  await writeFile(file, stringify(config));
  const logFile = join(dir, 'gateway.log');
  const log = createWriteStream(logFile);
  await new Promise((resolve) => log.once('open', resolve));
  // One folder per gateway run: each of its processes (workers too) writes its own profile there.
  const profile = opts.gatewayCpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', join(opts.gatewayCpuProfDir, `${name}-${Date.now()}`)] : [];
  const heapSnapshotDir = opts.gatewayHeapSnapshotDir === undefined ? undefined : join(opts.gatewayHeapSnapshotDir, `${name}-${Date.now()}`);
  if (heapSnapshotDir !== undefined) {
    await mkdir(heapSnapshotDir, { recursive: true });
    profile.push('--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${heapSnapshotDir}`);
  }
  const cli = variant.checkout === undefined ? GATEWAY_CLI : resolve(variant.checkout, 'build/src/cli.js');
  const child = startChild(process.execPath, [...(variant.node ?? []), ...profile, cli, '--config', file], { stdio: ['ignore', log, log] });
  const readyz = `http://127.0.0.1:${adminPort}/readyz`;
  try {
    await waitFor(`${name} ready`, START_DEADLINE_MS, async () => {
      if (child.proc.exitCode !== null) throw new Error(`exited with ${child.proc.exitCode}`);
      return (await fetch(readyz)).status === 200;
    });
  } catch (err) {
    await child.stop('SIGKILL');
    throw new Error(`${(err as Error).message}\n${await tail(logFile)}`);
  }
  return {
    kind: name,
    url: `http://127.0.0.1:${port}/mcp`,
    pid: child.pid,
    metricsUrl: `http://127.0.0.1:${adminPort}/metrics`,
    ...(heapSnapshotDir !== undefined ? { heapSnapshotDir } : {}),
    async stop() {
      await child.stop('SIGTERM', 5000);
      log.end();
    },
  };
}

async function startNginx(opts: ProxyOptions): Promise<Target> {
  const dir = await scratch(opts, 'nginx');
  for (const sub of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) await mkdir(join(dir, sub));
  const port = await freePort();
  // Workers of a master that runs as root would become nobody; the brief is: the current user.
  const user = process.getuid?.() === 0 ? `user ${userInfo().username};` : '';
  const conf = await fill('nginx.conf', {
    DIR: dir,
    USER: user,
    NOFILE: String(opts.openFiles),
    PORT: String(port),
    SERVERS: opts.upstreams.map((u) => `server 127.0.0.1:${u.port};`).join('\n    '),
  });
  const file = join(dir, 'nginx.conf');
  await writeFile(file, conf);
  const child = startChild('nginx', ['-p', dir, '-c', file], { cwd: dir });
  try {
    await waitFor('nginx listening', START_DEADLINE_MS, async () => {
      if (child.proc.exitCode !== null) throw new Error(`exited with ${child.proc.exitCode}`);
      return accepts(port);
    });
  } catch (err) {
    await child.stop('SIGKILL');
    throw new Error(`${(err as Error).message}\n${await tail(join(dir, 'error.log'))}`);
  }
  return { kind: 'nginx', url: `http://127.0.0.1:${port}/mcp`, pid: child.pid, stop: () => child.stop('SIGQUIT', 3000) };
}

/** bench/floor.ts: a bare node:http + undici proxy, the floor under the gateway's own work. */
async function startFloor(opts: ProxyOptions): Promise<Target> {
  const first = opts.upstreams[0];
  if (!first) throw new Error('no upstream');
  const profile = opts.gatewayCpuProfDir ? ['--cpu-prof', '--cpu-prof-dir', opts.gatewayCpuProfDir, '--cpu-prof-name', `node-floor-${Date.now()}.cpuprofile`] : [];
  const child = startChild(process.execPath, [...profile, FLOOR_CLI, '--upstream', first.url], { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await firstJsonLine(child, 'node floor proxy');
  return { kind: 'node-floor', url: `http://127.0.0.1:${Number(line['port'])}/mcp`, pid: child.pid, stop: () => child.stop('SIGTERM', 3000) };
}

async function startHaproxy(opts: ProxyOptions): Promise<Target> {
  const dir = await scratch(opts, 'haproxy');
  const port = await freePort();
  const conf = await fill('haproxy.cfg', {
    DIR: dir,
    PORT: String(port),
    // Each proxied connection holds two descriptors.
    MAXCONN: String(Math.floor((opts.openFiles - 100) / 2)),
    SERVERS: opts.upstreams.map((u, i) => `server u${i + 1} 127.0.0.1:${u.port}`).join('\n  '),
  });
  const file = join(dir, 'haproxy.cfg');
  await writeFile(file, conf);
  const logFile = join(dir, 'haproxy.log');
  const log = createWriteStream(logFile);
  await new Promise((resolve) => log.once('open', resolve));
  // -db: foreground, so that the pid we hold is haproxy's; -W would add a master process.
  const child = startChild('haproxy', ['-db', '-f', file], { cwd: dir, stdio: ['ignore', log, log] });
  try {
    await waitFor('haproxy listening', START_DEADLINE_MS, async () => {
      if (child.proc.exitCode !== null) throw new Error(`exited with ${child.proc.exitCode}`);
      return accepts(port);
    });
  } catch (err) {
    await child.stop('SIGKILL');
    throw new Error(`${(err as Error).message}\n${await tail(logFile)}`);
  }
  return {
    kind: 'haproxy',
    url: `http://127.0.0.1:${port}/mcp`,
    pid: child.pid,
    async stop() {
      await child.stop('SIGUSR1', 3000);
      log.end();
    },
  };
}

export interface Tools {
  redis: boolean;
  nginx: boolean;
  haproxy: boolean;
  /** Why a tool is missing, one line each. */
  notes: string[];
}

/**
 * Makes sure the tools the run needs are on the PATH: installs the missing ones with apt-get when
 * this runs as root, otherwise says which baselines are skipped and how to get them.
 */
export function ensureTools(need: { redis: boolean; nginx: boolean; haproxy: boolean }, log: (line: string) => void): Tools {
  const packages: Record<'redis' | 'nginx' | 'haproxy', { bin: string; pkg: string[] }> = {
    redis: { bin: 'redis-server', pkg: ['redis-server'] },
    nginx: { bin: 'nginx', pkg: ['nginx-light', 'nginx'] },
    haproxy: { bin: 'haproxy', pkg: ['haproxy'] },
  };
  const wanted = (Object.keys(packages) as (keyof typeof packages)[]).filter((k) => need[k] && !have(packages[k].bin));
  const root = process.getuid?.() === 0;
  const notes: string[] = [];
  if (wanted.length > 0 && root && have('apt-get')) {
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    log(`installing ${wanted.map((k) => packages[k].bin).join(', ')} with apt-get`);
    spawnSync('apt-get', ['update', '-qq'], { stdio: 'ignore', env });
    for (const k of wanted) {
      // The first package name that the archive has (nginx-light is gone from newer Debian).
      for (const pkg of packages[k].pkg) {
        const known = spawnSync('apt-cache', ['show', pkg], { stdio: 'ignore' }).status === 0;
        if (!known) continue;
        try {
          execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', pkg], { stdio: 'ignore', env });
        } catch {
          // Reported below if the binary is still missing.
        }
        break;
      }
    }
  }
  const result = { redis: false, nginx: false, haproxy: false, notes };
  for (const k of Object.keys(packages) as (keyof typeof packages)[]) {
    result[k] = have(packages[k].bin);
    if (need[k] && !result[k]) {
      notes.push(
        root
          ? `${packages[k].bin} is missing and apt-get could not install it: its rows are skipped`
          : `${packages[k].bin} is missing (not root, nothing installed): its rows are skipped; install ${packages[k].pkg[0]} to get them`,
      );
    }
  }
  return result;
}

/** Removes the run's scratch directory. */
export async function removeDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
}

export async function makeScratch(): Promise<string> {
  return mkdtemp(join(tmpdir(), 'gw-bench-'));
}
