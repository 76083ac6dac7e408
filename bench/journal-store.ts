/**
 * What the journal (CONTRACT.md §8 J1, docs/journal.md) costs Redis. For each payload size it
 * records `--events` events into one incarnation through the store, in batches of `--batch`, and
 * prints MEMORY USAGE of the journal (a hash of slices, scripts/journal.ts) per event beyond the
 * payload itself (target: at most 64 bytes), beside the positions list's cost per event. Then what journaling adds to the record
 * script per batch: the script's server time per call (INFO commandstats) with and without
 * payloads, and that of the 'head' note (SPUBLISH) with nobody subscribed and with a subscriber.
 *
 *   npm run bench:journal-store [-- --events 1000 --sizes 64,256,1024 --batch 10 --calls 20000]
 */
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { journalKey, positionsKey } from '../src/store/redis/keys.js';
import { createRedisStore } from '../src/store/redis/index.js';
import { JournalFrames } from '../src/store/journal-frames.js';
import type { EventBatch, Store } from '../src/store/types.js';
import { makeScratch, removeDir, startRedis } from './lib/targets.js';

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '1000' },
    sizes: { type: 'string', default: '64,256,512,1024,2048,4096,8192,16384' },
    batch: { type: 'string', default: '10' },
    calls: { type: 'string', default: '20000' },
  },
});
const events = Number(values.events);
const sizes = values.sizes.split(',').map(Number);
const batchSize = Number(values.batch);
const calls = Number(values.calls);
const PREFIX = 'bench';
const TTL_MS = 600_000;

/** An SSE block of `size` bytes without its id line, as the rewriter journals it. */
function payload(size: number, seq: number): string {
  const head = `event: message\ndata: {"seq":${seq},"pad":"`;
  const tail = '"}\n\n';
  return head + 'x'.repeat(Math.max(0, size - head.length - tail.length)) + tail;
}

async function fill(store: Store, sessionId: string, count: number, size: number, journal: boolean): Promise<number> {
  await store.openIncarnation({ id: 'g1', sessionId, owner: 'r1', kind: 'get', supersede: false }, TTL_MS);
  let bytes = 0;
  for (let from = 1; from <= count; from += batchSize) {
    const n = Math.min(batchSize, count - from + 1);
    const payloads = Array.from({ length: n }, (_, i) => payload(size, from + i));
    bytes += payloads.reduce((sum, p) => sum + Buffer.byteLength(p), 0);
    const batch: EventBatch = { attach: 1, fromSeq: from, upstreamIds: payloads.map(() => null), responded: [], ...(journal ? { payloads: JournalFrames.of(payloads) } : {}) };
    const result = await store.recordEvents(sessionId, 'g1', batch, count, TTL_MS, Number.MAX_SAFE_INTEGER);
    if (result !== 'ok') throw new Error(`record answered ${result}`);
  }
  return bytes;
}

/** Server time per call (µs) of each command since the last CONFIG RESETSTAT. */
async function usecPerCall(redis: Redis): Promise<Map<string, { calls: number; usec: number }>> {
  const info = await redis.info('commandstats');
  const stats = new Map<string, { calls: number; usec: number }>();
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+),usec_per_call=([\d.]+)/gm)) {
    stats.set(m[1]!, { calls: Number(m[2]), usec: Number(m[4]) });
  }
  return stats;
}

async function scriptCost(redis: Redis, store: Store, sessionId: string, journal: boolean): Promise<{ script: number; publish: number }> {
  await store.openIncarnation({ id: 'g1', sessionId, owner: 'r1', kind: 'get', supersede: false }, TTL_MS);
  await redis.config('RESETSTAT');
  for (let seq = 1; seq <= calls; seq++) {
    const p = [payload(256, seq)];
    const batch: EventBatch = { attach: 1, fromSeq: seq, upstreamIds: [null], responded: [], ...(journal ? { payloads: JournalFrames.of(p) } : {}) };
    await store.recordEvents(sessionId, 'g1', batch, 1000, TTL_MS, 1024 * 1024);
  }
  const stats = await usecPerCall(redis);
  return { script: stats.get('evalsha')?.usec ?? NaN, publish: stats.get('spublish')?.usec ?? 0 };
}

const dir = await makeScratch();
const server = await startRedis(dir);
const redis = new Redis(server.url);
const store = createRedisStore({ url: server.url, keyPrefix: PREFIX, connectTimeoutMs: 2000, commandTimeoutMs: 5000 });
try {
  console.log(`Redis memory per journaled event (${events} events per incarnation, batches of ${batchSize}; MEMORY USAGE ... SAMPLES 0)`);
  console.log('payload B | journal B/event | beyond payload B/event | positions B/event');
  for (const size of sizes) {
    const sessionId = `mem-${size}`;
    const bytes = await fill(store, sessionId, events, size, true);
    const journal = Number(await redis.call('MEMORY', 'USAGE', journalKey(PREFIX, sessionId, 'g1'), 'SAMPLES', '0'));
    const positions = Number(await redis.call('MEMORY', 'USAGE', positionsKey(PREFIX, sessionId, 'g1'), 'SAMPLES', '0'));
    // Frames, slices, marks and open fragments: all counted in the overhead.
    const perEvent = journal / events;
    const overhead = (journal - bytes) / events;
    console.log(
      `${String(size).padStart(9)} | ${perEvent.toFixed(1).padStart(15)} | ${overhead.toFixed(1).padStart(22)} | ${(positions / events).toFixed(1).padStart(17)}`,
    );
  }

  console.log(`\nWhat journaling adds to the record script (${calls} batches of one 256-byte event, server time per call)`);
  // Alternated and the lower of two kept: the machine's other load only ever adds.
  const lower = (a: { script: number; publish: number }, b: { script: number; publish: number }) => (a.script <= b.script ? a : b);
  const plain = lower(await scriptCost(redis, store, 'cost-plain', false), await scriptCost(redis, store, 'cost-plain-2', false));
  const unwatched = lower(await scriptCost(redis, store, 'cost-journal', true), await scriptCost(redis, store, 'cost-journal-2', true));
  const subscriber = createRedisStore({ url: server.url, keyPrefix: PREFIX, connectTimeoutMs: 2000, commandTimeoutMs: 5000 });
  let noted = 0;
  const unwatch = subscriber.watchJournal('cost-watched', 'g1', () => (noted += 1));
  const watched = await scriptCost(redis, store, 'cost-watched', true);
  unwatch();
  await subscriber.close();
  console.log(`without payloads:               ${plain.script.toFixed(2)} µs per call`);
  console.log(`with payloads, nobody watching: ${unwatched.script.toFixed(2)} µs per call, of which SPUBLISH ${unwatched.publish.toFixed(2)} µs`);
  console.log(`with payloads, one watcher:     ${watched.script.toFixed(2)} µs per call, of which SPUBLISH ${watched.publish.toFixed(2)} µs (${noted} notes received)`);
} finally {
  await store.close();
  redis.disconnect();
  await server.stop();
  await removeDir(dir);
}
