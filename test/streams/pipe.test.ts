/**
 * src/streams/pipe.ts on real loopback sockets: events pass as they arrive, a client that stops
 * reading holds the replica back, either end or the gateway ends the other (the gateway with a
 * retry hint first), and a continuation is held back, status line included, until its replay is
 * verified, within a time and a size bound.
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import t, { type Test } from 'tap';
import { pipeSse, type PipeEnd, type VerifyFailure } from '../../src/streams/pipe.js';
import { startedPipe, TEST_INCARNATION, testCodec, testRewriter } from '../helpers/pipe-state.js';
import { flood, startChain, stoppedReading } from '../helpers/stream-chain.js';
import { bound, waitFor } from '../helpers/wait.js';

const RETRY_HINT_MS = 1234;
const EVENT_BYTES = 64 * 1024;
/** Far more than the loopback socket buffers on both hops can hold. */
const FLOOD_EVENTS = 512;
const HELD_LIMIT_BYTES = 16 * EVENT_BYTES;
const FLOOD_DEADLINE_MS = bound(30_000);

interface Options {
  /** A continuation: the replica must first replay these ids. */
  verify?: { expected: string[]; timeoutMs: number; maxBytes: number };
  /** A POST stream: the request ids whose responses it carries. */
  awaiting?: (string | number)[];
  /** J1: a journaled stream, primed. */
  prime?: boolean;
}

interface Piped {
  pipe: ReturnType<typeof pipeSse>;
  body: Readable;
  events: number[];
  /** Resolves with why verification failed, once it did. */
  failed: Promise<VerifyFailure>;
}

async function piped(t: Test, options: Options = {}) {
  let failedWith!: (why: VerifyFailure) => void;
  const failed = new Promise<VerifyFailure>((resolve) => (failedWith = resolve));
  const chain = await startChain(
    t,
    (res) => res.writeHead(200, { 'content-type': 'text/event-stream' }),
    (body, res: ServerResponse): Piped => {
      const events: number[] = [];
      const rewriter = testRewriter({ awaiting: options.awaiting, verify: options.verify?.expected, prime: options.prime, maxEventBytes: 2 * EVENT_BYTES });
      const pipe = pipeSse({
        ...startedPipe(body, res, rewriter, events, RETRY_HINT_MS),
        ...(options.verify
          ? {
              verify: {
                timeoutMs: options.verify.timeoutMs,
                maxBytes: options.verify.maxBytes,
                // What the gateway does then: answer as a new stream, which it can only do when
                // nothing of the held replay has left.
                onFailed: (why: VerifyFailure) => {
                  failedWith(why);
                  res.writeHead(200, { 'content-type': 'text/event-stream', 'x-started': 'fresh' }).end(`data: fresh after ${why}\n\n`);
                },
              },
            }
          : {}),
      });
      return { pipe, body, events, failed };
    },
  );
  return chain;
}

t.test('events pass as they arrive, ids removed without a cursor target; the replica ending ends the client response', async (t) => {
  const { replica, client: clientSide, handled } = await piped(t);
  const client = await clientSide;
  t.equal(client.res.headers['x-started'], 'yes', 'the head set by start() reached the client before any event');
  replica.res.write('id: u1\ndata: one\n\n');
  await client.seen('data: one\n\n');
  replica.res.end('id: u2\ndata: two\n\n');
  t.same(await client.ended, { body: 'data: one\n\ndata: two\n\n', aborted: false });
  t.equal(await handled.pipe.done, 'upstream_end');
  t.same(handled.events, [1, 1], 'events counted per batch');
});

t.test('the client going away closes the request to the replica', async (t) => {
  const { replica, client: clientSide, handled } = await piped(t);
  const client = await clientSide;
  replica.res.write('data: one\n\n');
  await client.seen('data: one');
  client.destroy();
  t.equal(await handled.pipe.done, 'client_gone');
  await replica.closed;
  t.pass('the replica saw its request closed');
});

t.test('the replica failing mid-stream ends the client response after the complete events', async (t) => {
  const { replica, client: clientSide, handled } = await piped(t);
  const client = await clientSide;
  replica.res.write('data: one\n\ndata: half');
  await client.seen('data: one\n\n');
  replica.res.socket?.destroy();
  t.equal(await handled.pipe.done, 'upstream_error');
  t.equal((await client.ended).body, 'data: one\n\n', 'half an event never leaves');
});

// drain: a stream that carries no call in flight (a GET stream) ends at once, as with end().
for (const how of ['end', 'drain'] as const) {
  t.test(`the gateway ending the stream (${how}) sends a retry hint, then ends both sides`, async (t) => {
    const { replica, client: clientSide, handled } = await piped(t);
    const client = await clientSide;
    replica.res.write('data: one\n\n');
    await client.seen('data: one');
    handled.pipe[how]();
    t.equal(await handled.pipe.done, 'gateway_end');
    t.same(await client.ended, { body: `data: one\n\nretry: ${RETRY_HINT_MS}\n\n`, aborted: false });
    await replica.closed;
    t.pass('the request to the replica was closed');
  });
}

t.test('draining a POST stream lets it run until the response of every request has passed, then ends it', async (t) => {
  const { replica, client: clientSide, handled } = await piped(t, { awaiting: [1, 'b'] });
  const client = await clientSide;
  const progress = 'data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}\n\n';
  const first = 'data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n';
  // Without ids, as the SDK's default server sends them: the response is known by its body.
  const second = 'data: {"jsonrpc":"2.0","id":"b","error":{"code":-32000,"message":"no"}}\n\n';
  handled.pipe.drain();
  replica.res.write(progress);
  await client.seen(progress);
  replica.res.write(first);
  await client.seen(first);
  let ended = false;
  void handled.pipe.done.then(() => (ended = true));
  replica.res.write(progress);
  await client.seen(`${first}${progress}`);
  t.notOk(ended, 'still open while a response is to come');
  // The replica keeps its stream open after the last response: the gateway ends it then.
  replica.res.write(second);
  t.equal(await handled.pipe.done, 'gateway_end');
  t.same(await client.ended, { body: `${progress}${first}${progress}${second}retry: ${RETRY_HINT_MS}\n\n`, aborted: false });
  await replica.closed;
  t.pass('the request to the replica was closed');
});

t.test('a POST stream whose response has passed ends at once when drained', async (t) => {
  const { replica, client: clientSide, handled } = await piped(t, { awaiting: [5] });
  const client = await clientSide;
  const response = 'data: {"jsonrpc":"2.0","id":5,"result":{}}\n\n';
  replica.res.write(response);
  await client.seen(response);
  handled.pipe.drain();
  t.equal(await handled.pipe.done, 'gateway_end');
  t.same(await client.ended, { body: `${response}retry: ${RETRY_HINT_MS}\n\n`, aborted: false });
});

t.test('a client that does not read holds the replica back; every event arrives once it reads', async (t) => {
  const { replica, client: clientSide, handled, gatewayRes } = await piped(t);
  const client = await clientSide;
  client.pause();
  const event = (i: number) => `data: #${String(i).padStart(6, '0')} `.padEnd(EVENT_BYTES - 2, '.') + '\n\n';
  const sent = flood(replica.res, FLOOD_EVENTS, event);
  const total = FLOOD_EVENTS * EVENT_BYTES;
  await waitFor('the replica held back, or done', FLOOD_DEADLINE_MS, () => (sent.blocked && stoppedReading(handled.body)) || sent.written === total);
  t.ok(sent.written < total, `the replica is held back after ${sent.written} of ${total} bytes`);
  t.ok(gatewayRes.writableLength <= HELD_LIMIT_BYTES, `the gateway holds ${gatewayRes.writableLength} bytes for the client, not the flood`);

  client.resume();
  await sent.finished;
  const { body } = await client.ended;
  const numbers = [...body.matchAll(/^data: #(\d{6}) /gm)].map((m) => Number(m[1]));
  t.same(numbers, Array.from({ length: FLOOD_EVENTS }, (_, i) => i), 'every event, in order');
  t.equal(await handled.pipe.done, 'upstream_end');
});

t.test('a continuation: nothing leaves until the replay is verified, then the replay and what follows', async (t) => {
  const { replica, client: clientSide, handled } = await piped(t, { verify: { expected: ['u1', 'u2'], timeoutMs: 60_000, maxBytes: 1 << 20 } });
  replica.res.write('id: u1\ndata: one\n\n');
  // The client has no response head yet; the second replayed event releases both.
  replica.res.write('id: u2\ndata: two\n\nid: u3\ndata: three\n\n');
  const client = await clientSide;
  t.equal(client.res.headers['x-started'], 'yes', 'the head of the continuation');
  await client.seen('data: three');
  const ids = [...client.text().matchAll(/^id: (.+)$/gm)].map((m) => testCodec.decode(m[1]!, 's1'));
  t.same(ids.map((d) => (d.kind === 'ok' ? d.fields.seq : d.kind)), [1, 2, 3], 'the replay under its recorded positions, then on');
  handled.pipe.end();
  t.equal(await handled.pipe.done, 'gateway_end');
});

for (const [why, options, replay] of [
  ['timeout', { timeoutMs: 200, maxBytes: 1 << 20 }, 'id: u1\ndata: one\n\n'],
  ['too_large', { timeoutMs: 60_000, maxBytes: 10 }, 'id: u1\ndata: one\n\n'],
  ['gap', { timeoutMs: 60_000, maxBytes: 1 << 20 }, 'id: u1\ndata: one\n\nid: u9\ndata: nine\n\n'],
] as const) {
  t.test(`a continuation whose replay fails (${why}) can still be answered as a new stream`, async (t) => {
    const { replica, client: clientSide, handled } = await piped(t, { verify: { expected: ['u1', 'u2'], ...options } });
    replica.res.write(replay);
    t.equal(await handled.failed, why);
    const client = await clientSide;
    t.equal(client.res.headers['x-started'], 'fresh', 'the head is the new stream\'s');
    t.same(await client.ended, { body: `data: fresh after ${why}\n\n`, aborted: false }, 'not a byte of the held replay left');
    t.equal(await handled.pipe.done, 'not_verified');
    await replica.closed;
    t.pass('the request to the replica was closed');
  });
}

t.test('a continuation whose replica ends before the replay is complete is not verified', async (t) => {
  const { replica, handled } = await piped(t, { verify: { expected: ['u1', 'u2'], timeoutMs: 60_000, maxBytes: 1 << 20 } });
  replica.res.end('id: u1\ndata: one\n\n');
  t.equal(await handled.failed, 'gap', 'what was replayed is short of what was recorded');
  t.equal(await handled.pipe.done, 'not_verified');
});

t.test("a journaled stream begins with the gateway's priming event, recorded at its first position, before the replica's events (J1)", async (t) => {
  const { replica, client: clientSide, handled } = await piped(t, { prime: true });
  const client = await clientSide;
  const [first] = testCodec.issuer('s1', TEST_INCARNATION).encode([1]);
  await client.seen(`id: ${first}\ndata: \n\n`);
  t.equal(client.text(), `id: ${first}\ndata: \n\n`, 'the priming event alone, before the replica sent anything');
  replica.res.end('data: one\n\n');
  const [second] = testCodec.issuer('s1', TEST_INCARNATION).encode([2]);
  t.same(await client.ended, { body: `id: ${first}\ndata: \n\nid: ${second}\ndata: one\n\n`, aborted: false }, "then the replica's event, at position 2");
  t.same(handled.events, [1], "the replica's events counted, not the gateway's own");
});
