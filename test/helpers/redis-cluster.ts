/**
 * A real three-master Redis Cluster for one test file: redis-server in cluster mode on free
 * loopback ports (the bus port chosen too, so that port + 10000 need not be free), joined by
 * `redis-cli --cluster create`, and ready once every node says cluster_state:ok and knows all
 * three. Killed on teardown and on process exit.
 */

import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { command, freePort, settled, spawnRedis, type RedisProcess, type Teardown } from './redis-process.js';
import { waitFor } from './wait.js';

export interface RedisCluster {
  /** redis://127.0.0.1:<port> of each master. */
  readonly urls: readonly string[];
  readonly ports: readonly number[];
  /** FLUSHALL on every master. */
  flushall(): Promise<void>;
  /** SIGKILLs master `i` (nothing saved, no replica to take over its slots). */
  kill(i: number): Promise<void>;
}

const MASTERS = 3;
const START_ATTEMPTS = 3;
/** `--cluster create` gossips the configuration to every node: well under a few seconds on loopback. */
const READY_DEADLINE_MS = 15_000;
const CLI_DEADLINE_MS = 20_000;

const run = promisify(execFile);

export async function startRedisCluster(t: Teardown): Promise<RedisCluster> {
  const dir = await mkdtemp(join(tmpdir(), 'gw-cluster-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const nodes = await startNodes(t, dir);
  const ports = nodes.map((node) => node.port);
  const addresses = ports.map((port) => `127.0.0.1:${port}`);
  await run('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', '0', '--cluster-yes'], { timeout: CLI_DEADLINE_MS });
  await waitFor('cluster_state:ok on every node', READY_DEADLINE_MS, async () => {
    for (const port of ports) {
      const info = await command(port, ['CLUSTER', 'INFO']);
      if (typeof info !== 'string' || !info.includes('cluster_state:ok') || !info.includes(`cluster_known_nodes:${ports.length}`)) return false;
    }
    return true;
  });
  return {
    urls: ports.map((port) => `redis://127.0.0.1:${port}`),
    ports,
    async flushall() {
      for (const port of ports) {
        const reply = await command(port, ['FLUSHALL']);
        if (reply !== 'OK') throw new Error(`FLUSHALL on ${port} answered ${String(reply)}`);
      }
    },
    async kill(i: number) {
      await nodes[i]?.kill();
    },
  };
}

/** The masters, started side by side; a port taken by someone else between freePort() and the start gets a whole new try. */
async function startNodes(t: Teardown, dir: string): Promise<RedisProcess[]> {
  for (let attempt = 1; ; attempt++) {
    const started: RedisProcess[] = [];
    try {
      return await settled(
        Array.from({ length: MASTERS }, async () => {
          const [port, busPort] = [await freePort(), await freePort()];
          const logfile = `redis-${port}.log`;
          const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--logfile', logfile];
          args.push('--cluster-enabled', 'yes', '--cluster-config-file', join(dir, `nodes-${port}.conf`));
          args.push('--cluster-port', String(busPort), '--cluster-node-timeout', '2000');
          args.push('--save', '', '--appendonly', 'no');
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
