/**
 * A real Redis Cluster for one test file: redis-server in cluster mode on free loopback ports (the
 * bus port chosen too, so that port + 10000 need not be free), joined by `redis-cli --cluster
 * create`, and ready once every node says cluster_state:ok and knows all the others. Three masters,
 * each with a replica on request (`replicas: true`): then a master can be SIGKILLed and its
 * replica's promotion awaited. Killed on teardown and on process exit.
 */

import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { command, freePort, settled, spawnRedis, type RedisProcess, type Teardown } from './redis-process.js';
import { waitFor } from './wait.js';

export interface RedisCluster {
  /** redis://127.0.0.1:<port> of each node, masters and replicas: seeds for a client. */
  readonly urls: readonly string[];
  readonly ports: readonly number[];
  /** The ports of the nodes that are masters now, as a surviving node sees them. */
  masters(): Promise<number[]>;
  /** FLUSHALL on every master. */
  flushall(): Promise<void>;
  /** SIGKILLs node `i` (nothing saved). Without replicas, nothing takes over its slots. */
  kill(i: number): Promise<void>;
  /** The port of the master that serves the slot of `key` now. */
  masterOf(key: string): Promise<number>;
  /** SIGKILLs the master on `port` (nothing saved) and resolves once it has exited. */
  killMaster(port: number): Promise<void>;
  /**
   * Resolves, with the new master's port, once a surviving node says that the master on `oldPort`
   * failed, that its replica took over every slot it served, and that the cluster is ok; and the
   * new master answers ROLE master.
   */
  promoted(oldPort: number): Promise<number>;
}

export interface ClusterOptions {
  /** One replica per master (six nodes), so that a master lost is replaced. */
  replicas?: boolean;
}

const MASTERS = 3;
const START_ATTEMPTS = 3;
/**
 * How long a master may be unreachable before its replica takes over (cluster-node-timeout): an
 * operator's short setting. Without replicas nothing takes over, and a longer one keeps a loaded
 * machine from marking a node failed.
 */
const NODE_TIMEOUT_MS = { replicas: 1500, alone: 2000 };
/** `--cluster create` gossips the configuration to every node: well under a few seconds on loopback. */
const READY_DEADLINE_MS = 15_000;
const CLI_DEADLINE_MS = 20_000;
/** Node timeout, the replica's election delay (500 ms plus its rank) and the vote: a few seconds; this only bounds a failure. */
const PROMOTION_DEADLINE_MS = 20_000;

const run = promisify(execFile);

/** One line of CLUSTER NODES. */
interface NodeLine {
  readonly port: number;
  readonly flags: readonly string[];
  readonly slots: readonly string[];
}

export async function startRedisCluster(t: Teardown, opts: ClusterOptions = {}): Promise<RedisCluster> {
  const dir = await mkdtemp(join(tmpdir(), 'gw-cluster-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const count = opts.replicas ? 2 * MASTERS : MASTERS;
  const nodes = await startNodes(t, dir, count, opts.replicas ? NODE_TIMEOUT_MS.replicas : NODE_TIMEOUT_MS.alone);
  const ports = nodes.map((node) => node.port);
  const byPort = new Map(nodes.map((node) => [node.port, node]));
  const addresses = ports.map((port) => `127.0.0.1:${port}`);
  const replicas = opts.replicas ? '1' : '0';
  await run('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', replicas, '--cluster-yes'], { timeout: CLI_DEADLINE_MS });
  await waitFor('cluster_state:ok on every node, and every replica in sync', READY_DEADLINE_MS, async () => {
    for (const port of ports) {
      const info = await command(port, ['CLUSTER', 'INFO']);
      if (typeof info !== 'string' || !info.includes('cluster_state:ok') || !info.includes(`cluster_known_nodes:${ports.length}`)) return false;
      const replication = await command(port, ['INFO', 'replication']);
      if (typeof replication !== 'string') return false;
      if (replication.includes('role:slave') && !replication.includes('master_link_status:up')) return false;
    }
    return true;
  });

  const dead = new Set<number>();
  /** Slots each killed master served, taken from the cluster before the kill. */
  const served = new Map<number, readonly string[]>();
  const survivor = () => ports.find((port) => !dead.has(port))!;
  /** CLUSTER NODES as a node still running sees it. */
  const view = async (): Promise<NodeLine[]> => {
    const reply = await command(survivor(), ['CLUSTER', 'NODES']);
    if (typeof reply !== 'string') throw new Error(`CLUSTER NODES answered ${String(reply)}`);
    return parseNodes(reply);
  };
  const masters = async () => (await view()).filter((n) => n.flags.includes('master') && !n.flags.includes('fail')).map((n) => n.port);

  return {
    urls: ports.map((port) => `redis://127.0.0.1:${port}`),
    ports,
    masters,
    async flushall() {
      for (const port of await masters()) {
        const reply = await command(port, ['FLUSHALL']);
        if (reply !== 'OK') throw new Error(`FLUSHALL on ${port} answered ${String(reply)}`);
      }
    },
    async kill(i: number) {
      const node = nodes[i];
      if (node === undefined) return;
      dead.add(node.port);
      await node.kill();
    },
    async masterOf(key: string) {
      const slot = await command(survivor(), ['CLUSTER', 'KEYSLOT', key]);
      if (typeof slot !== 'number') throw new Error(`CLUSTER KEYSLOT answered ${String(slot)}`);
      const owner = (await view()).find((n) => n.flags.includes('master') && !n.flags.includes('fail') && n.slots.some((range) => inRange(range, slot)));
      if (owner === undefined) throw new Error(`no master serves slot ${slot}`);
      return owner.port;
    },
    async killMaster(port: number) {
      const node = byPort.get(port);
      const line = (await view()).find((n) => n.port === port);
      if (node === undefined || line === undefined || !line.flags.includes('master')) throw new Error(`no master on port ${port}`);
      served.set(port, line.slots);
      dead.add(port);
      await node.kill();
    },
    async promoted(oldPort: number) {
      const slots = served.get(oldPort);
      if (slots === undefined || slots.length === 0) throw new Error(`no master with slots was killed on port ${oldPort}`);
      let now = 0;
      await waitFor(`the replica of the master on ${oldPort} promoted`, PROMOTION_DEADLINE_MS, async () => {
        const lines = await view();
        if (!lines.find((n) => n.port === oldPort)?.flags.includes('fail')) return false;
        const heir = lines.find((n) => n.port !== oldPort && n.flags.includes('master') && !n.flags.includes('fail') && slots.every((range) => n.slots.includes(range)));
        if (heir === undefined) return false;
        const info = await command(survivor(), ['CLUSTER', 'INFO']);
        if (typeof info !== 'string' || !info.includes('cluster_state:ok')) return false;
        const role = await command(heir.port, ['ROLE']);
        if (!Array.isArray(role) || role[0] !== 'master') return false;
        now = heir.port;
        return true;
      });
      return now;
    },
  };
}

/** CLUSTER NODES: `<id> <ip:port@bus[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot|range>...`. */
function parseNodes(reply: string): NodeLine[] {
  return reply
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => {
      const [, address, flags, , , , , , ...slots] = line.trim().split(' ');
      const port = Number(/:(\d+)@/.exec(address ?? '')?.[1]);
      // Slots being migrated ("[slot->-id]") are not served yet.
      return { port, flags: (flags ?? '').split(','), slots: slots.filter((s) => !s.startsWith('[')) };
    });
}

/** Whether `slot` is in `range` ("5461" or "0-5460"). */
function inRange(range: string, slot: number): boolean {
  const [from, to = from] = range.split('-').map(Number);
  return from !== undefined && to !== undefined && slot >= from && slot <= to;
}

/** The nodes, started side by side; a port taken by someone else between freePort() and the start gets a whole new try. */
async function startNodes(t: Teardown, dir: string, count: number, nodeTimeoutMs: number): Promise<RedisProcess[]> {
  for (let attempt = 1; ; attempt++) {
    const started: RedisProcess[] = [];
    try {
      return await settled(
        Array.from({ length: count }, async () => {
          const [port, busPort] = [await freePort(), await freePort()];
          const logfile = `redis-${port}.log`;
          const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--logfile', logfile];
          args.push('--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`));
          args.push('--cluster-port', String(busPort), '--cluster-node-timeout', String(nodeTimeoutMs));
          args.push('--save', '', '--appendonly', 'no');
          // A master syncs its replica at once instead of waiting (5 s by default) for more to share one transfer.
          args.push('--repl-diskless-sync-delay', '0');
          const node = await spawnRedis(t, { dir, port, logfile, args });
          started.push(node);
          return node;
        }),
      );
    } catch (err) {
      await Promise.all(started.map((p) => p.kill()));
      if (attempt === START_ATTEMPTS) throw err;
    }
  }
}
