/**
 * A real Sentinel setup for one test file: a master, one replica (`--replicaof`) and three
 * sentinels (`redis-server <conf> --sentinel`, each conf a temp file since sentinel rewrites it),
 * on free loopback ports. Ready once the replica is in sync and every sentinel knows the replica
 * and the other two sentinels. Killed on teardown and on process exit.
 */

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { command, fields, freePort, settled, spawnRedis, type RedisProcess, type Teardown } from './redis-process.js';
import { waitFor } from './wait.js';

export interface RedisSentinel {
  readonly name: string;
  /** redis://127.0.0.1:<port> of each sentinel. */
  readonly sentinelUrls: readonly string[];
  /** The data nodes, master first at start. */
  readonly dataPorts: readonly number[];
  /** The master's port as the first sentinel sees it. */
  masterPort(): Promise<number>;
  /** FLUSHALL on the current master. */
  flushall(): Promise<void>;
  /**
   * Waits until the replica has every write of the master (WAIT), then has the first sentinel fail
   * over (SENTINEL FAILOVER), and resolves at once with the old master's port.
   */
  failover(): Promise<number>;
  /** SIGKILLs the current master (nothing saved, no goodbye) and resolves with its port once it has exited. */
  killMaster(): Promise<number>;
  /** Resolves once every sentinel names a master other than `oldPort`, and that node says it is one. */
  failedOver(oldPort: number): Promise<number>;
}

const NAME = 'mymaster';
const SENTINELS = 3;
const START_ATTEMPTS = 3;
/** Sentinels find the replica through the master's INFO and each other through hello messages every 2 s. */
const READY_DEADLINE_MS = 20_000;
/**
 * down-after 1 s, failover-timeout 5 s: a forced failover on loopback ends well within this, and
 * so does one after a master's death (down-after, the quorum's agreement, a leader's election).
 */
const FAILOVER_DEADLINE_MS = 20_000;

export async function startRedisSentinel(t: Teardown): Promise<RedisSentinel> {
  const dir = await mkdtemp(join(tmpdir(), 'gw-sentinel-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));

  // The replica is started beside its master: it connects once the master answers.
  const data = new Map<number, RedisProcess>();
  const dataPorts = await retry(async (started) => {
    const [master, replica] = [await freePort(), await freePort()];
    await settled([startData(t, dir, started, master, []), startData(t, dir, started, replica, ['--replicaof', '127.0.0.1', String(master)])]);
    for (const proc of started) data.set(proc.port, proc);
    return [master, replica];
  });
  const [master, replica] = dataPorts as [number, number];
  await waitFor('replica in sync', READY_DEADLINE_MS, async () => {
    const info = await command(replica, ['INFO', 'replication']);
    return typeof info === 'string' && info.includes('master_link_status:up');
  });

  // Started once the replica is in sync, so that each sentinel's first INFO of the master lists it;
  // the sentinels side by side.
  const sentinelPorts = await retry(async (started) =>
    settled(
      Array.from({ length: SENTINELS }, async () => {
        const port = await freePort();
        const conf = join(dir, `sentinel-${port}.conf`);
        await writeFile(
          conf,
          [
            `port ${port}`,
            'bind 127.0.0.1',
            `dir ${dir}`,
            `logfile sentinel-${port}.log`,
            `sentinel monitor ${NAME} 127.0.0.1 ${master} 2`,
            `sentinel down-after-milliseconds ${NAME} 1000`,
            `sentinel failover-timeout ${NAME} 5000`,
            '',
          ].join('\n'),
        );
        started.push(await spawnRedis(t, { dir, port, logfile: `sentinel-${port}.log`, args: [conf, '--sentinel'] }));
        return port;
      }),
    ),
  );

  await waitFor('every sentinel knows the replica and the other sentinels', READY_DEADLINE_MS, async () => {
    for (const port of sentinelPorts) {
      const replicas = await command(port, ['SENTINEL', 'REPLICAS', NAME]);
      const sentinels = await command(port, ['SENTINEL', 'SENTINELS', NAME]);
      if (!Array.isArray(replicas) || !Array.isArray(sentinels) || sentinels.length !== SENTINELS - 1) return false;
      const ok = replicas.map(fields).some((r) => r['port'] === String(replica) && r['flags'] === 'slave' && r['master-link-status'] === 'ok');
      if (!ok) return false;
    }
    return true;
  });

  const masterPortAt = async (sentinel: number): Promise<number> => {
    const reply = await command(sentinel, ['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', NAME]);
    if (!Array.isArray(reply) || reply.length !== 2) throw new Error(`GET-MASTER-ADDR-BY-NAME answered ${String(reply)}`);
    return Number(reply[1]);
  };
  const first = sentinelPorts[0]!;

  return {
    name: NAME,
    sentinelUrls: sentinelPorts.map((port) => `redis://127.0.0.1:${port}`),
    dataPorts,
    masterPort: () => masterPortAt(first),
    async flushall() {
      const reply = await command(await masterPortAt(first), ['FLUSHALL']);
      if (reply !== 'OK') throw new Error(`FLUSHALL answered ${String(reply)}`);
    },
    async failover() {
      const old = await masterPortAt(first);
      // WAIT with a timeout, not 0: a replica that never acknowledges must fail the test, not hang it.
      const acked = await command(old, ['WAIT', '1', '900']);
      if (acked !== 1) throw new Error(`WAIT 1: ${String(acked)} replica(s) acknowledged`);
      const reply = await command(first, ['SENTINEL', 'FAILOVER', NAME]);
      if (reply !== 'OK') throw new Error(`SENTINEL FAILOVER answered ${String(reply)}`);
      return old;
    },
    async killMaster() {
      const old = await masterPortAt(first);
      const proc = data.get(old);
      if (proc === undefined) throw new Error(`the master on ${old} is none of this setup's nodes`);
      await proc.kill('SIGKILL');
      return old;
    },
    async failedOver(oldPort: number) {
      let now = 0;
      await waitFor('every sentinel names the new master', FAILOVER_DEADLINE_MS, async () => {
        const ports = await Promise.all(sentinelPorts.map(masterPortAt));
        now = ports[0]!;
        if (now === oldPort || ports.some((p) => p !== now)) return false;
        const role = await command(now, ['ROLE']);
        return Array.isArray(role) && role[0] === 'master';
      });
      return now;
    },
  };
}

/** The data nodes started so far are in `started`. */
async function startData(t: Teardown, dir: string, started: RedisProcess[], port: number, extra: string[]): Promise<void> {
  const logfile = `redis-${port}.log`;
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--logfile', logfile];
  args.push('--dbfilename', `dump-${port}.rdb`, '--save', '', '--appendonly', 'no', ...extra);
  // A master syncs a replica at once, instead of waiting (5 s by default) for more replicas to share
  // one diskless transfer.
  args.push('--repl-diskless-sync-delay', '0');
  const proc = await spawnRedis(t, { dir, port, logfile, args });
  started.push(proc);
}

/** A port taken by someone else between freePort() and the start gets a whole new try. */
async function retry<T>(start: (started: RedisProcess[]) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const started: RedisProcess[] = [];
    try {
      return await start(started);
    } catch (err) {
      await Promise.all(started.map((p) => p.kill()));
      if (attempt === START_ATTEMPTS) throw err;
    }
  }
}
