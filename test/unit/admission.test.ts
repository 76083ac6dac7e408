/** Storm admission (src/resumption/admission.ts): bounded decisions, a bounded queue, refusals at once. */
import { once } from 'node:events';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { Admission, endTurnOnHeaders, type AdmissionLimits, type Turn } from '../../src/resumption/admission.js';

const limits = (l: Partial<AdmissionLimits> = {}): (() => AdmissionLimits) => () => ({ maxConcurrent: 2, maxQueued: 2, queueMs: 60_000, ...l });

t.test('up to maxConcurrent at once, then the queue in arrival order, then refused at once', async (t) => {
  const admission = new Admission(limits());
  const a = admission.enter() as Turn;
  const b = admission.enter() as Turn;
  t.type(a, 'function', 'a turn at once');
  t.type(b, 'function', 'a second turn at once');
  const order: string[] = [];
  const c = (admission.enter() as Promise<Turn | undefined>).then((turn) => (order.push('c'), turn));
  const d = (admission.enter() as Promise<Turn | undefined>).then((turn) => (order.push('d'), turn));
  t.equal(admission.enter(), undefined, 'past the queue: refused at once');
  t.strictSame([admission.running, admission.queued], [2, 2]);
  a();
  a();
  const cTurn = await c;
  t.type(cTurn, 'function', 'the first waiting gets the turn that came free');
  t.strictSame([admission.running, admission.queued], [2, 1], 'a turn ended twice counts once');
  b();
  await d;
  t.strictSame(order, ['c', 'd'], 'in arrival order');
});

t.test('a wait longer than queueMs is refused, and leaves the queue', async (t) => {
  const admission = new Admission(limits({ maxConcurrent: 1, queueMs: 20 }));
  const held = admission.enter() as Turn;
  t.equal(await admission.enter(), undefined, 'refused after its wait');
  t.equal(admission.queued, 0, 'no longer queued');
  held();
  t.type(admission.enter(), 'function', 'the next is admitted at once');
});

t.test('a newcomer does not pass those waiting, and the limits are read anew (a reload)', async (t) => {
  let max = 1;
  const admission = new Admission(() => ({ maxConcurrent: max, maxQueued: 4, queueMs: 60_000 }));
  const held = admission.enter() as Turn;
  const waiting = admission.enter() as Promise<Turn | undefined>;
  max = 3;
  t.type(admission.enter(), 'object', 'queued behind the one waiting, though a turn is free');
  held();
  t.type(await waiting, 'function');
  t.equal(admission.running, 2, 'both waiting ones run once a turn ends, up to the new bound');
});

t.test("a turn ends when the response's headers leave, or when it closes without them", async (t) => {
  const ended: string[] = [];
  let closedEnded: () => void = () => undefined;
  const closed = new Promise<void>((resolve) => (closedEnded = resolve));
  const server = createServer((req, res) => {
    endTurnOnHeaders(res, (headers) => {
      ended.push(`${req.url!} ${headers ? 'headers' : 'closed'}`);
      if (req.url === '/closed') closedEnded();
    });
    if (req.url === '/headers') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(': open\n\n');
      t.strictSame(ended, ['/headers headers'], 'ended as the headers left, the stream still open');
      res.end();
    } else {
      req.socket.destroy();
    }
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => server.close());
  const { port } = server.address() as AddressInfo;
  const get = (path: string) =>
    new Promise<void>((resolve) => {
      const req = httpRequest({ host: '127.0.0.1', port, path }, (res) => res.resume().on('end', resolve));
      req.on('error', () => resolve());
      req.end();
    });
  await get('/headers');
  await get('/closed');
  await closed;
  t.strictSame(ended, ['/headers headers', '/closed closed'], 'each once, saying how');
});
