/**
 * What a store outage costs an open stream (CONTRACT.md §7, docs/store-outages.md): a gateway with
 * default settings in front of the demo replica and Redis, one GET stream per round receiving an
 * event every N ms while Redis is paused with `CLIENT PAUSE <pause> ALL`. For each interval it
 * prints the events delivered during the pause (against those emitted meanwhile), the longest
 * silence the client saw, how long the gateway took to write its backlog once Redis answered again
 * and in how many writes, and the peak held. Then, in this process, the heap held per unrecorded
 * event against what the bounds count for it.
 *
 *   npm run bench:outage [-- --intervals 10,20 --pause-ms 5000 --held-events 200000]
 */
import { randomUUID } from 'node:crypto';
import { cpus, loadavg } from 'node:os';
import { setTimeout as delay } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { parseConfig } from '../src/config/load.js';
import { createLogger } from '../src/logger.js';
import { createMetrics } from '../src/metrics.js';
import { createRedisStore } from '../src/store/redis/index.js';
import { UnrecordedRecords } from '../src/streams/unrecorded.js';
import { post, rawSession, refusingPort, toolCallBody } from '../test/helpers/http.js';
import { SseBlocks } from './lib/sse-blocks.js';
import { openFilesLimit } from './lib/procs.js';
import { makeScratch, removeDir, startRedis, startSdkReplica, startTarget } from './lib/targets.js';

const { values } = parseArgs({
  options: {
    intervals: { type: 'string', default: '10,20' },
    'pause-ms': { type: 'string', default: '5000' },
    'held-events': { type: 'string', default: '200000' },
  },
});
const intervals = values.intervals.split(',').map(Number);
const pauseMs = Number(values['pause-ms']);
const heldEvents = Number(values['held-events']);
/** Events before the pause and after it, so that the silence around both edges is seen. */
const LEAD_MS = 1500;
const TAIL_MS = 1500;

interface Round {
  intervalMs: number;
  emitted: number;
  delivered: number;
  deliveredDuringPause: number;
  /** Events a second reaching the client before the pause (the replica's real pace) and during it. */
  rateBefore: number;
  rateDuring: number;
  /** Longest time without an event: before the pause (the machine's own jitter), and during it. */
  silenceBeforeMs: number;
  silenceDuringMs: number;
  flushMs: number;
  flushWrites: number;
  peakHeldEvents: number;
  peakHeldBytes: number;
}

async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(url)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? 0 : Number(line.slice(name.length + 1));
}

async function round(intervalMs: number, gatewayUrl: string, metricsUrl: string, replicaUrl: string, redisUrl: string): Promise<Round> {
  const sessionId = await rawSession(gatewayUrl);
  const response = await fetch(gatewayUrl, { headers: { accept: 'text/event-stream', 'mcp-session-id': sessionId } });
  if (response.status !== 200) throw new Error(`GET stream answered ${response.status}`);
  const blocks = new SseBlocks(response.body!);
  const arrivals: number[] = [];
  const reading = (async () => {
    for (let block = await blocks.next(); block !== undefined; block = await blocks.next()) {
      if (block.includes('notifications/message')) arrivals.push(performance.now());
    }
  })();

  const count = Math.ceil((LEAD_MS + pauseMs + TAIL_MS) / intervalMs);
  const emitStart = performance.now();
  const emitting = post(replicaUrl, toolCallBody('emit', { count, intervalMs }), { 'mcp-session-id': sessionId }).then((r) => r.text());
  await delay(LEAD_MS);

  const pauser = new Redis(redisUrl);
  const prober = new Redis(redisUrl);
  await prober.ping();
  const lateBefore = await metric(metricsUrl, 'mcp_gateway_record_batches_late_total');
  await pauser.call('CLIENT', 'PAUSE', String(pauseMs), 'ALL');
  const pauseStart = performance.now();
  let peakHeldEvents = 0;
  let peakHeldBytes = 0;
  let paused = true;
  const sampling = (async () => {
    while (paused) {
      peakHeldEvents = Math.max(peakHeldEvents, await metric(metricsUrl, 'mcp_gateway_unrecorded_events'));
      peakHeldBytes = Math.max(peakHeldBytes, await metric(metricsUrl, 'mcp_gateway_unrecorded_bytes'));
      await delay(50);
    }
  })();
  // A PING from another client is answered the moment the pause ends.
  await prober.ping();
  const pauseEnd = performance.now();
  paused = false;
  await sampling;
  while ((await metric(metricsUrl, 'mcp_gateway_unrecorded_events')) > 0) await delay(2);
  const flushMs = performance.now() - pauseEnd;
  const flushWrites = (await metric(metricsUrl, 'mcp_gateway_record_batches_late_total')) - lateBefore;
  pauser.disconnect();
  prober.disconnect();

  await emitting;
  await blocks.cancel();
  await reading.catch(() => undefined);

  const during = (at: number) => at >= pauseStart && at <= pauseEnd;
  const before = arrivals.filter((at) => at >= emitStart && at < pauseStart);
  return {
    intervalMs,
    emitted: count,
    delivered: arrivals.length,
    deliveredDuringPause: arrivals.filter(during).length,
    rateBefore: before.length / ((pauseStart - emitStart) / 1000),
    rateDuring: arrivals.filter(during).length / ((pauseEnd - pauseStart) / 1000),
    silenceBeforeMs: longestGap(arrivals, emitStart, pauseStart),
    silenceDuringMs: longestGap(arrivals, pauseStart, pauseEnd),
    flushMs,
    flushWrites,
    peakHeldEvents,
    peakHeldBytes,
  };
}

/** The longest time between two arrivals (or an edge and an arrival) within [from, to]. */
function longestGap(arrivals: readonly number[], from: number, to: number): number {
  let last = from;
  let longest = 0;
  for (const at of arrivals) {
    if (at < from) continue;
    if (at > to) break;
    longest = Math.max(longest, at - last);
    last = at;
  }
  return Math.max(longest, to - last);
}

/** Heap held per unrecorded event, against the bounds' count: a store that refuses every write. */
async function heapPerEvent(events: number, perBatch: number): Promise<{ heapPerEvent: number; countedPerEvent: number }> {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const port = await refusingPort();
  const config = parseConfig(
    `replicas: [{ id: r1, url: "http://127.0.0.1:1/mcp" }]\nstore: { type: redis, url: "redis://127.0.0.1:${port}" }\nresumption: { unrecorded: { streamBytes: 1073741824, totalBytes: 1073741824 } }\n`,
    'bench.yaml',
    {},
  );
  const store = createRedisStore({ url: config.store.url, keyPrefix: 'bench', connectTimeoutMs: 100, commandTimeoutMs: 100 });
  const records = new UnrecordedRecords({ config: () => config, store, metrics: createMetrics(new Registry()), logger: createLogger('silent') });
  const STREAMS = 1000;
  const prefix = randomUUID();
  gc();
  const before = process.memoryUsage().heapUsed;
  const streams = Array.from({ length: STREAMS }, (_, s) => ({ stream: records.stream({ sessionId: `s${s}`, incarnation: `i${s}`, attach: 1 }), next: 1 }));
  for (let held = 0; held < events; held += perBatch) {
    const s = streams[(held / perBatch) % STREAMS]!;
    // Ids as the demo replica's event store makes them (a UUID, its stream number, a sequence).
    const ids = Array.from({ length: perBatch }, (_, i) => `${prefix}-1-${held + i}`);
    await s.stream.record(s.next, ids, [], 0);
    s.next += perBatch;
  }
  gc();
  const after = process.memoryUsage().heapUsed;
  const counted = records.bytes;
  await records.settle(0);
  await store.close();
  return { heapPerEvent: (after - before) / events, countedPerEvent: counted / events };
}

async function main(): Promise<void> {
  const dir = await makeScratch();
  const redis = await startRedis(dir);
  const replica = await startSdkReplica('r1');
  const gateway = await startTarget('gateway-redis', {
    dir,
    upstreams: [replica],
    redisUrl: redis.url,
    gatewayLog: 'warn',
    gatewayConnections: 64,
    openFiles: await openFilesLimit(),
  });
  const rounds: Round[] = [];
  try {
    for (const intervalMs of intervals) rounds.push(await round(intervalMs, gateway.url, gateway.metricsUrl!, replica.url, redis.url));
  } finally {
    await gateway.stop();
    await replica.child.stop();
    await redis.stop();
    await removeDir(dir);
  }
  // One after the other: each measures the whole heap.
  const heaps = [];
  for (const perBatch of [1, 10]) heaps.push({ perBatch, heap: await heapPerEvent(heldEvents, perBatch) });

  console.log(
    `store outage: CLIENT PAUSE ${pauseMs} ALL under one GET stream; gateway defaults (store.commandTimeoutMs 500, resumption.recordRetryMs 0); load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')} on ${cpus().length} cores`,
  );
  console.table(
    rounds.map((r) => ({
      'interval ms': r.intervalMs,
      'delivered in pause': r.deliveredDuringPause,
      'events/s before / in pause': `${r.rateBefore.toFixed(0)} / ${r.rateDuring.toFixed(0)}`,
      'delivered / emitted (all)': `${r.delivered} / ${r.emitted}`,
      'longest silence ms before / in pause': `${Math.round(r.silenceBeforeMs)} / ${Math.round(r.silenceDuringMs)}`,
      'flush ms': Math.round(r.flushMs),
      'flush writes': r.flushWrites,
      'peak held events': r.peakHeldEvents,
      'peak held bytes': r.peakHeldBytes,
    })),
  );
  for (const { perBatch, heap } of heaps) {
    const { heapPerEvent: real, countedPerEvent: counted } = heap;
    console.log(
      `held records, batches of ${perBatch}: ${real.toFixed(1)} heap bytes per event (ids of ${prefixLength()} characters) against ${counted.toFixed(1)} counted; ` +
        `the default bounds (1 MiB a stream, 64 MiB in all) hold about ${Math.floor((1024 * 1024) / counted)} such events a stream and ${Math.floor((64 * 1024 * 1024) / counted)} in all`,
    );
  }
}

function prefixLength(): number {
  return `${randomUUID()}-1-100000`.length;
}

await main();
