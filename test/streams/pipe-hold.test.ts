/**
 * src/streams/pipe.ts with the journal (CONTRACT.md §8 J2, J3), on real loopback sockets: a client
 * that goes away leaves the stream held, read on and recorded with nothing written; a client that
 * attaches gets what follows; a held POST stream ends once its response has passed; a held stream
 * ends when released, closing the request to the replica.
 */
import { once } from 'node:events';
import { createServer, get, type ServerResponse } from 'node:http';
import t, { type Test } from 'tap';
import { CursorCodec } from '../../src/cursor/codec.js';
import { pipeSse, type HoldOptions } from '../../src/streams/pipe.js';
import { SseRewriter } from '../../src/sse/rewriter.js';
import { startChain } from '../helpers/stream-chain.js';
import { listenOnLoopback } from '../helpers/http.js';

const codec = new CursorCodec('a-test-secret-of-at-least-32-bytes!!');

async function heldPipe(t: Test, untilAnswered: boolean) {
  const recorded: string[] = [];
  const holds: string[] = [];
  let recordedWaiter: (() => void) | undefined;
  const hold: HoldOptions = { untilAnswered, onHeld: () => holds.push('held'), onAttached: () => holds.push('attached') };
  const chain = await startChain(
    t,
    (res) => res.writeHead(200, { 'content-type': 'text/event-stream' }),
    (body, res: ServerResponse) => {
      const rewriter = new SseRewriter({
        cursors: {
          codec,
          sessionId: 's1',
          incarnation: 'AAAAAAAAAAAAAAAA',
          journal: true,
          sink: {
            record: async (_from, _ids, _responded, payloads) => {
              recorded.push(...(payloads?.texts() ?? []));
              recordedWaiter?.();
              return 'ok';
            },
          },
        },
        head: 0,
        maxEventBytes: 1 << 16,
        trackResponses: untilAnswered,
        ...(untilAnswered ? { awaiting: [1] } : {}),
      });
      return pipeSse({ body, res, rewriter, start: () => res.writeHead(200, { 'content-type': 'text/event-stream' }), onEvents: () => undefined, retryHintMs: 1000, hold });
    },
  );
  const recordedUntil = async (n: number) => {
    while (recorded.length < n) await new Promise<void>((resolve) => (recordedWaiter = resolve));
  };
  return { ...chain, recorded, holds, recordedUntil };
}

/** A second client: its request's response is attached to `pipe` once its head has left. */
async function attachClient(t: Test, pipe: ReturnType<typeof pipeSse>) {
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    pipe.attach(res);
  });
  const port = await listenOnLoopback(t, server);
  const req = get({ host: '127.0.0.1', port, path: '/', agent: false });
  const [res] = (await once(req, 'response')) as [import('node:http').IncomingMessage];
  let text = '';
  res.setEncoding('utf8');
  const waiters: (() => void)[] = [];
  res.on('data', (chunk: string) => {
    text += chunk;
    for (const w of waiters.splice(0)) w();
  });
  res.on('error', () => undefined);
  req.on('error', () => undefined);
  const ended = new Promise<void>((resolve) => res.once('close', resolve));
  return {
    text: () => text,
    seen: async (what: string) => {
      while (!text.includes(what)) await new Promise<void>((resolve) => waiters.push(resolve));
    },
    destroy: () => req.destroy(),
    ended,
  };
}

t.test('a GET stream held: read on and journaled with no client, attached again, released', async (t) => {
  const { replica, client: clientSide, handled: pipe, recorded, holds, recordedUntil } = await heldPipe(t, false);
  let closed = false;
  void replica.closed.then(() => (closed = true));
  const client = await clientSide;
  replica.res.write('data: one\n\n');
  await client.seen('data: one');
  client.destroy();
  await client.ended;
  // The pipe sees its client go on the gateway side: it is held from then on.
  while (!pipe.held) await new Promise((resolve) => setImmediate(resolve));
  t.same(holds, ['held']);
  replica.res.write('data: two\n\n');
  await recordedUntil(2);
  t.same(recorded, ['data: one\n\n', 'data: two\n\n'], 'journaled while held, without id lines');
  // Passed on (to no client) once recorded.
  while (pipe.delivered < 2) await new Promise((resolve) => setImmediate(resolve));
  t.notOk(closed, 'the request to the replica stays open');

  const second = await attachClient(t, pipe);
  t.same(holds, ['held', 'attached']);
  replica.res.write('data: three\n\n');
  await second.seen('data: three');
  const ids = [...second.text().matchAll(/^id: (.+)$/gm)].map((m) => codec.decode(m[1]!, 's1'));
  t.same(ids.map((d) => (d.kind === 'ok' ? d.fields.seq : d.kind)), [3], 'what follows, under its own position');
  t.notMatch(second.text(), /one|two/, 'nothing from before the attach (the journal replays that)');
  pipe.release('hold_expired');
  t.notOk(pipe.held, 'release does nothing while a client is attached');

  second.destroy();
  await second.ended;
  while (!pipe.held) await new Promise((resolve) => setImmediate(resolve));
  pipe.release('hold_expired');
  t.equal(await pipe.done, 'hold_expired');
  await replica.closed;
  t.pass('the request to the replica was closed');
});

t.test('a POST stream held until its response has passed', async (t) => {
  const { replica, client: clientSide, handled: pipe, recorded, recordedUntil } = await heldPipe(t, true);
  const client = await clientSide;
  replica.res.write('data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n');
  await client.seen('progress');
  client.destroy();
  await client.ended;
  while (!pipe.held) await new Promise((resolve) => setImmediate(resolve));
  replica.res.write('data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":2}}\n\n');
  await recordedUntil(2);
  t.notOk(await Promise.race([pipe.done, Promise.resolve(false)]), 'still held while the call runs');
  replica.res.write('data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n');
  t.equal(await pipe.done, 'hold_answered');
  t.equal(recorded.length, 3, 'the response was journaled before the end');
  await replica.closed;
  t.pass('the request to the replica was closed');
});

t.test('a POST stream already answered is not held', async (t) => {
  const { replica, client: clientSide, handled: pipe } = await heldPipe(t, true);
  const client = await clientSide;
  replica.res.write('data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n');
  await client.seen('result');
  client.destroy();
  t.equal(await pipe.done, 'client_gone');
});
