/**
 * The benchmark harness runs end to end: one short workload, the memory store, the upstream
 * directly, through the bare Node.js floor and through the gateway, nothing to install. It asserts only that figures came out and
 * were written; how fast anything is belongs to `npm run bench`, never to a test.
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { presetOptions, runBench } from '../../bench/run.js';

t.test('a one-second rpc run gives finite positive figures and a JSON file', async (t) => {
  const outDir = await mkdtemp(join(tmpdir(), 'gw-bench-smoke-'));
  t.teardown(() => rm(outDir, { recursive: true, force: true }));
  const result = await runBench({
    ...presetOptions('quick'),
    mode: 'custom',
    workloads: ['rpc'],
    targets: ['direct', 'node-floor', 'gateway-memory'],
    concurrency: 4,
    warmupMs: 200,
    durationMs: 1000,
    outDir,
    log: () => undefined,
  });

  for (const target of ['direct', 'node-floor', 'gateway-memory']) {
    for (const metric of ['requests_per_s', 'p50_ms', 'p99_ms']) {
      const row = result.rows.find((r) => r.workload === 'rpc' && r.target === target && r.metric === metric);
      t.ok(row !== undefined && Number.isFinite(row.value) && row.value > 0, `${target} ${metric} is a positive number (${row?.value})`);
    }
  }
  const cpu = result.rows.find((r) => r.target === 'gateway-memory' && r.metric === 'proxy_cpu_s_per_1k_req');
  t.ok(cpu !== undefined && Number.isFinite(cpu.value) && cpu.value > 0, `the gateway's CPU per 1,000 requests is a positive number (${cpu?.value})`);
  const ratio = result.rows.find((r) => r.target === 'gateway-memory' && r.metric === 'requests_per_s')?.vsDirect;
  t.ok(ratio !== undefined && Number.isFinite(ratio) && ratio > 0, 'the gateway has a ratio to direct');
  t.notOk(result.rows.some((r) => r.metric === 'failed'), 'no target failed');

  t.ok(result.file.startsWith(outDir), 'the JSON is written where asked');
  const doc = JSON.parse(await readFile(result.file, 'utf8')) as { rows: unknown[] };
  t.same(doc.rows.length, result.rows.length, 'the JSON holds every row of the table');
});

t.test('the fleet workloads run end to end: open-loop calls, paced streams through two instances on Redis, their storm', async (t) => {
  const outDir = await mkdtemp(join(tmpdir(), 'gw-bench-smoke-'));
  t.teardown(() => rm(outDir, { recursive: true, force: true }));
  const targets = ['direct', 'gateway-memory', 'gateway-redis-journal'] as const;
  const result = await runBench({
    ...presetOptions('quick'),
    mode: 'custom',
    workloads: ['open-loop', 'streams'],
    targets,
    rate: 100,
    sessions: 10,
    pacedStreams: 20,
    eventsRate: 5,
    warmupMs: 300,
    durationMs: 1500,
    outDir,
    log: () => undefined,
  });
  const row = (workload: string, target: string, metric: string) => result.rows.find((r) => r.workload === workload && r.target === target && r.metric === metric);
  t.notOk(result.rows.some((r) => r.metric === 'failed'), `no target failed ${JSON.stringify(result.rows.filter((r) => r.metric === 'failed'))}`);
  for (const target of targets) {
    for (const metric of ['calls_per_s', 'p50_ms', 'p99_ms']) {
      const r = row('open-loop', target, metric);
      t.ok(r !== undefined && Number.isFinite(r.value) && r.value > 0, `open-loop ${target} ${metric} is a positive number (${r?.value})`);
    }
    t.equal(row('streams', target, 'streams_open')?.value, 20, `${target}: every stream opened`);
    t.ok((row('streams', target, 'events_per_s')?.value ?? 0) > 0, `${target}: events arrived`);
    t.equal(row('streams', target, 'lost')?.value, 0, `${target}: no event lost`);
    t.equal(row('streams', target, 'repeated')?.value, 0, `${target}: none repeated`);
  }
  t.ok(row('open-loop', 'gateway-memory', 'added_p99_ms') !== undefined, 'the latency added over direct is reported');
  t.ok((row('streams', 'gateway-redis-journal', 'proxy_and_redis_cpu_us_per_event')?.value ?? 0) > 0, 'the CPU per event counts both instances and Redis');
  // One sampler for single-path and fleet workloads: the store cost of the streams of both instances.
  t.ok((row('store-cost', 'gateway-redis-journal', 'store_ops_per_event (streams)')?.value ?? 0) > 0, 'the store operations per event, of both instances');
  t.ok((row('store-cost', 'gateway-redis-journal', 'redis_cmds_per_event (streams)')?.value ?? 0) > 0, 'the Redis commands per event');
  t.match(row('storm', 'gateway-redis-journal', 'streams'), { value: 20, note: '200 continued: 20' }, 'every stream continued through the other instance');
  t.equal(row('storm', 'gateway-redis-journal', 'lost')?.value, 0, 'the storm lost nothing');
  t.equal(row('storm', 'gateway-redis-journal', 'repeated')?.value, 0, 'and repeated nothing');
  t.ok(Number.isFinite(row('storm', 'gateway-redis-journal', 'all_continued_ms')?.value), 'every stream had an event after the storm');
});

t.test('--gateway-heap-snapshots: the idle workload leaves a heap snapshot of the gateway with its sessions and one with their streams', async (t) => {
  const outDir = await mkdtemp(join(tmpdir(), 'gw-bench-smoke-'));
  t.teardown(() => rm(outDir, { recursive: true, force: true }));
  const snapshots = join(outDir, 'heap');
  const result = await runBench({
    ...presetOptions('quick'),
    mode: 'custom',
    workloads: ['idle'],
    targets: ['gateway-memory'],
    idleStreams: 20,
    gatewayHeapSnapshotDir: snapshots,
    outDir,
    log: () => undefined,
  });
  t.notOk(result.rows.some((r) => r.metric === 'failed'), 'the idle workload ran');
  const [folder, ...others] = await readdir(snapshots);
  t.match(folder, /^gateway-memory-\d+$/, 'one folder for the one gateway');
  t.same(others, [], 'and nothing else');
  t.same((await readdir(join(snapshots, folder!))).sort(), ['sessions.heapsnapshot', 'streams.heapsnapshot'], 'both snapshots, named for when they were taken');
  for (const name of ['sessions', 'streams']) {
    const head = (await readFile(join(snapshots, folder!, `${name}.heapsnapshot`), 'utf8')).slice(0, 20);
    t.match(head, /^\{"snapshot":/, `${name}.heapsnapshot is a V8 heap snapshot`);
  }
});
