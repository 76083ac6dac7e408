/**
 * What `WAIT 1 <timeout>` after each session binding would cost (docs/store-outages.md#durability):
 * a local master and its replica, the store's own binding script run N times one after the
 * other, alternating rounds with and without a WAIT on the same connection (WAIT counts that
 * connection's writes), then the same with the replica gone, where every WAIT runs to its timeout.
 * Prints the latency of a binding (p50, p99, mean) each way and their ratio.
 *
 *   npm run bench:store-wait [-- --bindings 2000 --rounds 4 --timeout-ms 100]
 */
import { randomUUID } from 'node:crypto';
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { defineScripts } from '../src/store/redis/scripts/index.js';
import { sessionKey } from '../src/store/redis/keys.js';
import { command, freePort, spawnRedis, type RedisProcess } from '../test/helpers/redis-process.js';
import { waitFor } from '../test/helpers/wait.js';
import { makeScratch, removeDir } from './lib/targets.js';

const { values } = parseArgs({
  options: {
    bindings: { type: 'string', default: '2000' },
    rounds: { type: 'string', default: '4' },
    'timeout-ms': { type: 'string', default: '100' },
    'replica-down-bindings': { type: 'string', default: '20' },
  },
});
const bindings = Number(values.bindings);
const rounds = Number(values.rounds);
const timeoutMs = Number(values['timeout-ms']);
const downBindings = Number(values['replica-down-bindings']);
const IDLE_TTL_MS = 600_000;

const teardowns: (() => unknown)[] = [];
const t = { teardown: (fn: () => unknown) => void teardowns.push(fn) };

async function startPair(dir: string): Promise<{ master: RedisProcess; replica: RedisProcess }> {
  const start = async (port: number, extra: string[]) =>
    spawnRedis(t, {
      dir,
      port,
      logfile: `redis-${port}.log`,
      args: ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--logfile', `redis-${port}.log`, '--save', '', '--appendonly', 'no', '--repl-diskless-sync-delay', '0', ...extra],
    });
  const master = await start(await freePort(), []);
  const replica = await start(await freePort(), ['--replicaof', '127.0.0.1', String(master.port)]);
  await waitFor('replica in sync', 20_000, async () => {
    const info = await command(replica.port, ['INFO', 'replication']);
    return typeof info === 'string' && info.includes('master_link_status:up');
  });
  return { master, replica };
}

/** Milliseconds of each binding, one after the other. */
async function bind(client: ReturnType<typeof defineScripts>, count: number, wait: boolean): Promise<{ ms: number[]; acked: number }> {
  const ms: number[] = [];
  let acked = 0;
  for (let i = 0; i < count; i++) {
    const sessionId = randomUUID();
    const begin = performance.now();
    await client.gwBindSession(sessionKey('bench', sessionId), sessionId, 'r1', 'e1', Date.now(), IDLE_TTL_MS, '', '');
    if (wait) acked += Number(await client.wait(1, timeoutMs));
    ms.push(performance.now() - begin);
  }
  return { ms, acked };
}

function summary(ms: number[]): { p50: number; p99: number; mean: number } {
  const sorted = [...ms].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return { p50: at(0.5), p99: at(0.99), mean: ms.reduce((a, b) => a + b, 0) / ms.length };
}

const fmt = (n: number) => n.toFixed(3);

const dir = await makeScratch();
try {
  const { master, replica } = await startPair(dir);
  const client = defineScripts(new Redis({ host: '127.0.0.1', port: master.port, maxRetriesPerRequest: 1 }));
  teardowns.push(() => client.disconnect());
  // Warm: scripts loaded, connection and replication link busy once.
  await bind(client, 200, true);

  const without: number[] = [];
  const withWait: number[] = [];
  let acked = 0;
  for (let round = 0; round < rounds; round++) {
    without.push(...(await bind(client, bindings, false)).ms);
    const waited = await bind(client, bindings, true);
    withWait.push(...waited.ms);
    acked += waited.acked;
  }

  await replica.kill();
  const down = await bind(client, downBindings, true);

  const a = summary(without);
  const b = summary(withWait);
  const c = summary(down.ms);
  console.log(`store-wait: ${rounds} rounds of ${bindings} bindings each way, WAIT 1 ${timeoutMs}; ${cpus().length} cores, load ${loadavg()[0]!.toFixed(1)}`);
  console.log('| binding | p50 ms | p99 ms | mean ms |');
  console.log('|---|---|---|---|');
  console.log(`| without WAIT | ${fmt(a.p50)} | ${fmt(a.p99)} | ${fmt(a.mean)} |`);
  console.log(`| with WAIT 1 ${timeoutMs} (${acked} of ${withWait.length} acknowledged) | ${fmt(b.p50)} | ${fmt(b.p99)} | ${fmt(b.mean)} |`);
  console.log(`| with WAIT, the replica gone (${down.acked} of ${down.ms.length} acknowledged) | ${fmt(c.p50)} | ${fmt(c.p99)} | ${fmt(c.mean)} |`);
  console.log(`ratio with/without: p50 ${(b.p50 / a.p50).toFixed(2)}x, p99 ${(b.p99 / a.p99).toFixed(2)}x, mean ${(b.mean / a.mean).toFixed(2)}x`);
} finally {
  for (const fn of teardowns.reverse()) await fn();
  await removeDir(dir);
}
