/**
 * CONTRACT.md §1: no secret (Authorization, the cursor secret, the store password) is logged, at
 * any level, in any encoding. A gateway process at log level trace, request lines on, is fed ordinary traffic and
 * the requests Node's parser refuses (whose errors carry the raw request bytes), then every field
 * of every line it wrote is decoded every way a secret can hide.
 */
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { MCP_ACCEPT, post, initializeBody, toolCallBody } from '../helpers/http.js';
import { findSecrets } from '../helpers/log-scan.js';
import { rawExchange, rawStatus } from '../helpers/raw-socket.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas } from '../helpers/replicas.js';

t.test('the scanner finds a secret hidden in a byte array, base64, hex and nested JSON', async (t) => {
  const secret = 'Bearer s3cr3t-token-value';
  const bytes = [...Buffer.from(`GET / HTTP/1.1\r\nAuthorization: ${secret}\r\n`)];
  const lines = [
    JSON.stringify({ err: { rawPacket: { type: 'Buffer', data: bytes } } }),
    JSON.stringify({ a: { b: Buffer.from(secret).toString('base64') } }),
    JSON.stringify({ hex: Buffer.from(secret).toString('hex') }),
    JSON.stringify({ body: JSON.stringify({ headers: { authorization: secret } }) }),
    JSON.stringify({ clean: 'nothing here' }),
  ];
  const found = findSecrets(lines, ['s3cr3t-token-value']);
  const where = new Set(found.map((f) => f.split(' ')[1]));
  t.same([...where].sort(), ['1', '2', '3', '4'], 'found in each line that hides it, and not in the clean one');
});

t.test('at log level trace, no line holds a secret in any field or encoding', async (t) => {
  const redis = await startRedisServer(t);
  const [replica] = await spawnReplicas(t, 1);
  const token = `tok${randomBytes(12).toString('base64url')}`;
  const cursorSecret = randomBytes(33).toString('base64url');
  const password = `pw${randomBytes(9).toString('base64url')}`;
  // The test Redis asks for no password: the client is given one all the same (and warns).
  const storeUrl = new URL(redis.url);
  storeUrl.password = password;
  const gw = await startGatewayProcess(t, {
    store: { type: 'redis', url: storeUrl.toString() },
    cursor: { secret: cursorSecret },
    replicas: [{ id: replica!.id, url: replica!.url }],
    log: { level: 'trace', requests: true },
  });
  const auth = { authorization: `Bearer ${token}` };

  const init = await post(gw.url, initializeBody(), auth);
  await init.text();
  const sessionId = init.headers.get('mcp-session-id')!;
  t.equal(init.status, 200, 'a session opened with the token');
  const call = await post(gw.url, toolCallBody('emit', { count: 2, intervalMs: 1 }), { ...auth, 'mcp-session-id': sessionId });
  t.equal(call.status, 200);
  const cursor = /^id: (.+)$/m.exec(await call.text())?.[1];
  t.ok(cursor, 'the call streamed events with cursors');
  const resumed = await fetch(gw.url, { headers: { ...auth, accept: MCP_ACCEPT, 'mcp-session-id': sessionId, 'last-event-id': `${cursor!}x` } });
  t.equal(resumed.headers.get('mcp-resumption-reason'), 'foreign_cursor');
  await resumed.body?.cancel();
  const unknown = await post(gw.url, toolCallBody('whoami'), { ...auth, 'mcp-session-id': 'no-such-session' });
  t.equal(unknown.status, 404);
  await unknown.text();
  const inQuery = await post(`${gw.url}?access_token=${token}`, toolCallBody('whoami'), { ...auth, 'mcp-session-id': `Bearer ${token}` });
  t.equal(inQuery.status, 404, 'a token in the query and in the session header');
  await inQuery.text();

  const path = new URL(gw.url).pathname;
  const head = `POST ${path} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer ${token}\r\n`;
  const overflow = await rawExchange(gw.url, `${head}X-Big: ${'b'.repeat(20 * 1024)}\r\n\r\n`);
  t.equal(rawStatus(overflow), 431, 'a header block over the limit gets 431');
  const control = await rawExchange(gw.url, `${head}X-Bad: a\u0001b\r\n\r\n`);
  t.equal(rawStatus(control), 400, 'a control byte in a header gets 400');
  const garbage = await rawExchange(gw.url, `NOT HTTP ${token}\r\n${head}\r\n`);
  t.equal(rawStatus(garbage), 400, 'a malformed request line gets 400');

  t.equal(await gw.stop('SIGTERM'), 0);
  const refused = gw.logs.filter((l) => typeof l['msg'] === 'string' && l['msg'].startsWith('client refused'));
  t.same(refused.map((l) => l['status']).sort(), [400, 400, 431], 'each refused request was logged');
  t.ok(gw.logs.filter((l) => l['msg'] === 'request').length >= 5, 'the request lines (log.requests) are among them');
  t.same(findSecrets(gw.lines, [token, cursorSecret, password]), [], 'no secret in any field of any line');
});
