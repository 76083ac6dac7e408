import t from 'tap';
import { endToEnd, requestHeadersForReplica, responseHeadersForClient } from '../../src/headers.js';

t.test('hop-by-hop headers and those named in Connection stay on their hop', async (t) => {
  const out = endToEnd({
    connection: 'keep-alive, x-private',
    'keep-alive': 'timeout=5',
    'transfer-encoding': 'chunked',
    te: 'trailers',
    upgrade: 'websocket',
    'proxy-authorization': 'Basic x',
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

t.test('forwarding headers are added, extending an existing X-Forwarded-For', async (t) => {
  const out = requestHeadersForReplica({ 'x-forwarded-for': '10.0.0.1', 'last-event-id': 'x' }, { ip: '127.0.0.1', protocol: 'http', host: 'gw:8080' }, ['last-event-id']);
  t.same(out, { 'x-forwarded-for': '10.0.0.1, 127.0.0.1', 'x-forwarded-proto': 'http', 'x-forwarded-host': 'gw:8080' });
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
