/**
 * R5: SSE passes through unbuffered (each event reaches the client before the replica writes the
 * next), is not cut by any timeout while open, and ends on either side promptly.
 */
import { setTimeout as delay } from 'node:timers/promises';
import t from 'tap';
import { metricValue, startGateway } from '../helpers/gateway.js';
import { initializeBody, post } from '../helpers/http.js';
import { SseReader, startScriptedUpstream } from '../helpers/sse-upstream.js';
import { bound, waitFor } from '../helpers/wait.js';

const SILENCE_MS = 1500;
/** J1: a journaled stream's first block, the gateway's priming event (its cursor at position 1, empty data). */
const PRIMING = /^id: 1\.[A-Za-z0-9_-]{16}\.1\.[^\n]+\ndata: ?$/;

t.test('a long stream passes event by event, through silences longer than every timeout', async (t) => {
  const upstream = await startScriptedUpstream(t);
  // Every upstream timeout the gateway sets is shorter than the silences below.
  const gw = await startGateway(t, {
    replicas: [{ id: 'scripted', url: upstream.url }],
    upstream: { connectTimeoutMs: 300, headersTimeoutMs: 300 },
  });
  const init = await post(gw.url, initializeBody());
  const sessionId = init.headers.get('mcp-session-id')!;
  await init.text();

  const response = await fetch(gw.url, { headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream' } });
  t.equal(response.status, 200, 'headers reached the client before any event was written');
  t.equal(response.headers.get('content-type'), 'text/event-stream');
  t.equal(response.headers.get('content-encoding'), null, 'not compressed');
  const stream = await upstream.nextStream();
  const reader = new SseReader(response.body!);
  t.match(await reader.next(), PRIMING, "the stream begins with the gateway's priming event, before the replica's first");

  for (let i = 1; i <= 5; i++) {
    // The next event is written only once the previous one arrived: a buffering proxy deadlocks here.
    stream.emit(`id: e${i}\ndata: {"n":${i}}\n\n`);
    const block = await reader.next();
    // Positions from 2 on: the priming event is the first.
    t.match(block, new RegExp(`^id: 1\\.[A-Za-z0-9_-]{16}\\.${i + 1}\\.[^\\n]+\\ndata: \\{"n":${i}\\}$`), `event ${i} arrived, id rewritten, before event ${i + 1} was written`);
    if (i === 2 || i === 4) await delay(SILENCE_MS);
  }
  t.equal(await metricValue(gw.registry, 'mcp_gateway_sse_events_total', { replica: 'scripted' }), 5, 'events counted');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_sse_streams_open', { replica: 'scripted' }), 1, 'one stream open');

  stream.end();
  t.equal(await reader.next(), undefined, "the client's stream ended when the replica's did");
  await stream.closed;
  t.equal(await metricValue(gw.registry, 'mcp_gateway_sse_streams_open', { replica: 'scripted' }), 0, 'no stream open');
});

t.test('journal off: the client going away closes the request to the replica', async (t) => {
  const upstream = await startScriptedUpstream(t);
  const gw = await startGateway(t, { replicas: [{ id: 'scripted', url: upstream.url }], resumption: { journal: { enabled: false } } });
  const init = await post(gw.url, initializeBody());
  const sessionId = init.headers.get('mcp-session-id')!;
  await init.text();
  const abort = new AbortController();
  const response = await fetch(gw.url, { headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream' }, signal: abort.signal });
  const stream = await upstream.nextStream();
  const reader = new SseReader(response.body!);
  stream.emit('data: one\n\n');
  t.equal(await reader.next(), 'data: one');
  abort.abort();
  await stream.closed;
  t.pass('the replica saw its request closed');
});

t.test('gateway shutdown ends open streams and still lets the client read what was sent', async (t) => {
  const upstream = await startScriptedUpstream(t);
  const gw = await startGateway(t, { replicas: [{ id: 'scripted', url: upstream.url }] });
  const init = await post(gw.url, initializeBody());
  const sessionId = init.headers.get('mcp-session-id')!;
  await init.text();
  const response = await fetch(gw.url, { headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream' } });
  const stream = await upstream.nextStream();
  const reader = new SseReader(response.body!);
  t.match(await reader.next(), PRIMING, "the gateway's priming event first (J1)");
  stream.emit('id: a\ndata: before\n\n');
  t.match(await reader.next(), /^id: 1\..+\ndata: before$/);
  await gw.close();
  t.equal(await reader.next(), 'retry: 1000', 'a retry hint, so that the client reconnects (elsewhere)');
  t.equal(await reader.next(), undefined, 'the stream ended cleanly');
  await stream.closed;
  t.pass('and the request to the replica was closed');
});

t.test('with the journal, the client going away leaves the stream held for holdMs, then closes the request to the replica', async (t) => {
  const upstream = await startScriptedUpstream(t);
  const gw = await startGateway(t, { replicas: [{ id: 'scripted', url: upstream.url }], resumption: { journal: { holdMs: 1000 } } });
  const init = await post(gw.url, initializeBody());
  const sessionId = init.headers.get('mcp-session-id')!;
  await init.text();
  const abort = new AbortController();
  const response = await fetch(gw.url, { headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream' }, signal: abort.signal });
  const stream = await upstream.nextStream();
  const reader = new SseReader(response.body!);
  t.match(await reader.next(), PRIMING, "the gateway's priming event first (J1)");
  stream.emit('data: one\n\n');
  t.match(await reader.next(), /^id: 1\..+\ndata: one$/, 'a cursor, though the replica sent no id (J1)');
  abort.abort();
  await waitFor('the stream held', bound(1000), async () => (await metricValue(gw.registry, 'mcp_gateway_held_streams')) === 1);
  stream.emit('data: two\n\n');
  await waitFor('the event journaled while held', bound(1000), async () => (await metricValue(gw.registry, 'mcp_gateway_journal_events_total')) === 3);
  await stream.closed;
  t.equal(await metricValue(gw.registry, 'mcp_gateway_hold_expiries_total', { reason: 'timeout' }), 1, 'closed when the hold expired');
  t.equal(await metricValue(gw.registry, 'mcp_gateway_held_streams'), 0, 'no longer held');
});
