/**
 * The gateway's benchmarks: the gateway (memory and Redis stores) beside its baselines from the
 * same run (the upstream directly, nginx, haproxy, and a bare Node.js proxy that shows the floor
 * under the gateway's own work), everything started here on loopback.
 *
 *   node build/bench/run.js            quick (npm run bench, a few minutes at most)
 *   node build/bench/run.js --full     longer windows, 10,000 idle streams, the SDK replica under load
 *   options: --only open-loop,streams,idle,rpc,rpc-sdk,sse,resume   --targets direct,nginx,haproxy,node-floor,gateway-memory,gateway-redis,gateway-redis-journal
 *            --rate N --sessions N (open-loop: calls/s offered over that many sessions)
 *            --paced-streams N --events-rate N --instances N (streams: N GET streams at that rate each,
 *              through N instances of a gateway on Redis; the storm reconnects each onto the next)
 *            --renumbering-upstream (streams: the upstream's paced events carry ids that start at 1
 *              again on every stream, whatever the Last-Event-ID: a replica whose ids are a counter)
 *            --duration MS (rpc and sse windows)  --warmup MS (before each window)  --concurrency N  --streams N  --out DIR
 *            --gateway-log LEVEL (default warn)   --upstream-workers N (default 1)
 *            --gateway-cpu-prof DIR (each gateway writes a V8 .cpuprofile there as it stops)
 *            --gateway-heap-snapshots DIR (idle: each gateway writes a V8 heap snapshot with its sessions
 *              open and another with their streams too, sessions.heapsnapshot and streams.heapsnapshot,
 *              in a folder of its own there; writing the first swells the process, so the run's idle
 *              RSS and CPU figures are not the gateway's: take those from a run without)
 *            --rounds N (default 1: every workload but idle N times, targets in turn; medians)
 *            --variant NAME=JSON (repeatable: every gateway target also runs as gateway-KIND+NAME, in the
 *              same rounds; JSON {"checkout": DIR, "config": {...}}: another checkout's build, and
 *              configuration merged over the bench's, e.g. --variant 'w2={"config":{"workers":2}}'; "node":
 *              Node.js options for the gateway's process, e.g. {"node":["--max-semi-space-size=32"]})
 *
 * Prints one table and writes it as JSON to bench/results/<timestamp>.json. Absolute figures depend
 * on the machine and on what else runs on it; the ratios to the baselines of the same run are what
 * compare between runs.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { cpus, loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { LoadClient } from './lib/client.js';
import { runIfMain } from './lib/main.js';
import { openFilesLimit } from './lib/procs.js';
import { ensureTools, kindOf, makeScratch, PROXY_KINDS, REDIS_KINDS, removeDir, startFastUpstream, startRedis, startSdkReplica, type ProxyKind, type RedisServer, type TargetName, type Upstream, type Variant } from './lib/targets.js';
import { openLoopWorkload, streamsWorkload } from './lib/fleet-workloads.js';
import { idleWorkload, resumeWorkload, rpcWorkload, sseWorkload, WORKLOADS, type Context, type Row, type WorkloadName } from './lib/workloads.js';

export interface BenchOptions {
  mode: 'quick' | 'full' | 'custom';
  workloads: readonly WorkloadName[];
  targets: readonly ProxyKind[];
  /** Gateway variants by name: each gateway target runs once more per variant, right after it. */
  variants: ReadonlyMap<string, Variant>;
  concurrency: number;
  warmupMs: number;
  durationMs: number;
  idleStreams: number;
  resumeEvents: number;
  resumeReps: number;
  /** open-loop: tools/call offered per second, over this many sessions. */
  rate: number;
  sessions: number;
  /** streams: GET streams, events per second on each, gateway instances on Redis. */
  pacedStreams: number;
  eventsRate: number;
  instances: number;
  renumbered: boolean;
  gatewayLog: string;
  upstreamWorkers: number;
  /**
   * Rounds of each workload but idle: the targets run in turn, once per round, and each figure is
   * the median over the rounds, its spread in the note. On a shared machine a single run moves.
   */
  rounds: number;
  /** Where each gateway writes a CPU profile (--gateway-cpu-prof DIR); none by default. */
  gatewayCpuProfDir?: string;
  /** Where each gateway writes its idle heap snapshots (--gateway-heap-snapshots DIR); none by default. */
  gatewayHeapSnapshotDir?: string;
  /** Where the JSON goes. */
  outDir: string;
  log: (line: string) => void;
}

export interface ReportRow extends Row {
  vsDirect?: number;
  vsNginx?: number;
  vsHaproxy?: number;
  /** The Node.js floor's (bench/floor.ts): what any Node.js proxy pays on this machine. */
  vsFloor?: number;
  /** The journal's rows: the same metric of the same gateway and store with the journal off. */
  vsJournalOff?: number;
}

export interface BenchResult {
  rows: ReportRow[];
  notes: string[];
  file: string;
}

const RESULTS = fileURLToPath(new URL('../../bench/results/', import.meta.url));

export function presetOptions(mode: 'quick' | 'full'): BenchOptions {
  const quick = mode === 'quick';
  return {
    mode,
    workloads: quick ? ['open-loop', 'streams', 'idle'] : WORKLOADS,
    targets: PROXY_KINDS,
    variants: new Map(),
    concurrency: 32,
    warmupMs: quick ? 1000 : 3000,
    durationMs: quick ? 4000 : 20_000,
    idleStreams: quick ? 2000 : 10_000,
    resumeEvents: 100,
    resumeReps: quick ? 10 : 50,
    rate: 2000,
    sessions: 200,
    pacedStreams: 2000,
    eventsRate: 5,
    instances: 2,
    renumbered: false,
    gatewayLog: 'warn',
    upstreamWorkers: 1,
    rounds: 1,
    outDir: RESULTS,
    log: (line) => process.stderr.write(`${line}\n`),
  };
}

/**
 * One row per (workload, target, metric): the median over the rounds (the lower middle value for
 * an even count), with its spread noted when there was more than one round. A row missing from a
 * round (a target failed there) is merged from the rounds that have it.
 */
export function mergeRounds(rounds: readonly (readonly Row[])[]): Row[] {
  if (rounds.length === 1) return [...rounds[0]!];
  const groups = new Map<string, Row[]>();
  for (const round of rounds) {
    for (const row of round) {
      const key = `${row.workload}\n${row.target}\n${row.metric}`;
      const group = groups.get(key);
      if (group) group.push(row);
      else groups.set(key, [row]);
    }
  }
  return [...groups.values()].map((group) => {
    const values = group.map((r) => r.value).filter((v) => Number.isFinite(v));
    if (values.length === 0) return group[0]!;
    values.sort((a, b) => a - b);
    const median = values[Math.floor((values.length - 1) / 2)]!;
    const spread = `median of ${values.length}: ${fmt(values[0])}–${fmt(values[values.length - 1])}`;
    const note = group.find((r) => r.note !== undefined)?.note;
    return { ...group[0]!, value: median, note: note ? `${spread}; ${note}` : spread };
  });
}

/** Metrics for which a ratio to another target means nothing. */
const NO_RATIO = new Set(['loadgen_cpu_share', 'upstream_cpu_share', 'streams_open', 'failed', 'lost', 'repeated', 'streams', 'retried', 'signalled']);

function withRatios(rows: readonly Row[]): ReportRow[] {
  const find = (r: Row, target: TargetName) => rows.find((b) => b.workload === r.workload && b.metric === r.metric && b.target === target);
  return rows.map((r) => {
    const out: ReportRow = { ...r };
    // Differences to direct or the floor are already comparisons.
    if (NO_RATIO.has(r.metric) || r.metric.startsWith('added_') || r.metric.startsWith('over_floor_')) return out;
    const ratio = (target: ProxyKind) => {
      const base = find(r, target);
      if (!base || base === r || !(base.value > 0) || !Number.isFinite(r.value)) return undefined;
      return r.value / base.value;
    };
    const d = ratio('direct');
    const n = ratio('nginx');
    const h = ratio('haproxy');
    const f = ratio('node-floor');
    const j = r.target === 'gateway-redis-journal' ? ratio('gateway-redis') : undefined;
    if (d !== undefined) out.vsDirect = d;
    if (n !== undefined) out.vsNginx = n;
    if (h !== undefined) out.vsHaproxy = h;
    if (f !== undefined) out.vsFloor = f;
    if (j !== undefined) out.vsJournalOff = j;
    return out;
  });
}

function fmt(value: number | undefined): string {
  if (value === undefined) return '';
  if (!Number.isFinite(value)) return String(value);
  if (value === 0) return '0';
  const abs = Math.abs(value);
  if (abs >= 1000) return Math.round(value).toString();
  if (abs >= 100) return value.toFixed(1);
  if (abs >= 1) return value.toFixed(2);
  return value.toPrecision(3);
}

export function formatTable(rows: readonly ReportRow[]): string {
  const header = ['workload', 'target', 'metric', 'value', 'x direct', 'x nginx', 'x haproxy', 'x floor', 'x journal off', 'note'];
  const cells = rows.map((r) => [r.workload, r.target, r.metric, fmt(r.value), fmt(r.vsDirect), fmt(r.vsNginx), fmt(r.vsHaproxy), fmt(r.vsFloor), fmt(r.vsJournalOff), r.note ?? '']);
  const note = header.length - 1;
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => (i === note ? 0 : c[i]!.length))));
  const line = (c: string[]) =>
    c
      .map((v, i) => (i === note ? v : i >= 3 ? v.padStart(widths[i]!) : v.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), line(header.map((_, i) => (i === note ? '----' : '-'.repeat(widths[i]!)))), ...cells.map(line)].join('\n');
}

export async function runBench(opts: BenchOptions): Promise<BenchResult> {
  const started = new Date();
  const notes: string[] = [];
  const log = opts.log;
  const load1 = loadavg()[0] ?? 0;
  if (load1 > cpus().length) notes.push(`load average ${load1.toFixed(1)} on ${cpus().length} cores at the start: absolute figures are noisy, compare ratios`);
  const wants = (k: ProxyKind) => opts.targets.includes(k);
  const tools = ensureTools({ redis: REDIS_KINDS.some(wants), nginx: wants('nginx'), haproxy: wants('haproxy') }, log);
  notes.push(...tools.notes);
  const available = opts.targets.filter((k) => (REDIS_KINDS.includes(k) ? tools.redis : k === 'nginx' ? tools.nginx : k === 'haproxy' ? tools.haproxy : true));
  const targets: TargetName[] = available.flatMap((k) =>
    k.startsWith('gateway-') ? [k, ...[...opts.variants.keys()].map((name) => `${k}+${name}` as TargetName)] : [k],
  );

  const limit = await openFilesLimit();
  const openFiles = Number.isFinite(limit) ? limit : 65_536;
  // The proxy holds two descriptors per stream (client and upstream), plus its own few.
  const streamCap = Math.floor((openFiles - 200) / 2);
  let idleStreams = opts.idleStreams;
  let capNote: string | undefined;
  if (idleStreams > streamCap) {
    capNote = `capped from ${idleStreams} by the open-files limit ${openFiles} (2 per stream in the proxy)`;
    notes.push(`idle streams ${capNote}`);
    idleStreams = streamCap;
  }

  const dir = await makeScratch();
  const load = new LoadClient();
  let redis: RedisServer | undefined;
  const upstreams: Upstream[] = [];
  const rows: Row[] = [];
  /** Every round's rows, for paired comparisons (a variant against the plain gateway, round by round). */
  const perRound: (Row & { round: number })[] = [];
  try {
    if (targets.some((k) => REDIS_KINDS.includes(kindOf(k)))) redis = await startRedis(dir);
    const ctx: Context = {
      load,
      redis,
      log,
      proxy: {
        dir,
        ...(redis ? { redisUrl: redis.url } : {}),
        gatewayLog: opts.gatewayLog,
        ...(opts.gatewayCpuProfDir ? { gatewayCpuProfDir: opts.gatewayCpuProfDir } : {}),
        ...(opts.gatewayHeapSnapshotDir ? { gatewayHeapSnapshotDir: opts.gatewayHeapSnapshotDir } : {}),
        // Every open stream holds one connection to its replica, within the stream budget.
        gatewayConnections: Math.max(1024, idleStreams + 256, opts.pacedStreams + 256),
        variants: opts.variants,
        openFiles,
      },
    };
    const needsFast = opts.workloads.some((w) => w === 'rpc' || w === 'sse' || w === 'idle' || w === 'open-loop' || w === 'streams');
    const needsSdk = opts.workloads.some((w) => w === 'rpc-sdk' || w === 'resume');
    const fast = needsFast ? await startFastUpstream(opts.upstreamWorkers) : undefined;
    const sdk = needsSdk ? await startSdkReplica() : undefined;
    if (fast) upstreams.push(fast);
    if (sdk) upstreams.push(sdk);
    const rpcSettings = { concurrency: opts.concurrency, warmupMs: opts.warmupMs, durationMs: opts.durationMs };
    const once = (workload: WorkloadName): Promise<Row[]> => {
      switch (workload) {
        case 'rpc':
          return rpcWorkload(ctx, 'rpc', targets, fast!, rpcSettings);
        case 'rpc-sdk':
          return rpcWorkload(ctx, 'rpc-sdk', targets, sdk!, rpcSettings);
        case 'sse':
          return sseWorkload(ctx, targets, fast!, { warmupMs: opts.warmupMs, durationMs: opts.durationMs });
        case 'idle':
          return idleWorkload(ctx, targets, fast!, { streams: idleStreams, ...(capNote ? { capNote } : {}) });
        case 'resume':
          return resumeWorkload(ctx, targets, sdk!, { events: opts.resumeEvents, reps: opts.resumeReps });
        case 'open-loop':
          return openLoopWorkload(ctx, targets, fast!, { sessions: opts.sessions, rate: opts.rate, sseShare: 0.1, progress: 3, warmupMs: opts.warmupMs, durationMs: opts.durationMs });
        case 'streams':
          return streamsWorkload(ctx, targets, fast!, {
            streams: opts.pacedStreams,
            rate: opts.eventsRate,
            warmupMs: opts.warmupMs,
            durationMs: opts.durationMs,
            instances: opts.instances,
            stormTimeoutMs: 30_000,
            renumbered: opts.renumbered,
          });
      }
    };
    for (const workload of opts.workloads) {
      // Thousands of idle streams take long to open and their memory does not move between runs.
      const rounds = workload === 'idle' ? 1 : opts.rounds;
      const results: Row[][] = [];
      for (let round = 1; round <= rounds; round++) {
        log(`${workload}${rounds > 1 ? ` (round ${round} of ${rounds})` : ''}: ${targets.join(', ')}`);
        const roundRows = await once(workload);
        results.push(roundRows);
        perRound.push(...roundRows.map((row) => ({ ...row, round })));
      }
      rows.push(...mergeRounds(results));
    }
  } finally {
    load.close();
    for (const u of upstreams) await u.child.stop('SIGTERM', 2000);
    await redis?.stop();
    await removeDir(dir);
  }

  // Store-cost rows last, grouped, whatever workload produced them.
  const ordered = [...rows.filter((r) => r.workload !== 'store-cost'), ...rows.filter((r) => r.workload === 'store-cost')];
  const report = withRatios(ordered);
  const saturation = report.filter((r) => r.target === 'direct' && r.metric === 'loadgen_cpu_share' && r.value > 0.9);
  for (const r of saturation) notes.push(`the load generator used ${fmt(r.value * 100)} % of a core in ${r.workload} direct: that ceiling is the load generator's, not the upstream's`);

  await mkdir(opts.outDir, { recursive: true });
  const file = join(opts.outDir, `${started.toISOString().replace(/[:.]/g, '-')}.json`);
  const doc = {
    startedAt: started.toISOString(),
    seconds: (Date.now() - started.getTime()) / 1000,
    mode: opts.mode,
    machine: { cpus: cpus().length, cpuModel: cpus()[0]?.model, loadavg: loadavg(), node: process.version, openFiles },
    settings: { ...opts, log: undefined, idleStreams, targets, variants: Object.fromEntries(opts.variants) },
    notes,
    rows: report,
    rounds: perRound,
  };
  await writeFile(file, `${JSON.stringify(doc, null, 2)}\n`);
  return { rows: report, notes, file };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      full: { type: 'boolean', default: false },
      only: { type: 'string' },
      targets: { type: 'string' },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      concurrency: { type: 'string' },
      streams: { type: 'string' },
      out: { type: 'string' },
      'gateway-log': { type: 'string' },
      'upstream-workers': { type: 'string' },
      'gateway-cpu-prof': { type: 'string' },
      'gateway-heap-snapshots': { type: 'string' },
      rounds: { type: 'string' },
      variant: { type: 'string', multiple: true },
      rate: { type: 'string' },
      sessions: { type: 'string' },
      'paced-streams': { type: 'string' },
      'events-rate': { type: 'string' },
      instances: { type: 'string' },
      'renumbering-upstream': { type: 'boolean', default: false },
    },
  });
  const opts = presetOptions(values.full ? 'full' : 'quick');
  const list = <T extends string>(value: string | undefined, allowed: readonly T[], what: string): T[] | undefined => {
    if (value === undefined) return undefined;
    const items = value.split(',').map((s) => s.trim()) as T[];
    const bad = items.filter((i) => !allowed.includes(i));
    if (bad.length > 0) throw new Error(`unknown ${what}: ${bad.join(', ')} (known: ${allowed.join(', ')})`);
    return items;
  };
  const num = (value: string | undefined, what: string): number | undefined => {
    if (value === undefined) return undefined;
    const n = Number(value);
    if (!Number.isInteger(n) || n <= 0) throw new Error(`--${what} must be a positive integer`);
    return n;
  };
  const custom = {
    workloads: list(values.only, WORKLOADS, 'workload'),
    targets: list(values.targets, PROXY_KINDS, 'target'),
    durationMs: num(values.duration, 'duration'),
    warmupMs: num(values.warmup, 'warmup'),
    concurrency: num(values.concurrency, 'concurrency'),
    idleStreams: num(values.streams, 'streams'),
    upstreamWorkers: num(values['upstream-workers'], 'upstream-workers'),
    rounds: num(values.rounds, 'rounds'),
    rate: num(values.rate, 'rate'),
    sessions: num(values.sessions, 'sessions'),
    pacedStreams: num(values['paced-streams'], 'paced-streams'),
    eventsRate: num(values['events-rate'], 'events-rate'),
    instances: num(values.instances, 'instances'),
    renumbered: values['renumbering-upstream'] === true,
    outDir: values.out,
    gatewayLog: values['gateway-log'],
    gatewayCpuProfDir: values['gateway-cpu-prof'] === undefined ? undefined : resolve(values['gateway-cpu-prof']),
    gatewayHeapSnapshotDir: values['gateway-heap-snapshots'] === undefined ? undefined : resolve(values['gateway-heap-snapshots']),
  };
  for (const [key, value] of Object.entries(custom)) if (value !== undefined) (opts as unknown as Record<string, unknown>)[key] = value;
  opts.variants = new Map((values.variant ?? []).map(parseVariant));
  const result = await runBench(opts);
  process.stdout.write(`\nratio = value / the same metric of that target in this run (requests_per_s, events_per_s: higher is better; ms, cpu, rss: lower is better);\n'x journal off': gateway-redis-journal against gateway-redis, the same gateway and store with resumption.journal.enabled false\n\n`);
  process.stdout.write(`${formatTable(result.rows)}\n\n`);
  for (const note of result.notes) process.stdout.write(`note: ${note}\n`);
  process.stdout.write(`results: ${result.file}\n`);
}

/** NAME=JSON, as --variant takes it. */
function parseVariant(arg: string): [string, Variant] {
  const at = arg.indexOf('=');
  const name = arg.slice(0, at);
  if (at <= 0 || !/^[a-z0-9-]+$/i.test(name)) throw new Error(`--variant ${arg}: expected NAME=JSON, NAME of letters, digits and dashes`);
  const spec = JSON.parse(arg.slice(at + 1)) as Variant;
  if (spec.node !== undefined && (!Array.isArray(spec.node) || !spec.node.every((o) => typeof o === 'string'))) {
    throw new Error(`--variant ${arg}: "node" must be an array of strings (Node.js options)`);
  }
  return [name, { ...spec, ...(spec.checkout === undefined ? {} : { checkout: resolve(spec.checkout) }) }];
}

runIfMain(import.meta.url, main);
