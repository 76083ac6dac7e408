/**
 * One resumption continued through the other instance, as its trace is exported: a tool call's
 * SSE stream answered through instance A, its cursor resumed on instance B (the two share one
 * store), B's decision on B's server span: the owner replays (B's request to the replica under
 * it), or, with the journal on, the journal A wrote serves it. Real SDK replica, real HTTP on loopback, protobuf decoded by the receiver in the test.
 */
import t from 'tap';
import { createLogger } from '../../src/logger.js';
import { createStore } from '../../src/store/index.js';
import { startTracing } from '../../src/tracing/index.js';
import { metricValue, startGateway, testConfig } from '../helpers/gateway.js';
import { PROTOCOL_VERSION, post, rawSession, toolCallBody } from '../helpers/http.js';
import { attributeValues, CLIENT, SERVER, startOtlpReceiver } from '../helpers/otlp-receiver.js';
import { bodyUntilResult, idsOf, rawStreams } from '../helpers/raw-sse.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { SLACK_MS, waitFor } from '../helpers/wait.js';

t.setTimeout(120_000);

const TOKEN = 'Bearer tok-resume-secret';
const TRACE = '5bf92f3577b34da6a3ce929d0e0e4737';
const CALL_SPAN = '10f067aa0ba902b7';
const RESUME_SPAN = '20f067aa0ba902b7';
const OTHER_TRACE = '6bf92f3577b34da6a3ce929d0e0e4738';

for (const journal of [false, true]) {
  t.test(`a cursor of instance A resumed on instance B, ${journal ? 'from the journal' : 'the owner replaying'}: client → B${journal ? '' : ' → replica'}, the decision on B`, async (t) => {
    const receiver = await startOtlpReceiver(t);
    const tracing = await startTracing({ enabled: false }, { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.origin}/v1/traces` });
    t.ok(tracing, 'OTEL_TRACES_EXPORTER=otlp with a traces endpoint turns traces on');
    t.teardown(() => tracing!.shutdown());
    const [replica] = await spawnReplicas(t, 1);
    const settings = {
      replicas: [{ id: replica!.id, url: replica!.url }],
      security: { credentialHeaders: ['authorization'] },
      // Off: the owner's own log replays, B asks the replica for what followed the cursor. On: B
      // reads the journal A wrote to the store.
      resumption: { journal: { enabled: journal } },
    };
    const store = createStore(testConfig(settings).store, createLogger('silent'));
    t.teardown(() => store.close());
    const a = await startGateway(t, settings, store, tracing);
    const b = await startGateway(t, settings, store, tracing);

    const sessionId = await rawSession(a.url, { authorization: TOKEN });
    const call = await post(a.url, toolCallBody('emit', { count: 3, intervalMs: 1, stream: 'request' }), {
      authorization: TOKEN,
      'mcp-session-id': sessionId,
      traceparent: `00-${TRACE}-${CALL_SPAN}-01`,
    });
    t.equal(call.status, 200);
    const cursors = idsOf(await call.text());
    t.ok(cursors.length >= 3, `the call's stream carried cursors (${cursors.length})`);

    const resumed = await fetch(b.url, {
      headers: {
        accept: 'text/event-stream',
        authorization: TOKEN,
        'mcp-session-id': sessionId,
        'mcp-protocol-version': PROTOCOL_VERSION,
        'last-event-id': cursors[0]!,
        traceparent: `00-${TRACE}-${RESUME_SPAN}-01`,
      },
    });
    t.equal(resumed.status, 200);
    t.equal(resumed.headers.get('mcp-resumption'), 'continued');
    t.ok((await bodyUntilResult(resumed)).includes('"result"'), "the call's answer is replayed through B");
    // B's span ends when B sees the client go: exported by the flush after that.
    const resumedSpan = () => receiver.spans.some((s) => s.kind === SERVER && s.parentSpanId === RESUME_SPAN);
    await waitFor("B's server span is exported", SLACK_MS, async () => {
      await tracing!.flush();
      return resumedSpan();
    });

    const spans = receiver.spans.filter((s) => s.traceId === TRACE);
    const onA = spans.find((s) => s.kind === SERVER && s.parentSpanId === CALL_SPAN);
    const onB = spans.find((s) => s.kind === SERVER && s.parentSpanId === RESUME_SPAN);
    t.ok(onA && onB, "both requests' server spans are in the client's trace");
    t.ok(onA!.attributes['mcp_gateway.instance'], 'each names its instance');
    t.not(onB!.attributes['mcp_gateway.instance'], onA!.attributes['mcp_gateway.instance'], 'the call on one instance, the resumption on the other');
    // The cursor key is agreed through the store the two share: one name for the session on both.
    const view = (await (await fetch(`${b.adminUrl}/debug/sessions/${sessionId}`)).json()) as { fingerprints?: { current: string } };
    t.match(view.fingerprints?.current, /^[0-9a-f]{12}$/, "the admin listener names the session's fingerprint");
    t.equal(onA!.attributes['mcp_gateway.session'], view.fingerprints?.current, 'A names the session by its fingerprint');
    t.equal(onB!.attributes['mcp_gateway.session'], view.fingerprints?.current, 'and B by the same');
    t.match(onB!.attributes, {
      'http.request.method': 'GET',
      'mcp_gateway.resumption.decision': journal ? 'journal' : 'continue',
      'mcp_gateway.resumption.from': journal ? 'journal' : 'owner',
      'mcp_gateway.resumption.record_awaited': false,
      'mcp_gateway.resumption.outcome': 'continued',
    });
    const decision = onB!.events.find((e) => e.name === 'mcp_gateway.resumption');
    t.match(decision?.attributes, { outcome: 'continued', decision: journal ? 'journal' : 'continue', from: journal ? 'journal' : 'owner' }, 'the decision as an event on B');
    const toReplica = spans.filter((s) => s.kind === CLIENT && s.parentSpanId === onB!.spanId && s.attributes['mcp_gateway.replica'] === replica!.id);
    if (journal) {
      t.equal(toReplica.length, 0, 'the journal served it: B asked no replica');
      t.match(onB!.attributes['mcp_gateway.resumption.decisions'], /^journal(,complete)?$/, 'the decisions made, in order');
      t.ok(spans.some((s) => s.name === 'store readJournal' && s.parentSpanId === onB!.spanId), "B's journal read under B's span");
    } else {
      t.equal(onB!.attributes['mcp_gateway.replica'], replica!.id);
      t.equal(toReplica.length, 1, "B's replay request to the replica, under B's span");
      t.equal(toReplica[0]!.attributes['http.request.method'], 'GET');
      const replay = spans.find((s) => s.name === 'resumption await_replay' && s.parentSpanId === onB!.spanId);
      t.equal(replay?.attributes['mcp_gateway.resumption.replay'], 'verified', "the wait for the owner's replay, verified, under B's span");
    }
    t.ok(
      spans.some((s) => s.name.startsWith('store ') && s.parentSpanId === onB!.spanId),
      "B's store reads under B's span",
    );

    for (const span of receiver.spans) {
      const values = attributeValues(span);
      for (const secret of ['tok-resume-secret', sessionId, sessionId.slice(0, 8), ...cursors]) t.notOk(values.some((v) => v.includes(secret)), `${span.name}: no secret in an attribute`);
    }
  });
}

t.test("a GET stream held on A, taken over by a plain GET on B: B's span names A's pump and links to A's span, in another trace", async (t) => {
  const receiver = await startOtlpReceiver(t);
  const tracing = await startTracing({ enabled: true, endpoint: `${receiver.origin}/v1/traces`, protocol: 'http/json' }, {});
  t.teardown(() => tracing!.shutdown());
  // No event log: one GET stream per session, which only the held one's takeover can continue.
  const [replica] = await spawnReplicas(t, 1, { eventStore: false });
  const settings = { replicas: [{ id: replica!.id, url: replica!.url }], resumption: { journal: { holdMs: 600_000 } } };
  const store = createStore(testConfig(settings).store, createLogger('silent'));
  t.teardown(() => store.close());
  const a = await startGateway(t, settings, store, tracing);
  const b = await startGateway(t, settings, store, tracing);
  const sessionId = await rawSession(a.url);
  const streams = rawStreams(t);
  const first = await streams.open(a.url, sessionId, undefined, 30_000, { traceparent: `00-${TRACE}-${CALL_SPAN}-01` });
  t.equal(first.status, 200);
  first.close();
  await waitFor('A holds the GET stream', SLACK_MS, async () => (await metricValue(a.registry, 'mcp_gateway_held_streams')) === 1);

  // The takeover in a trace of its own: only the link joins it to the stream it continues.
  const second = await streams.open(b.url, sessionId, undefined, 30_000, { traceparent: `00-${OTHER_TRACE}-${RESUME_SPAN}-01` });
  t.equal(second.status, 200, 'taken over, not refused');
  second.close();
  await waitFor("B's server span is exported", SLACK_MS, async () => {
    await tracing!.flush();
    return receiver.spans.some((s) => s.kind === SERVER && s.parentSpanId === RESUME_SPAN);
  });
  const onA = receiver.spans.find((s) => s.kind === SERVER && s.parentSpanId === CALL_SPAN);
  const onB = receiver.spans.find((s) => s.kind === SERVER && s.parentSpanId === RESUME_SPAN);
  t.ok(onA, "the span of the GET that opened the stream, on A, in the client's trace");
  t.match(onB?.attributes, {
    'mcp_gateway.resumption.decision': 'take_over',
    'mcp_gateway.resumption.from': 'journal',
    'mcp_gateway.stream.pump': onA?.attributes['mcp_gateway.instance'],
    'mcp_gateway.stream.held': true,
  });
  t.not(onB?.attributes['mcp_gateway.instance'], onA?.attributes['mcp_gateway.instance'], 'taken over on the other instance, whose span names the holder');
  t.equal(onB?.traceId, OTHER_TRACE);
  t.same(onB?.links.map((l) => ({ traceId: l.traceId, spanId: l.spanId })), [{ traceId: TRACE, spanId: onA?.spanId }], "B's span links to the span of A that held the stream");
  t.equal(onA?.links.length, 0, 'the holder links to nothing');
});

t.test("a tool call's POST stream held on A after its client left, resumed from the journal on B: B's span links to A's", async (t) => {
  const receiver = await startOtlpReceiver(t);
  const tracing = await startTracing({ enabled: true, endpoint: `${receiver.origin}/v1/traces`, protocol: 'http/json' }, {});
  t.teardown(() => tracing!.shutdown());
  const [replica] = await spawnReplicas(t, 1);
  const settings = { replicas: [{ id: replica!.id, url: replica!.url }] };
  const store = createStore(testConfig(settings).store, createLogger('silent'));
  t.teardown(() => store.close());
  const a = await startGateway(t, settings, store, tracing);
  const b = await startGateway(t, settings, store, tracing);
  const sessionId = await rawSession(a.url);
  // Long enough that the call is still running on A when B continues it: A's pump is live.
  const call = await post(a.url, toolCallBody('emit', { count: 40, intervalMs: 50, stream: 'request' }), {
    'mcp-session-id': sessionId,
    traceparent: `00-${TRACE}-${CALL_SPAN}-01`,
  });
  t.equal(call.status, 200);
  const decoder = new TextDecoder();
  let body = '';
  const reader = call.body!.getReader();
  while (idsOf(body).length < 2) body += decoder.decode((await reader.read()).value, { stream: true });
  await reader.cancel();
  await waitFor('A holds the call stream', SLACK_MS, async () => (await metricValue(a.registry, 'mcp_gateway_held_streams')) === 1);

  const resumed = await fetch(b.url, {
    headers: {
      accept: 'text/event-stream',
      'mcp-session-id': sessionId,
      'mcp-protocol-version': PROTOCOL_VERSION,
      'last-event-id': idsOf(body).at(-1)!,
      traceparent: `00-${OTHER_TRACE}-${RESUME_SPAN}-01`,
    },
  });
  t.equal(resumed.headers.get('mcp-resumption'), 'continued');
  t.ok((await bodyUntilResult(resumed)).includes('"result"'), "the call's answer comes through B");
  await waitFor("B's server span is exported", SLACK_MS, async () => {
    await tracing!.flush();
    return receiver.spans.some((s) => s.kind === SERVER && s.parentSpanId === RESUME_SPAN);
  });
  const onA = receiver.spans.find((s) => s.kind === SERVER && s.parentSpanId === CALL_SPAN);
  const onB = receiver.spans.find((s) => s.kind === SERVER && s.parentSpanId === RESUME_SPAN);
  t.match(onB?.attributes, { 'mcp_gateway.resumption.decision': 'journal', 'mcp_gateway.stream.pump': onA?.attributes['mcp_gateway.instance'], 'mcp_gateway.stream.held': true });
  t.same(onB?.links, [{ traceId: TRACE, spanId: onA?.spanId }], "B's span links to the span of A's call, whose stream A held");
});
