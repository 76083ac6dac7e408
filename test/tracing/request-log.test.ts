/**
 * Logs and traces join: with traces on, a request's line (log.requests) carries the trace id of
 * its server span, and both name the session by the same fingerprint, never by its id. Two
 * instances of one configuration (one cursor key) name a session alike in their lines and spans.
 */
import { Writable } from 'node:stream';
import { Registry } from 'prom-client';
import t from 'tap';
import { CursorCodec } from '../../src/cursor/codec.js';
import { createLogger } from '../../src/logger.js';
import { buildServer } from '../../src/server.js';
import { createStore } from '../../src/store/index.js';
import { startTracing } from '../../src/tracing/index.js';
import { testConfig } from '../helpers/gateway.js';
import { post, rawSession, toolCallBody } from '../helpers/http.js';
import { attributeValues, SERVER, startOtlpReceiver } from '../helpers/otlp-receiver.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { SLACK_MS, waitFor } from '../helpers/wait.js';

const SECRET = 'request-log-cursor-secret-0123456789abcdef';
const TRACE = '7bf92f3577b34da6a3ce929d0e0e4739';
const SPANS = ['30f067aa0ba902b7', '40f067aa0ba902b7'];

t.test("a request's line carries its span's trace id; line and span name the session by one fingerprint on both instances", async (t) => {
  const receiver = await startOtlpReceiver(t);
  const tracing = await startTracing({ enabled: true, endpoint: `${receiver.origin}/v1/traces`, protocol: 'http/json' }, {});
  t.teardown(() => tracing!.shutdown());
  const [replica] = await spawnReplicas(t, 1);
  const config = testConfig({ replicas: [{ id: replica!.id, url: replica!.url }], cursor: { secret: SECRET }, log: { level: 'info', requests: true } });
  const store = createStore(config.store, createLogger('silent'));
  t.teardown(() => store.close());
  const lines: Record<string, unknown>[] = [];
  const urls: string[] = [];
  for (let i = 0; i < 2; i++) {
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString('utf8').split('\n')) if (line !== '') lines.push({ ...(JSON.parse(line) as Record<string, unknown>), instance: i });
        done();
      },
    });
    const gateway = buildServer(config, { store, registry: new Registry(), logger: createLogger('info', { destination }), tracing });
    t.teardown(() => gateway.close());
    const { mcpUrl } = await gateway.listen();
    urls.push(`${mcpUrl}${config.path}`);
  }

  const sessionId = await rawSession(urls[0]!);
  for (const [i, url] of urls.entries()) {
    const call = await post(url, toolCallBody('whoami'), { 'mcp-session-id': sessionId, traceparent: `00-${TRACE}-${SPANS[i]}-01` });
    t.equal(call.status, 200);
    await call.text();
  }
  const calls = () => lines.filter((l) => l['msg'] === 'request' && l['trace'] === TRACE);
  await waitFor('both lines of the calls', SLACK_MS, () => calls().length === 2);
  await waitFor('both server spans exported', SLACK_MS, async () => {
    await tracing!.flush();
    return SPANS.every((parent) => receiver.spans.some((s) => s.kind === SERVER && s.parentSpanId === parent));
  });

  const fingerprint = new CursorCodec(SECRET).sessionFingerprint(sessionId);
  for (const [i, parent] of SPANS.entries()) {
    const span = receiver.spans.find((s) => s.kind === SERVER && s.parentSpanId === parent)!;
    const line = calls().find((l) => l['instance'] === i);
    t.equal(line?.['trace'], span.traceId, `instance ${i}: the line carries its span's trace id`);
    t.equal(line?.['session'], fingerprint, `instance ${i}: the line names the session by its fingerprint under the cursor key`);
    t.equal(span.attributes['mcp_gateway.session'], fingerprint, `instance ${i}: and so does the span`);
  }
  const logged = JSON.stringify(lines);
  t.notOk(logged.includes(sessionId.slice(0, 8)), 'no line holds the session id, nor a prefix of it');
  for (const span of receiver.spans) t.notOk(attributeValues(span).some((v) => v.includes(sessionId.slice(0, 8))), `${span.name}: nor any attribute`);
});
