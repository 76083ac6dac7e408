/**
 * With log.requests on, every answer on the MCP endpoint writes one request line
 * (src/request-log.ts), whoever gave it: forwarded answers, the gateway's own (404, 403, 413)
 * and every resumption answer (continued, the new-stream signal, 204, stripped), whatever log.level
 * says; off (the default), none. Real processes: a demo replica and the gateway's CLI, its JSON log
 * lines decoded from stdout. Also what a client sees (issue: operators' trust): the
 * replica's instance header never reaches it, and resuming from the last cursor of a POST stream
 * that ended normally settles at once.
 */
import { readFile, writeFile } from 'node:fs/promises';
import t from 'tap';
import { parse, stringify } from 'yaml';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { initializeBody, MCP_ACCEPT, post, PROTOCOL_VERSION, toolCallBody } from '../helpers/http.js';
import { rawExchange, rawStatus } from '../helpers/raw-socket.js';
import { rawStreams } from '../helpers/raw-sse.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';

const INSTANCE_HEADER = 'mcp-replica-instance';

/** The sum of mcp_gateway_requests_total over its series, read from /metrics. */
async function requestsCounted(adminUrl: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  return text
    .split('\n')
    .filter((line) => line.startsWith('mcp_gateway_requests_total{'))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
}

/** Reloads counted as applied, read from /metrics. */
async function reloadsApplied(adminUrl: string): Promise<number> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  return Number(/^mcp_gateway_config_reloads_total\{result="applied"\} (\d+)$/m.exec(text)?.[1] ?? 0);
}

/** The cursors of an SSE body, in order. */
function cursorsOf(body: string): string[] {
  return [...body.matchAll(/^id: ?(.*)$/gm)].map((m) => m[1] as string);
}

t.test('N counted requests give N request lines, each with what an operator needs', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGatewayProcess(t, {
    replicas: [{ id: replica!.id, url: replica!.url }],
    health: { intervalMs: 60_000, instanceHeader: INSTANCE_HEADER },
    security: { allowedOrigins: ['https://ok.example'] },
    limits: { bodyBytes: 4096 },
    log: { level: 'info', requests: true },
    // The lines of streams that end with their client (a held stream's line comes when its hold ends).
    resumption: { journal: { enabled: false } },
  });
  const streams = rawStreams(t);
  let sent = 0;
  const send = async (what: Promise<Response>) => {
    sent++;
    return what;
  };

  // Forwarded: a new session, its notification, a call answered with SSE, a stripped cursor.
  const init = await send(post(gw.url, initializeBody()));
  t.equal(init.status, 200);
  t.equal(init.headers.get(INSTANCE_HEADER), null, "the replica's instance header is stripped");
  await init.text();
  const sessionId = init.headers.get('mcp-session-id') ?? '';
  const session = { 'mcp-session-id': sessionId };
  const initialized = await send(post(gw.url, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), session));
  t.equal(initialized.status, 202);
  await initialized.text();
  const call = await send(post(gw.url, toolCallBody('whoami'), session));
  t.equal(call.headers.get('content-type'), 'text/event-stream', 'the call is answered with a stream');
  t.equal(call.headers.get(INSTANCE_HEADER), null, 'stripped from a stream too');
  const cursors = cursorsOf(await call.text());
  t.ok(cursors.length > 0, 'its events carry cursors');
  const stripped = await send(post(gw.url, toolCallBody('whoami', {}, 3), { ...session, 'last-event-id': 'x' }));
  t.equal(stripped.headers.get('mcp-resumption'), 'stripped');
  await stripped.text();

  // The last cursor of that POST stream, which ended normally: settles at once, nothing held open.
  const settled = await send(
    fetch(gw.url, { headers: { ...session, accept: 'text/event-stream', 'mcp-protocol-version': PROTOCOL_VERSION, 'last-event-id': cursors.at(-1)! } }),
  );
  t.equal(settled.status, 204, 'the end of an answered POST stream: 204');
  t.equal(settled.headers.get('mcp-resumption'), 'continued');
  t.equal(await settled.text(), '');

  // The gateway's own answers.
  const unknown = await send(post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': 'no-such-session' }));
  t.equal(unknown.status, 404);
  await unknown.text();
  const forbidden = await send(post(gw.url, toolCallBody('whoami'), { ...session, origin: 'https://evil.example' }));
  t.equal(forbidden.status, 403);
  await forbidden.text();
  const large = await send(post(gw.url, toolCallBody('echo', { text: 'x'.repeat(8192) }), session));
  t.equal(large.status, 413);
  await large.text();

  // The signal: a foreign cursor, then the owner's fresh GET stream, until the client leaves.
  sent++;
  const signal = await streams.open(gw.url, sessionId, 'not-a-cursor');
  t.equal(signal.headers['mcp-resumption'], 'new-stream');
  t.equal(signal.headers[INSTANCE_HEADER], undefined, 'not on the signal stream either');
  await signal.events.until(1);
  signal.close();

  const deleted = await send(fetch(gw.url, { method: 'DELETE', headers: { ...session, accept: MCP_ACCEPT } }));
  t.equal(deleted.status, 200);
  await deleted.text();

  await waitFor('every request counted', bound(5_000), async () => (await requestsCounted(gw.adminUrl)) === sent);
  const lines = () => gw.logs.filter((line) => line['msg'] === 'request');
  await waitFor('a line for every request', bound(5_000), () => lines().length >= sent);
  t.equal(lines().length, sent, `${sent} requests, ${sent} lines`);
  t.equal(await requestsCounted(gw.adminUrl), lines().length, 'as many lines as counted requests');

  for (const line of lines()) {
    t.match(
      line,
      { method: /^(GET|POST|DELETE)$/, path: '/mcp', status: Number, replica: /^(r1|none)$/, ms: Number, end: String, client: '127.0.0.1' },
      `${String(line['method'])} ${String(line['status'])}: the fields`,
    );
  }
  const find = (status: number, match: Record<string, unknown> = {}) =>
    lines().filter((line) => line['status'] === status && Object.entries(match).every(([k, v]) => line[k] === v));
  t.equal(find(200, { replica: 'r1', method: 'POST' }).length, 3, 'initialize, the call and the stripped call, forwarded');
  t.equal(find(200, { resumption: 'stripped', reason: 'post_request' }).length, 1, 'the stripped call says so');
  t.equal(find(204, { replica: 'none', resumption: 'continued', reason: 'none', end: 'answered' }).length, 1, 'the settled resumption');
  // The admin listener names a session as the lines do (its 404 body too: the store holds none of this one).
  const named = async (id: string) => ((await (await fetch(`${gw.adminUrl}/debug/sessions/${id}`)).json()) as { fingerprints: { current: string } }).fingerprints.current;
  t.equal(find(404, { replica: 'none', code: 'GW_SESSION_NOT_FOUND', session: await named('no-such-session') }).length, 1, 'the 404, the session named by its fingerprint');
  t.equal(find(200, { method: 'DELETE', session: await named(sessionId) }).length, 1, 'the DELETE names its session so too');
  t.equal(find(403, { code: 'GW_ORIGIN_FORBIDDEN' }).length, 1, 'the 403');
  t.equal(find(413, { code: 'GW_BODY_TOO_LARGE' }).length, 1, 'the 413');
  t.equal(find(200, { method: 'GET', resumption: 'new_stream', reason: 'foreign_cursor', end: 'client_gone' }).length, 1, 'the signal, until the client left');
  t.equal(find(200, { method: 'DELETE', replica: 'r1' }).length, 1, 'the DELETE');
  t.ok(
    lines().every((line) => line['session'] === undefined || /^[0-9a-f]{12}$/.test(String(line['session']))),
    'sessions appear as fingerprints',
  );
  const logged = JSON.stringify(gw.logs);
  t.notOk(logged.includes(sessionId.slice(0, 8)), 'no line holds the session id, nor a prefix of it');
  t.notOk(logged.includes('no-such-'), "nor one of the unknown session's");
});

t.test('a continuation and a 410 write their lines too', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGatewayProcess(t, { replicas: [{ id: replica!.id, url: replica!.url }], resumption: { mode: 'reject', journal: { enabled: false } }, log: { level: 'info', requests: true } });
  const streams = rawStreams(t);
  const init = await post(gw.url, initializeBody());
  await init.text();
  const sessionId = init.headers.get('mcp-session-id') ?? '';
  const session = { 'mcp-session-id': sessionId };
  await (await post(gw.url, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), session)).text();
  const call = await post(gw.url, JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'progress', arguments: { steps: 3, intervalMs: 1 }, _meta: { progressToken: 'p' } } }), session);
  const cursors = cursorsOf(await call.text());
  t.ok(cursors.length >= 2, 'progress, then the response');

  const rejected = await fetch(gw.url, { headers: { ...session, accept: 'text/event-stream', 'last-event-id': 'not-a-cursor' } });
  t.equal(rejected.status, 410);
  await rejected.text();

  // From the first event: the owner replays the rest, verified (the journal is off), then the client leaves.
  const continued = await streams.open(gw.url, sessionId, cursors[0]);
  t.equal(continued.headers['mcp-resumption'], 'continued');
  const replayed = await continued.events.until(cursors.length - 1);
  t.strictSame(
    replayed.map((e) => e.id),
    cursors.slice(1),
    'the events after the cursor, with their cursors',
  );
  continued.close();

  const lines = () => gw.logs.filter((line) => line['msg'] === 'request');
  await waitFor('a line for every request', bound(5_000), async () => lines().length >= 5 && lines().length === (await requestsCounted(gw.adminUrl)));
  t.equal(lines().length, 5, 'initialize, initialized, the call, the 410, the continuation');
  t.match(
    lines().find((line) => line['status'] === 410),
    { replica: 'none', resumption: 'rejected', reason: 'foreign_cursor', code: 'GW_NOT_RESUMABLE', end: 'answered' },
  );
  t.match(
    lines().find((line) => line['resumption'] === 'continued'),
    { method: 'GET', status: 200, replica: replica!.id, reason: 'none', client: '127.0.0.1' },
  );
});

t.test("unserved paths and requests Node's parser refused write their lines too, on both listeners", async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGatewayProcess(t, { replicas: [{ id: replica!.id, url: replica!.url }], log: { level: 'info', requests: true } });
  const lines = () => gw.logs.filter((line) => line['msg'] === 'request');

  const unserved = await post(new URL('/elsewhere?token=x', gw.url).toString(), initializeBody());
  t.equal(unserved.status, 404);
  await unserved.text();
  const adminUnserved = await fetch(`${gw.adminUrl}/nothing-here`);
  t.equal(adminUnserved.status, 404);
  await adminUnserved.text();
  const overflow = await rawExchange(gw.url, `GET ${new URL(gw.url).pathname} HTTP/1.1\r\nHost: gateway\r\nX-Big: ${'b'.repeat(64 * 1024)}\r\n\r\n`);
  t.equal(rawStatus(overflow), 431);
  const malformed = await rawExchange(gw.adminUrl, 'NOT HTTP\r\n\r\n');
  t.equal(rawStatus(malformed), 400);

  await waitFor('four lines', bound(5_000), () => lines().length >= 4);
  t.equal(lines().length, 4, 'one line each');
  const mcp = lines().filter((line) => line['listener'] === undefined);
  const admin = lines().filter((line) => line['listener'] === 'admin');
  t.match(mcp.find((line) => line['status'] === 404), { method: 'POST', path: '/elsewhere', replica: 'none', code: 'GW_NOT_FOUND', end: 'answered', client: '127.0.0.1' });
  t.match(admin.find((line) => line['status'] === 404), { method: 'GET', path: '/nothing-here', replica: 'none', code: 'GW_NOT_FOUND', end: 'answered' });
  const refused = [...mcp, ...admin].filter((line) => line['end'] === 'refused');
  t.match(refused.find((line) => line['status'] === 431), { listener: undefined, replica: 'none', code: 'GW_HEADERS_TOO_LARGE', client: '127.0.0.1', level: 30 });
  t.match(refused.find((line) => line['status'] === 400), { listener: 'admin', replica: 'none', code: 'GW_MALFORMED_REQUEST', client: '127.0.0.1' });
  t.ok(refused.every((line) => line['method'] === undefined && line['path'] === undefined), 'no method or path where the parser read none');

  const metrics = await (await fetch(`${gw.adminUrl}/metrics`)).text();
  t.match(metrics, /^mcp_gateway_client_refused_total\{reason="header_overflow"\} 1$/m, "the MCP listener's refusal counted as such");
  t.equal(await requestsCounted(gw.adminUrl), 1, "mcp_gateway_requests_total counts the MCP listener's answer only");
});

t.test('off by default, even at log level info; SIGHUP turns the lines on, whatever log.level, and off', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGatewayProcess(t, { replicas: [{ id: replica!.id, url: replica!.url }], log: { level: 'info' } });
  const lines = () => gw.logs.filter((line) => line['msg'] === 'request');
  const initialize = async () => {
    const init = await post(gw.url, initializeBody());
    t.equal(init.status, 200);
    await init.text();
  };
  /** Rewrites log, sends SIGHUP and waits until the reload is counted (its line may be below the level). */
  const setLog = async (log: Record<string, unknown>) => {
    const config = parse(await readFile(gw.file, 'utf8')) as Record<string, unknown>;
    config['log'] = log;
    await writeFile(gw.file, stringify(config));
    const before = await reloadsApplied(gw.adminUrl);
    gw.signal('SIGHUP');
    await waitFor('the reload counted', bound(0), async () => (await reloadsApplied(gw.adminUrl)) > before);
  };

  await initialize();
  await waitFor('the request counted', bound(5_000), async () => (await requestsCounted(gw.adminUrl)) === 1);
  // Whether a request gets a line is settled when it is answered: one answered while the lines
  // are off never gets one, whenever its answer ends.
  await setLog({ level: 'warn', requests: true });
  t.equal(lines().length, 0, 'counted, and no request line while log.requests is off');

  await initialize();
  await waitFor('the line of the request after the reload', bound(5_000), () => lines().length === 1);
  t.match(lines()[0], { method: 'POST', status: 200, replica: replica!.id, level: 30, msg: 'request' }, 'written at level warn, as an info line');

  await setLog({ level: 'info', requests: false });
  await initialize();
  await waitFor('the third request counted', bound(5_000), async () => (await requestsCounted(gw.adminUrl)) === 3);
  t.equal(lines().length, 1, 'no line once turned off again');
});
