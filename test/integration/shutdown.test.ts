/**
 * SIGTERM with calls in flight (CONTRACT.md §1): a POST answered with an SSE stream is a request in
 * flight until its JSON-RPC response has passed. It finishes within shutdown.graceMs, response
 * included, while GET streams end at once with the retry hint; /readyz says 503 meanwhile; the
 * grace period ends as soon as nothing is in flight; the process exits 0 either way.
 */
import t, { type Test } from 'tap';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { startReplica } from '../../demo/src/replica.js';
import { connect } from '../helpers/client.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { MCP_ACCEPT, PROTOCOL_VERSION, rawSession } from '../helpers/http.js';
import { Collected } from '../helpers/watch.js';

const RETRY_HINT_MS = 1000;
const GRACE_OVER = 'grace period over: closing the remaining connections';

async function gatewayWithReplica(t: Test, graceMs: number): Promise<GatewayProcess> {
  const replica = await startReplica({ id: 'r1' });
  t.teardown(() => replica.close());
  return startGatewayProcess(t, {
    store: { type: 'memory' },
    replicas: [{ id: replica.id, url: replica.url }],
    shutdown: { graceMs, retryHintMs: RETRY_HINT_MS },
    log: { level: 'info' },
  });
}

/** A GET stream of a session of its own, open through the gateway; `body` resolves once it ended. */
async function openGetStream(t: Test, url: string): Promise<{ body: Promise<string> }> {
  const sessionId = await rawSession(url);
  const response = await fetch(url, { headers: { 'mcp-session-id': sessionId, accept: 'text/event-stream', 'mcp-protocol-version': PROTOCOL_VERSION } });
  t.equal(response.status, 200, 'the GET stream opened');
  return { body: response.text() };
}

t.test('SIGTERM during a slow tools/call: the result arrives, the GET stream ends at once, exit 0 before the grace period ends', async (t) => {
  // Far longer than the call: the exit comes when the call is over, not when the grace period is.
  const graceMs = 60_000;
  const steps = 30;
  const gateway = await gatewayWithReplica(t, graceMs);
  const get = await openGetStream(t, gateway.url);
  const { client } = await connect(t, gateway.url);

  const order: string[] = [];
  const progress = new Collected<number>();
  const call = client
    .callTool({ name: 'progress', arguments: { steps, intervalMs: 100 } }, CallToolResultSchema, {
      onprogress: (p) => progress.push(p.progress),
      // The SDK's own request timeout is 60 s: with it, a call cut at the gateway would hang the test.
      timeout: graceMs,
    })
    .then((result) => {
      order.push('result');
      return result;
    });
  await progress.until(1);

  const sentAt = performance.now();
  const exited = gateway.stop('SIGTERM');

  const body = await get.body;
  order.push('get ended');
  t.match(body, new RegExp(`retry: ${RETRY_HINT_MS}\\n\\n$`), 'the GET stream ended with the retry hint');
  const ready = await fetch(`${gateway.adminUrl}/readyz`);
  const readyBody = (await ready.json()) as { reasons?: string[] };
  const progressAtReady = progress.items.length;
  t.equal(ready.status, 503, '/readyz says 503 while the call runs');
  t.match(JSON.stringify(readyBody), /shutting down/, 'and says why');

  const result = await call;
  t.strictSame(result.content, [{ type: 'text', text: `done after ${steps} steps` }], 'the call delivered its result');
  t.strictSame(progress.items, Array.from({ length: steps }, (_, i) => i + 1), 'every progress notification, in order');
  t.ok(progressAtReady < steps, `the call was still in flight after the GET stream ended (${progressAtReady} of ${steps} steps then)`);
  t.strictSame(order, ['get ended', 'result'], 'the GET stream ended before the call did, not with it');

  t.equal(await exited, 0, 'exit 0');
  const tookMs = performance.now() - sentAt;
  t.ok(tookMs < graceMs, `exited within the grace period (${Math.round(tookMs)} ms of ${graceMs})`);
  t.notOk(
    gateway.logs.some((l) => l['msg'] === GRACE_OVER),
    'the grace period ended early: nothing was cut',
  );
});

t.test('a call that outlasts shutdown.graceMs is cut at the end of it, with the retry hint, and the process exits 0', async (t) => {
  const graceMs = 1_000;
  const steps = 100;
  const gateway = await gatewayWithReplica(t, graceMs);
  const sessionId = await rawSession(gateway.url);
  const response = await fetch(gateway.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: MCP_ACCEPT, 'mcp-protocol-version': PROTOCOL_VERSION, 'mcp-session-id': sessionId },
    body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'progress', arguments: { steps, intervalMs: 100 }, _meta: { progressToken: 'p' } } }),
  });
  t.equal(response.status, 200);
  t.match(response.headers.get('content-type') ?? '', /^text\/event-stream/, 'answered with an SSE stream');

  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = '';
  while (!text.includes('notifications/progress')) {
    const { value, done } = await reader.read();
    if (done) break;
    text += value;
  }
  t.match(text, /notifications\/progress/, 'the call runs: progress arrives');

  const sentAt = performance.now();
  const exited = gateway.stop('SIGTERM');
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += value;
  }
  const cutAfterMs = performance.now() - sentAt;

  t.ok(cutAfterMs >= graceMs, `the stream ran on until the grace period was over (${Math.round(cutAfterMs)} ms, grace ${graceMs} ms)`);
  t.notMatch(text, /"id":7/, 'no response: the call was cut');
  const progressSeen = text.match(/notifications\/progress/g)?.length ?? 0;
  t.ok(progressSeen < steps, `cut before the tool finished (${progressSeen} of ${steps} steps)`);
  t.match(text, new RegExp(`retry: ${RETRY_HINT_MS}\\n\\n$`), 'the cut stream ended with the retry hint');
  t.equal(await exited, 0, 'exit 0');
  t.ok(
    gateway.logs.some((l) => l['msg'] === GRACE_OVER),
    'the log says the grace period ran out',
  );
});
