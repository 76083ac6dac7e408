/**
 * src/streams/pipe.ts reading ahead while batches' records are written (two at once, pipelined), on real loopback sockets
 * and a real redis-server: what the replica sends meanwhile is read and numbered, yet no event
 * reaches the client before its own record is in the store (E5), events leave in order, a refused
 * record ends the stream with nothing after it, and a client that does not read still holds the
 * replica back.
 *
 * The records go through the gateway's own path (streams/unrecorded.ts into the Redis store); the
 * test can hold each one back before it is written, as a slow store would.
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { Registry } from 'prom-client';
import t, { type Test } from 'tap';
import { CursorCodec } from '../../src/cursor/codec.js';
import { createLogger } from '../../src/logger.js';
import { createMetrics } from '../../src/metrics.js';
import { createRedisStore } from '../../src/store/redis/index.js';
import type { Store } from '../../src/store/types.js';
import { pipeSse } from '../../src/streams/pipe.js';
import { UnrecordedRecords } from '../../src/streams/unrecorded.js';
import { SseRewriter } from '../../src/sse/rewriter.js';
import { testConfig } from '../helpers/gateway.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { flood, startChain, stoppedReading, type ClientSide } from '../helpers/stream-chain.js';
import { bound, storeAnswers, waitFor } from '../helpers/wait.js';

const TTL_MS = 60_000;
const DEADLINE_MS = bound(30_000);
const codec = new CursorCodec('a-test-secret-of-at-least-32-bytes!!');
const server = await startRedisServer(t);

let sessions = 0;

/** The replica's event `n` (id u<n>), padded to `bytes`. */
const event = (n: number, bytes = 0) => `id: u${n}\ndata: #${String(n).padStart(6, '0')} `.padEnd(Math.max(0, bytes - 2), '.') + '\n\n';

async function readAhead(t: Test) {
  const store = createRedisStore({ url: server.url, keyPrefix: `ra${++sessions}`, connectTimeoutMs: 500, commandTimeoutMs: 10_000 });
  const config = testConfig({ replicas: [{ id: 'r1', url: 'http://127.0.0.1:1/mcp' }] });
  const unrecorded = new UnrecordedRecords({ config: () => config, store, metrics: createMetrics(new Registry()), logger: createLogger('silent') });
  t.teardown(async () => {
    await unrecorded.settle(0);
    await store.close();
  });
  await storeAnswers(store);
  const sessionId = `s${sessions}`;
  const incarnation = 'AAAAAAAAAAAAAAAA';
  await store.bindSession({ sessionId, owner: 'r1', ownerEpoch: '' }, TTL_MS);
  await store.openIncarnation({ id: incarnation, sessionId, owner: 'r1', kind: 'get', supersede: true }, TTL_MS);
  const attached = await store.attachIncarnation(sessionId, incarnation, TTL_MS, 0);
  const records = unrecorded.stream({ sessionId, incarnation, attach: attached!.attach });
  /** Writes to the store wait until released while holding, as a slow store would answer. */
  let holding = false;
  const held: (() => void)[] = [];
  /** What the store answered to each write of a batch, in the order the answers came. */
  const answers: { fromSeq: number; result: string }[] = [];
  const recordEvents = store.recordEvents.bind(store);
  store.recordEvents = async (...args: Parameters<Store['recordEvents']>) => {
    if (holding) await new Promise<void>((resolve) => held.push(resolve));
    const result = await recordEvents(...args);
    answers.push({ fromSeq: args[2].fromSeq, result });
    return result;
  };

  /** Positions whose record the store accepted, as the gateway learnt it. */
  const landed = new Set<number>();
  /** fromSeq of every record asked for, in order. */
  const asked: number[] = [];
  let askedWaiter: (() => void) | undefined;

  const chain = await startChain(
    t,
    (res) => res.writeHead(200, { 'content-type': 'text/event-stream' }),
    (body: Readable, res: ServerResponse) => {
      const rewriter = new SseRewriter({
        cursors: {
          codec,
          sessionId,
          incarnation,
          journal: true,
          sink: {
            record: async (fromSeq, ids, responded, payloads) => {
              asked.push(fromSeq);
              askedWaiter?.();
              const result = await records.record(fromSeq, ids, responded, 0, payloads);
              if (result === 'ok') ids.forEach((_, i) => landed.add(fromSeq + i));
              return result;
            },
          },
        },
        head: 0,
        maxEventBytes: 1 << 20,
        trackResponses: false,
      });
      const pipe = pipeSse({ body, res, rewriter, start: () => res.writeHead(200, { 'content-type': 'text/event-stream' }), onEvents: () => undefined, retryHintMs: 1000 });
      return { pipe, body };
    },
  );
  const client = await chain.client;

  /** E5 as the client sees it: every event it receives has its record in the store already. */
  const early: number[] = [];
  const seqs: number[] = [];
  let carry = '';
  client.res.on('data', (chunk: string) => {
    const lines = (carry + chunk).split('\n');
    carry = lines.pop()!;
    for (const line of lines) {
      if (!line.startsWith('id: ')) continue;
      const decoded = codec.decode(line.slice(4), sessionId);
      if (decoded.kind !== 'ok') throw new Error(`a cursor that does not decode: ${line}`);
      seqs.push(decoded.fields.seq);
      if (!landed.has(decoded.fields.seq)) early.push(decoded.fields.seq);
    }
  });

  return {
    ...chain,
    client,
    store,
    sessionId,
    incarnation,
    landed,
    asked,
    early,
    seqs,
    /** Records wait before they reach the store until released (true), or go at once. */
    hold: (on: boolean) => (holding = on),
    answers,
    /** Lets the oldest held record be written. */
    release: () => held.shift()?.(),
    /** Lets the `i`th held record (from the oldest, 0) be written. */
    releaseAt: (i: number) => held.splice(i, 1)[0]?.(),
    /** Resolves once `n` records were asked for. */
    askedFor: async (n: number) => {
      while (asked.length < n) await new Promise<void>((resolve) => (askedWaiter = resolve));
    },
  };
}

/** Resolves once the gateway took `bytes` more than `before` from the replica's connection out of its body. */
function consumed(body: Readable, before: number, bytes: number): Promise<void> {
  const socket = (body as unknown as { socket: { bytesRead: number } }).socket;
  return waitFor('the replica\'s chunk read by the gateway', DEADLINE_MS, () => socket.bytesRead >= before + bytes && body.readableLength === 0);
}

function bytesRead(body: Readable): number {
  return (body as unknown as { socket: { bytesRead: number } }).socket.bytesRead;
}

const dataOf = (client: ClientSide) => [...client.text().matchAll(/^data: #(\d{6}) /gm)].map((m) => Number(m[1]));

t.test('the next chunk is read and recorded while a record is in flight; its events leave only after the batch before them', async (t) => {
  const s = await readAhead(t);
  const { pipe, body } = s.handled;
  s.hold(true);
  s.replica.res.write(event(1) + event(2));
  await s.askedFor(1);
  t.same(s.asked, [1], 'the first batch is being recorded');

  s.replica.res.write(event(3) + event(4));
  // Pipelined: the next batch's record goes out while the first one's is in flight.
  await s.askedFor(2);
  t.same(s.asked, [1, 3], 'the next batch numbered on from the first');
  const before = bytesRead(body);
  const third = event(5) + event(6);
  s.replica.res.write(third);
  await consumed(body, before, Buffer.byteLength(third));
  t.same(s.asked, [1, 3], 'a third chunk read meanwhile waits: two batches in flight at most');
  t.same(dataOf(s.client), [], 'nothing has left while the first record is not in the store');
  t.equal(pipe.delivered, 0, 'delivered: nothing went to the client');

  s.release();
  await s.client.seen('data: #000002');
  // The chunk read ahead is recorded as soon as the first batch left, with nothing more from the replica.
  await s.askedFor(3);
  t.same(s.asked, [1, 3, 5]);
  t.same(dataOf(s.client), [1, 2], 'the first batch left, the ones whose records are in flight did not');
  t.equal(pipe.delivered, 2, 'delivered: the last position that went to the client');

  s.release();
  await s.client.seen('data: #000004');
  t.equal(pipe.delivered, 4);
  s.release();
  await s.client.seen('data: #000006');
  s.hold(false);
  s.replica.res.end(event(7));
  t.equal(await pipe.done, 'upstream_end');
  await s.client.ended;
  t.same(dataOf(s.client), [1, 2, 3, 4, 5, 6, 7], 'every event once, in order');
  t.same(s.seqs, [1, 2, 3, 4, 5, 6, 7], 'under consecutive positions');
  t.same(s.early, [], 'no event reached the client before its record was in the store');
  const view = await s.store.readIncarnation(s.sessionId, s.incarnation, 0);
  t.equal(view?.record.head, 7, 'every position recorded');
});

t.test('a pipelined record that reaches the store before the one ahead of it is written again, in order', async (t) => {
  const s = await readAhead(t);
  const { pipe } = s.handled;
  s.hold(true);
  s.replica.res.write(event(1) + event(2));
  await s.askedFor(1);
  s.replica.res.write(event(3) + event(4));
  await s.askedFor(2);
  // The second batch is written first: the store refuses it (its head is not at 2 yet)...
  s.releaseAt(1);
  await waitFor('the early write answered', DEADLINE_MS, () => s.answers.length === 1);
  t.same(s.answers, [{ fromSeq: 3, result: 'stale' }], 'the store refused the batch that came before its turn');
  t.same(dataOf(s.client), [], 'and nothing left');
  // ...and once the first landed, it is written again, behind it.
  s.hold(false);
  s.release();
  await s.client.seen('data: #000004');
  t.same(s.answers, [{ fromSeq: 3, result: 'stale' }, { fromSeq: 1, result: 'ok' }, { fromSeq: 3, result: 'ok' }], 'the refused write was sent again, after the first');
  s.replica.res.end(event(5));
  t.equal(await pipe.done, 'upstream_end', 'the early refusal did not end the stream');
  await s.client.ended;
  t.same(dataOf(s.client), [1, 2, 3, 4, 5], 'every event once, in order');
  t.same(s.early, [], 'no event reached the client before its record was in the store');
  const view = await s.store.readIncarnation(s.sessionId, s.incarnation, 0);
  t.equal(view?.record.head, 5, 'every position recorded, once');
});

t.test('a record refused while the next batch is in flight: the stream ends, nothing after it leaves', async (t) => {
  const s = await readAhead(t);
  const { pipe } = s.handled;
  s.replica.res.write(event(1));
  await s.client.seen('data: #000001');
  s.hold(true);
  s.replica.res.write(event(2));
  await s.askedFor(2);
  s.replica.res.write(event(3));
  await s.askedFor(3);
  // Another attachment takes the stream over: both records in flight are refused.
  await s.store.attachIncarnation(s.sessionId, s.incarnation, TTL_MS, 1);
  s.release();
  s.release();
  t.equal(await pipe.done, 'stale');
  const { body: text } = await s.client.ended;
  t.same([...text.matchAll(/^data: #(\d{6}) /gm)].map((m) => Number(m[1])), [1], 'only what was recorded before the refusal reached the client');
  t.same(s.early, []);
  const view = await s.store.readIncarnation(s.sessionId, s.incarnation, 0);
  t.equal(view?.record.head, 1, 'neither batch in flight was recorded');
});

t.test('a client that does not read holds the replica back while records are written; every event arrives once it reads', async (t) => {
  const s = await readAhead(t);
  const { pipe, body } = s.handled;
  const EVENT_BYTES = 16 * 1024;
  const EVENTS = 2048;
  const total = EVENTS * EVENT_BYTES;
  s.client.pause();
  const sent = flood(s.replica.res, EVENTS, (i) => event(i + 1, EVENT_BYTES));
  await waitFor('the replica held back, or done', DEADLINE_MS, () => (sent.blocked && stoppedReading(body)) || sent.written === total);
  t.ok(sent.written < total, `the replica is held back after ${sent.written} of ${total} bytes`);
  // What the socket holds beyond its buffer: at most the two batches in flight and the one read
  // ahead (256 KiB each, plus the chunk that filled it).
  const gatewayHolds = s.gatewayRes.writableLength;
  t.ok(gatewayHolds <= 2 * 1024 * 1024, `the gateway holds ${gatewayHolds} bytes for the client, not the flood`);

  s.client.resume();
  await sent.finished;
  t.equal(await pipe.done, 'upstream_end');
  await s.client.ended;
  t.same(dataOf(s.client), Array.from({ length: EVENTS }, (_, i) => i + 1), 'every event, in order');
  t.same(s.early, [], 'no event reached the client before its record was in the store');
  t.ok(s.asked.length > 1, `recorded in ${s.asked.length} batches`);
});
