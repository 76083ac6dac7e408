/**
 * src/streams/relay.ts on real loopback sockets: a replica's body reaches the client as it arrives, a
 * client that stops reading holds the replica back instead of filling the gateway's memory, and
 * either end, or the gateway, ends the other.
 */
import type { Readable } from 'node:stream';
import t, { type Test } from 'tap';
import { relay, type Relay, type RelayEnd } from '../../src/streams/relay.js';
import { flood, startChain, stoppedReading } from '../helpers/stream-chain.js';
import { bound, waitFor } from '../helpers/wait.js';

/** Chunks of 64 KiB, each starting with its number, so that order and completeness can be checked. */
const CHUNK_BYTES = 64 * 1024;
/** Far more than the loopback socket buffers on both hops can hold (a few MiB each). */
const FLOOD_CHUNKS = 768;
/** What the gateway may hold in memory for a client that does not read: a few chunks, not the flood. */
const HELD_LIMIT_BYTES = 16 * CHUNK_BYTES;
const FLOOD_DEADLINE_MS = bound(30_000);

const chunk = (i: number) => `#${String(i).padStart(6, '0')}`.padEnd(CHUNK_BYTES, '.');

async function relayed(t: Test) {
  const chain = await startChain(
    t,
    (res) => res.writeHead(200, { 'content-type': 'application/octet-stream' }),
    (body, res): { relay: Relay<RelayEnd>; body: Readable } => {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.flushHeaders();
      return { relay: relay(body, res), body };
    },
  );
  return { ...chain, client: await chain.client };
}

t.test('the body passes as it arrives; the replica ending ends the client response', async (t) => {
  const { replica, client, handled } = await relayed(t);
  replica.res.write('first');
  // Seen before the replica wrote anything else: nothing waits for more.
  await client.seen('first');
  replica.res.end('second');
  t.same(await client.ended, { body: 'firstsecond', aborted: false }, 'the client gets the whole body and a clean end');
  t.equal(await handled.relay.done, 'upstream_end');
});

t.test('the client going away closes the request to the replica', async (t) => {
  const { replica, client, handled } = await relayed(t);
  replica.res.write('first');
  await client.seen('first');
  client.destroy();
  t.equal(await handled.relay.done, 'client_gone');
  await replica.closed;
  t.pass("the replica saw its request closed");
});

t.test('the replica failing mid-body ends the client response after what arrived', async (t) => {
  const { replica, client, handled } = await relayed(t);
  replica.res.write('first');
  await client.seen('first');
  replica.res.socket?.destroy();
  t.equal(await handled.relay.done, 'upstream_error');
  const { body } = await client.ended;
  t.equal(body, 'first', 'the client keeps what arrived, and its response ends');
});

t.test('the gateway ending the stream ends both sides', async (t) => {
  const { replica, client, handled } = await relayed(t);
  replica.res.write('first');
  await client.seen('first');
  handled.relay.end();
  t.equal(await handled.relay.done, 'gateway_end');
  t.same(await client.ended, { body: 'first', aborted: false }, 'the client response ends cleanly');
  await replica.closed;
  t.pass('the request to the replica was closed');
});

t.test('a client that does not read holds the replica back; nothing is lost once it reads', async (t) => {
  const { replica, client, handled, gatewayRes } = await relayed(t);
  client.pause();
  const sent = flood(replica.res, FLOOD_CHUNKS, chunk);
  await waitFor('the replica held back, or done', FLOOD_DEADLINE_MS, async () => (sent.blocked && stoppedReading(handled.body)) || sent.written === FLOOD_CHUNKS * CHUNK_BYTES);
  t.ok(sent.written < FLOOD_CHUNKS * CHUNK_BYTES, `the replica is held back after ${sent.written} of ${FLOOD_CHUNKS * CHUNK_BYTES} bytes`);
  t.ok(gatewayRes.writableLength <= HELD_LIMIT_BYTES, `the gateway holds ${gatewayRes.writableLength} bytes for the client, not the flood`);

  client.resume();
  await sent.finished;
  const { body, aborted } = await client.ended;
  t.notOk(aborted);
  t.equal(body.length, FLOOD_CHUNKS * CHUNK_BYTES, 'every byte arrived');
  const numbers = [...body.matchAll(/#(\d{6})/g)].map((m) => Number(m[1]));
  t.same(numbers, Array.from({ length: FLOOD_CHUNKS }, (_, i) => i), 'in order');
  t.equal(await handled.relay.done, 'upstream_end');
});
