/**
 * src/upstream/budget.ts and the GET pool of src/upstream/index.ts, on a real HTTP server on
 * loopback: GETs to a replica stay within upstream.maxStreams, each given back when its body
 * closes; one over it asks for room (a held stream let go) and is refused at once when there is
 * none; a GET whose client left while room was made is never sent; and requests other than GETs
 * never wait behind streams.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import t, { type Test } from 'tap';
import type { ReplicaConfig } from '../../src/config/schema.js';
import { faultOf } from '../../src/upstream/faults.js';
import { StreamBudgets } from '../../src/upstream/budget.js';
import { StreamBudgetExceeded, UpstreamAbort, Upstreams } from '../../src/upstream/index.js';
import { listenOnLoopback } from '../helpers/http.js';

const MAX = 3;

/** A replica that opens an SSE stream for each GET (kept until the test ends it) and answers POSTs at once. */
async function replica(t: Test) {
  const streams: ServerResponse[] = [];
  const gets: IncomingMessage[] = [];
  const server = createServer((req, res) => {
    if (req.method === 'GET') {
      gets.push(req);
      streams.push(res);
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(': open\n\n');
      return;
    }
    req.resume();
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{}');
  });
  const port = await listenOnLoopback(t, server);
  return { config: { id: 'r1', url: `http://127.0.0.1:${port}/mcp` } as ReplicaConfig, streams, gets };
}

function counting() {
  const counts = { exceeded: 0, open: 0 };
  return { counts, events: { changed: (_: string, open: number) => (counts.open = open), exceeded: () => counts.exceeded++ } };
}

function upstreams(t: Test, events = counting().events): Upstreams {
  const u = new Upstreams({ connectTimeoutMs: 2000, headersTimeoutMs: 2000, connections: 2, maxStreams: MAX }, events);
  t.teardown(() => u.close());
  return u;
}

const get = (u: Upstreams, r: ReplicaConfig, signal?: UpstreamAbort) =>
  u.send(r, { method: 'GET', path: '/mcp', headers: { accept: 'text/event-stream' }, signal });
/** Destroys a response body as the gateway does (an aborted body emits 'error': listened to). */
function cut(response: { body: NodeJS.ReadableStream & { destroy(): void } }): void {
  response.body.on('error', () => undefined);
  response.body.destroy();
}
const post = (u: Upstreams, r: ReplicaConfig) => u.send(r, { method: 'POST', path: '/mcp', headers: { 'content-type': 'application/json' }, body: Buffer.from('{}') });

t.test('GETs within the budget; one over it is refused at once, counted, never sent', async (t) => {
  const r = await replica(t);
  const { counts, events } = counting();
  const u = upstreams(t, events);
  const open = await Promise.all(Array.from({ length: MAX }, () => get(u, r.config)));
  t.equal(u.budgets.open('r1'), MAX, 'each GET holds a place');
  t.equal(counts.open, MAX, 'reported as it changed');
  t.same(u.budgets.full(), [['r1', MAX]], 'the replica shows as full');

  const refused = await get(u, r.config).then(
    () => undefined,
    (err: unknown) => err,
  );
  t.type(refused, StreamBudgetExceeded, 'the next GET is refused');
  t.equal(faultOf(refused), 'budget', "and it is nobody's fault: the replica's health stays");
  t.equal(counts.exceeded, 1, 'counted once');
  t.equal(r.gets.length, MAX, 'and never reached the replica');

  // Requests that are not GETs have connections of their own: answered while every stream is open.
  const answered = await Promise.all([post(u, r.config), post(u, r.config), post(u, r.config)]);
  t.same(
    answered.map((a) => a.statusCode),
    [200, 200, 200],
    'POSTs are answered beside the streams',
  );
  await Promise.all(answered.map((a) => a.body.dump()));

  // A stream that ends gives its place back once its body closed.
  cut(open[0]!);
  await new Promise((resolve) => open[0]!.body.once('close', resolve));
  t.equal(u.budgets.open('r1'), MAX - 1, 'a closed stream gave its place back');
  const again = await get(u, r.config);
  t.equal(again.statusCode, 200, 'so the next GET opens');
  // The replica ending its stream gives the place back too.
  r.streams[1]!.end();
  open[1]!.body.resume();
  await once(open[1]!.body, 'close');
  cut(again);
  t.equal(u.budgets.open('r1'), MAX - 1, 'a stream the replica ended gave its place back');
});

t.test('a GET over the budget takes the place a held stream gives up', async (t) => {
  const r = await replica(t);
  const u = upstreams(t);
  const open = await Promise.all(Array.from({ length: MAX }, () => get(u, r.config)));
  let asked = 0;
  u.budgets.onMakeRoom(async (id) => {
    asked++;
    t.equal(id, 'r1', 'room is asked of the replica at its budget');
    // The pumps let the oldest held stream go: its replica body is destroyed.
    cut(open[0]!);
    return true;
  });
  const taken = await get(u, r.config);
  t.equal(taken.statusCode, 200, 'the GET opens in the place given up');
  t.equal(asked, 1, 'room was asked once');
  t.equal(u.budgets.open('r1'), MAX, 'and the budget holds');
  t.equal(r.gets.length, MAX + 1);
});

t.test('no held stream to let go: refused at once', async (t) => {
  const r = await replica(t);
  const u = upstreams(t);
  await Promise.all(Array.from({ length: MAX }, () => get(u, r.config)));
  u.budgets.onMakeRoom(async () => false);
  await t.rejects(get(u, r.config), StreamBudgetExceeded);
  t.equal(r.gets.length, MAX, 'nothing was sent');
});

t.test('a GET whose client left while room was made is never sent, and gives its place back', async (t) => {
  const r = await replica(t);
  const u = upstreams(t);
  const open = await Promise.all(Array.from({ length: MAX }, () => get(u, r.config)));
  const abort = new UpstreamAbort();
  u.budgets.onMakeRoom(async () => {
    abort.abort();
    cut(open[0]!);
    return true;
  });
  const err = await get(u, r.config, abort).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.equal(faultOf(err), 'aborted', 'the client went away: nobody is at fault');
  t.equal(r.gets.length, MAX, 'the GET never reached the replica');
  t.equal(u.budgets.open('r1'), MAX - 1, 'its place was given back');
});

t.test('budget bookkeeping: a place is given back once, whatever calls it; a resize counts what is open', async (t) => {
  const { counts, events } = counting();
  const budgets = new StreamBudgets(2, events);
  const a = await budgets.acquire('r1');
  const b = await budgets.acquire('r1');
  await t.rejects(budgets.acquire('r1'), StreamBudgetExceeded);
  t.equal(await budgets.acquire('r2').then(() => budgets.open('r2')), 1, 'each replica has a budget of its own');
  a();
  a();
  t.equal(budgets.open('r1'), 1, 'given back once');
  budgets.resize(1);
  t.same(budgets.full(), [['r1', 1], ['r2', 1]], 'a smaller budget counts the streams open');
  await t.rejects(budgets.acquire('r1'), StreamBudgetExceeded);
  b();
  t.equal(budgets.open('r1'), 0);
  t.equal(counts.exceeded, 2);
});
