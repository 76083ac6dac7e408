/**
 * SIGHUP on a real gateway process (CONTRACT.md §1): what can change live is applied at once
 * (log level, limits, security), what needs a restart (the listen address) is named as not
 * applied and keeps its running value, an invalid file changes nothing; each reload is counted
 * in mcp_gateway_config_reloads_total by result.
 */
import { readFile, writeFile } from 'node:fs/promises';
import t from 'tap';
import { parse, stringify } from 'yaml';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { post, toolCallBody } from '../helpers/http.js';
import { freePort } from '../helpers/processes.js';
import { openSocket, rawExchange, rawStatus, readUntilClosed } from '../helpers/raw-socket.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';

const RELOAD_DEADLINE_MS = bound(0);

async function reload(gw: GatewayProcess, change: (config: Record<string, any>) => void): Promise<Record<string, unknown>> {
  const config = parse(await readFile(gw.file, 'utf8')) as Record<string, any>;
  change(config);
  await writeFile(gw.file, stringify(config));
  const before = gw.logs.length;
  gw.signal('SIGHUP');
  let line: Record<string, unknown> | undefined;
  await waitFor('the reload line', RELOAD_DEADLINE_MS, () => {
    line = gw.logs.slice(before).find((l) => typeof l['msg'] === 'string' && /^configuration reload/.test(l['msg']));
    return line !== undefined;
  });
  return line!;
}

async function reloads(gw: GatewayProcess, result: string): Promise<number> {
  const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
  return Number(new RegExp(`^mcp_gateway_config_reloads_total\\{result="${result}"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
}

t.test('SIGHUP applies log level, limits and security live, names what needs a restart, refuses an invalid file', async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const gw = await startGatewayProcess(t, {
    replicas: [{ id: replica!.id, url: replica!.url }],
    log: { level: 'info' },
    limits: { bodyBytes: 1024 * 1024, headersTimeoutMs: 60_000 },
  });
  const path = new URL(gw.url).pathname;
  const malformed = `BAD REQUEST LINE\r\n\r\n`;
  const big = toolCallBody('echo', { text: 'x'.repeat(100 * 1024) });

  t.equal(rawStatus(await rawExchange(gw.url, malformed)), 400);
  const bigBefore = await post(gw.url, big, { 'mcp-session-id': 'unknown' });
  await bigBefore.text();
  t.equal(bigBefore.status, 404, 'a 100 KB body passes the 1 MB limit');
  const evilBefore = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': 'unknown', origin: 'https://evil.example' });
  await evilBefore.text();
  t.equal(evilBefore.status, 404, 'no origin check yet');

  const applied = await reload(gw, (c) => {
    c['log'] = { level: 'debug' };
    c['limits'] = { bodyBytes: 64 * 1024, headersTimeoutMs: 1000 };
    c['security'] = { allowedOrigins: ['https://good.example'] };
  });
  t.equal(applied['msg'], 'configuration reloaded');
  t.equal(applied['result'], 'applied');
  t.same([...(applied['applied'] as string[])].sort(), ['limits', 'log', 'security'], 'it names the sections it applied');
  const reloadedAt = gw.logs.indexOf(applied);
  t.notOk(gw.logs.slice(0, reloadedAt).some((l) => String(l['msg']).startsWith('client refused')), 'no debug line before the reload');

  t.equal(rawStatus(await rawExchange(gw.url, malformed)), 400);
  await waitFor('a debug line', RELOAD_DEADLINE_MS, () => gw.logs.slice(reloadedAt).some((l) => String(l['msg']).startsWith('client refused')));
  t.pass('log.level applied: debug lines appear');
  const bigAfter = await post(gw.url, big, { 'mcp-session-id': 'unknown' });
  await bigAfter.text();
  t.equal(bigAfter.status, 413, 'limits.bodyBytes applied: the same body gets 413');
  const chunk = big.length.toString(16);
  const chunked = await rawExchange(
    gw.url,
    `POST ${path} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\nMcp-Session-Id: unknown\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunk}\r\n${big}\r\n0\r\n\r\n`,
  );
  t.equal(rawStatus(chunked), 413, 'and a chunked body over it too');
  const evilAfter = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': 'unknown', origin: 'https://evil.example' });
  await evilAfter.text();
  t.equal(evilAfter.status, 403, 'security.allowedOrigins applied');
  const slow = await openSocket(gw.url);
  slow.write(`POST ${path} HTTP/1.1\r\nHost: gateway\r\n`);
  t.equal(rawStatus(await readUntilClosed(slow)), 408, 'limits.headersTimeoutMs applied: a half-sent header block is closed');

  const port = await freePort();
  const partial = await reload(gw, (c) => {
    c['listen'] = { port };
    c['log'] = { level: 'info' };
  });
  t.equal(partial['result'], 'partial');
  t.equal(partial['level'], 40, 'a partial reload is a warning');
  t.match(partial['msg'], /in part: listen not applied \(restart to apply\)/);
  t.same(Object.keys(partial['notApplied'] as object), ['listen'], 'it names what needs a restart');
  t.same(partial['applied'], ['log'], 'and applies the rest');
  const still = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': 'unknown' });
  await still.text();
  t.equal(still.status, 404, 'the gateway still serves on its running address');
  await t.rejects(fetch(`http://127.0.0.1:${port}${path}`), 'and not on the new one');

  const invalid = await reload(gw, (c) => {
    c['limits'] = { bodyBytes: 'lots' };
  });
  t.equal(invalid['result'], 'invalid');
  t.match(JSON.stringify(invalid['problems']), /limits\.bodyBytes: expected integer/);
  const stillLimited = await post(gw.url, big, { 'mcp-session-id': 'unknown' });
  await stillLimited.text();
  t.equal(stillLimited.status, 413, 'the running configuration stays');

  t.equal(await reloads(gw, 'applied'), 1);
  t.equal(await reloads(gw, 'partial'), 1);
  t.equal(await reloads(gw, 'invalid'), 1);
});
