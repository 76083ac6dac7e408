/**
 * One tools/call through a gateway with traces on, exported over OTLP/HTTP (JSON, and protobuf)
 * to a receiver in the test: the client's traceparent parents the gateway's server span, the request to the replica is
 * its child and carries it to the replica in traceparent, the store operations are under it, and
 * no attribute holds a credential or a session id.
 */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import t from 'tap';
import { CursorCodec } from '../../src/cursor/codec.js';
import { startTracing } from '../../src/tracing/index.js';
import { startGateway } from '../helpers/gateway.js';
import { initializeBody, listenOnLoopback, post, toolCallBody } from '../helpers/http.js';
import { attributeValues, CLIENT, SERVER, startOtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';

const SESSION = 'sess-0123456789abcdef-secret';
const TOKEN = 'Bearer tok-do-not-export';
const QUERY_TOKEN = 'q-do-not-export';
const CLIENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';
const META_TRACE = '0af7651916cd43dd8448eb211c80319c';
const META_SPAN = 'b7ad6b7169203331';
const CURSOR_SECRET = 'tools-call-cursor-secret-0123456789abcdef';
/** How the session is named: its fingerprint under the configured cursor key. */
const FINGERPRINT = new CursorCodec(CURSOR_SECRET).sessionFingerprint(SESSION);


/** A replica answering initialize with SESSION and every other request with a result; it keeps the headers and bodies it got. */
async function startReplica(): Promise<{ url: string; received: IncomingHttpHeaders[]; bodies: string[] }> {
  const received: IncomingHttpHeaders[] = [];
  const bodies: string[] = [];
  const server = createServer((req, res) => {
    received.push(req.headers);
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
    req.on('end', () => {
      bodies.push(body);
      if (req.method !== 'POST') {
        res.writeHead(405).end();
        return;
      }
      const message = JSON.parse(body) as { id?: number; method: string };
      if (message.id === undefined) {
        res.writeHead(202).end();
        return;
      }
      const result = message.method === 'initialize' ? { protocolVersion: '2025-06-18', capabilities: {}, serverInfo: { name: 'traced', version: '1' } } : { content: [{ type: 'text', text: 'ok' }] };
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': SESSION });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result }));
    });
  });
  const port = await listenOnLoopback(t, server);
  return { url: `http://127.0.0.1:${port}/mcp`, received, bodies };
}

const byName = (spans: readonly ReceivedSpan[], name: string) => spans.filter((s) => s.name === name);

for (const protocol of ['http/json', 'http/protobuf'] as const) {
  t.test(`the tree of one tools/call over ${protocol}: client → gateway → replica, with the store under the gateway`, async (t) => {
    const receiver = await startOtlpReceiver(t);
    // JSON through the configuration's keys; protobuf, the default, through the OTEL_* variables alone.
    const tracing =
      protocol === 'http/json'
        ? await startTracing({ enabled: true, endpoint: `${receiver.origin}/v1/traces`, protocol, serviceName: 'gw-under-test', headers: { 'x-collector-key': 'k1' } }, {})
        : await startTracing({ enabled: false }, { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: receiver.origin, OTEL_SERVICE_NAME: 'gw-under-test', OTEL_EXPORTER_OTLP_HEADERS: 'x-collector-key=k1' });
    t.ok(tracing, 'traces are on');
    t.teardown(() => tracing!.shutdown());
    const replica = await startReplica();
    const gw = await startGateway(t, { replicas: [{ id: 'r1', url: replica.url }], security: { credentialHeaders: ['authorization'] }, cursor: { secret: CURSOR_SECRET } }, undefined, tracing);

    const init = await post(gw.url, initializeBody(), { authorization: TOKEN });
    await init.text();
    t.equal(init.headers.get('mcp-session-id'), SESSION);
    // A client's credential in the query goes on to the replica, and into no span.
    const call = await post(`${gw.url}?token=${QUERY_TOKEN}`, toolCallBody('echo', { text: 'hi' }), {
      authorization: TOKEN,
      'mcp-session-id': SESSION,
      traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`,
      tracestate: 'vendor=abc',
    });
    t.equal(call.status, 200);
    await call.text();
    // 2026-07-28: no traceparent header, the trace context in params._meta (read, not rewritten).
    const metaBody = JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'echo', arguments: {}, _meta: { traceparent: `00-${META_TRACE}-${META_SPAN}-01` } } });
    const metaCall = await post(gw.url, metaBody, { authorization: TOKEN, 'mcp-session-id': SESSION });
    t.equal(metaCall.status, 200);
    await metaCall.text();
    await tracing!.flush();

    const spans = receiver.spans.filter((s) => s.traceId === CLIENT_TRACE);
    const server = spans.find((s) => s.kind === SERVER);
    t.ok(server, 'a server span in the client trace');
    t.equal(server!.parentSpanId, CLIENT_SPAN, "the client's span is its parent");
    t.equal(server!.name, 'POST /mcp');
    t.match(server!.attributes, { 'http.request.method': 'POST', 'http.route': '/mcp', 'http.response.status_code': 200, 'mcp.method.name': 'tools/call', 'gen_ai.tool.name': 'echo', 'mcp_gateway.session': FINGERPRINT });
    t.equal(server!.resource['service.name'], 'gw-under-test');
    const upstream = spans.filter((s) => s.kind === CLIENT && s.attributes['mcp_gateway.replica'] === 'r1');
    t.equal(upstream.length, 1, 'one client span for the request to the replica');
    t.equal(upstream[0]!.parentSpanId, server!.spanId, 'under the server span');
    t.equal(upstream[0]!.attributes['http.request.method'], 'POST');
    t.equal(upstream[0]!.attributes['url.query'], '?redacted', 'its query is not exported');
    const forwarded = replica.received.find((h) => h["traceparent"]?.includes(CLIENT_TRACE));
    t.equal(forwarded?.['traceparent'], `00-${CLIENT_TRACE}-${upstream[0]!.spanId}-01`, "the replica gets the gateway's span as its parent");
    t.equal(forwarded?.['tracestate'], 'vendor=abc', "and the client's tracestate");
    const stores = spans.filter((s) => s.name.startsWith('store '));
    t.ok(stores.length > 0, 'store operations are spans of the request');
    for (const s of stores) {
      t.equal(s.parentSpanId, server!.spanId, `${s.name} is under the server span`);
      t.equal(s.attributes['db.system.name'], 'memory');
    }

    const meta = receiver.spans.find((s) => s.traceId === META_TRACE && s.kind === SERVER);
    t.equal(meta?.parentSpanId, META_SPAN, "params._meta's traceparent parents the server span");
    const metaForwarded = replica.received.find((h) => h['traceparent']?.includes(META_TRACE));
    t.ok(metaForwarded, 'and the request to the replica continues that trace');
    t.ok(replica.bodies.includes(metaBody), 'the body reached the replica as it was sent: read, not rewritten');

    const initSpan = receiver.spans.find((s) => s.kind === SERVER && s.attributes['mcp.method.name'] === 'initialize');
    t.equal(initSpan?.attributes['mcp_gateway.session'], FINGERPRINT, "a new session's span names it by its fingerprint, from the answer");
    const view = (await (await fetch(`${gw.adminUrl}/debug/sessions/${SESSION}`)).json()) as { fingerprints?: { current: string } };
    t.equal(view.fingerprints?.current, FINGERPRINT, 'the admin listener gives the fingerprint of a session id');
    t.equal(byName(receiver.spans, 'POST /mcp').length >= 3, true);

    // The session id, and any prefix of it long enough to say something.
    const secrets = [TOKEN, 'tok-do-not-export', QUERY_TOKEN, SESSION, SESSION.slice(0, 5)];
    for (const span of receiver.spans) {
      const values = attributeValues(span);
      for (const secret of secrets) t.notOk(values.some((v) => v.includes(secret)), `${span.name}: no ${SESSION.startsWith(secret) ? 'session id or prefix of it' : 'credential'} in an attribute`);
    }
    const exported = receiver.exports[0];
    t.equal(exported?.path, '/v1/traces');
    t.equal(exported?.contentType, protocol === 'http/json' ? 'application/json' : 'application/x-protobuf');
    t.equal(exported?.headers['x-collector-key'], 'k1', "the exporter's headers reach the collector");
  });
}
