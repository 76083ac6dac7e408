import t from 'tap';
import { endToEnd, endToEndNamedInConnection, requestHeadersForReplica, responseHeadersForClient } from '../../src/headers.js';

t.test('hop-by-hop headers and those named in Connection stay on their hop', async (t) => {
  const out = endToEnd({
    connection: 'keep-alive, x-private',
    'keep-alive': 'timeout=5',
    'transfer-encoding': 'chunked',
    te: 'trailers',
    upgrade: 'websocket',
    'proxy-authorization': 'Basic x',
    'proxy-connection': 'keep-alive',
    trailer: 'x-checksum',
    'http2-settings': 'AAMAAABkAARAAAAAAAIAAAAA',
    expect: '100-continue',
    'x-private': '1',
    host: 'gateway:8080',
    'content-length': '12',
    'mcp-session-id': 's1',
    'mcp-protocol-version': '2025-06-18',
    accept: 'application/json, text/event-stream',
    'content-type': 'application/json',
    authorization: 'Bearer t',
    origin: 'https://app.example',
  });
  t.same(out, {
    'mcp-session-id': 's1',
    'mcp-protocol-version': '2025-06-18',
    accept: 'application/json, text/event-stream',
    'content-type': 'application/json',
    authorization: 'Bearer t',
    origin: 'https://app.example',
  });
});

t.test('every name of a Connection list stays, whatever its case and spacing, over repeated fields', async (t) => {
  const out = endToEnd({ connection: ['close', ' X-One ,x-two'], 'x-one': '1', 'x-two': '2', 'x-three': '3' });
  t.same(out, { 'x-three': '3' });
});

t.test('a Connection list that names a header every hop needs is told apart', async (t) => {
  t.equal(endToEndNamedInConnection({ connection: 'keep-alive, Mcp-Session-Id', 'mcp-session-id': 's1' }), 'mcp-session-id');
  t.equal(endToEndNamedInConnection({ connection: ['close', 'authorization'] }), 'authorization');
  t.equal(endToEndNamedInConnection({ connection: 'keep-alive, x-private, te' }), undefined, 'private and hop-by-hop names are fine');
  t.equal(endToEndNamedInConnection({ connection: 'close' }), undefined);
  t.equal(endToEndNamedInConnection({}), undefined);
});

t.test('forwarding headers are added, extending an existing X-Forwarded-For', async (t) => {
  const out = requestHeadersForReplica({ 'x-forwarded-for': '10.0.0.1', 'last-event-id': 'x' }, { ip: '127.0.0.1', protocol: 'http', host: 'gw:8080' }, ['last-event-id']);
  t.same(out, { 'x-forwarded-for': '10.0.0.1, 127.0.0.1', 'x-forwarded-proto': 'http', 'x-forwarded-host': 'gw:8080' });
  const named = requestHeadersForReplica({ connection: 'X-Forwarded-For', 'x-forwarded-for': '203.0.113.9' }, { ip: '127.0.0.1', protocol: 'http', host: undefined });
  t.same(named, { 'x-forwarded-for': '127.0.0.1', 'x-forwarded-proto': 'http' }, 'a chain named in Connection stays on its hop: the gateway starts its own');
});

t.test("a replica's own CORS headers never reach the client; the gateway grants browsers alone", async (t) => {
  const out = responseHeadersForClient({
    'content-type': 'text/event-stream',
    'mcp-session-id': 's1',
    'access-control-allow-origin': '*',
    'Access-Control-Expose-Headers': 'Mcp-Session-Id',
    connection: 'keep-alive',
  });
  t.same(out, { 'content-type': 'text/event-stream', 'mcp-session-id': 's1' });
});
