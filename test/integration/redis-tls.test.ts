/**
 * The gateway on Redis as production runs it, with the real CLI: a redis-server with TLS only and
 * client certificates required, the gateway logged in as the user of the ACL line docs/security.md
 * documents (in the server's ACL file, the prefix substituted). A tool call cut by the network is
 * continued from the journal; nothing is written outside the prefix; nothing is warned of at start.
 * A wrong CA, a wrong password or a missing permission stops the start: one line naming it, no
 * stack, exit 1.
 */
import { fileURLToPath } from 'node:url';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { stringify } from 'yaml';
import { startBalancer } from '../helpers/balancer.js';
import { connect } from '../helpers/client.js';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { jsonLine, outputOf, spawnProcess } from '../helpers/processes.js';
import { documentedAclLine, startTlsRedis } from '../helpers/redis-tls.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { scrapeMetric } from '../helpers/scrape.js';
import { bound } from '../helpers/wait.js';

// Gateways and a replica as processes: beyond the default per-file timeout on a loaded machine.
t.setTimeout(300_000);

const CLI = fileURLToPath(new URL('../../src/cli.js', import.meta.url));
const PREFIX = 'gwtls';
const USER = 'mcp-gateway';
const PASSWORD = 'gateway-password-for-tls';
/** The documented line without one command the scripts run. */
const PARTIAL_USER = 'mcp-gateway-partial';

const documented = await documentedAclLine(USER, PASSWORD, PREFIX);
const server = await startTlsRedis(t, [documented, (await documentedAclLine(PARTIAL_USER, PASSWORD, PREFIX)).replace(' +hincrby', '')]);
const tls = { ca: server.files.ca, cert: server.files.clientCert, key: server.files.clientKey };
const store = (user = USER, password = PASSWORD, tlsConfig: Record<string, unknown> = tls) => ({
  type: 'redis',
  url: server.url(user, password),
  keyPrefix: PREFIX,
  tls: tlsConfig,
});

const STEPS = 8;
const CUT_AFTER = 3;
const INTERVAL_MS = 100;

t.test('a tool call cut by the network continues from the journal, over TLS, as the documented user', async (t) => {
  const [replica] = await spawnReplicas(t, 1, { eventStore: false });
  const gateway = await startGatewayProcess(t, { store: store(), replicas: [{ id: replica!.id, url: replica!.url }] });
  const balancer = await startBalancer(t, [gateway.url]);
  const { client } = await connect(t, balancer.url);

  const seen: number[] = [];
  const result = await client.callTool({ name: 'progress', arguments: { steps: STEPS, intervalMs: INTERVAL_MS } }, undefined, {
    timeout: bound(STEPS * INTERVAL_MS + 5_000),
    onprogress: (p) => {
      seen.push(p.progress);
      if (p.progress === CUT_AFTER) balancer.cut();
    },
  });
  t.same(seen, Array.from({ length: STEPS }, (_, i) => i + 1), 'every progress event once, in order');
  t.equal((result.content as { text?: string }[])[0]?.text, `done after ${STEPS} steps`, 'the result');
  t.ok(balancer.accepted[0]! > 1, 'the client reconnected after the cut');
  t.ok((await scrapeMetric(gateway.adminUrl, 'mcp_gateway_resumptions_total', { outcome: 'continued' })) >= 1, 'the gateway continued the stream');

  const warned = gateway.logs.filter((line) => Number(line['level']) >= 40);
  t.strictSame(warned, [], 'no warning or error logged');
  const keys = await server.keys();
  t.ok(keys.some((key) => key.includes(':session')), `the session is in the store (${keys.length} keys)`);
  t.strictSame(keys.filter((key) => !key.startsWith(`${PREFIX}:{`)), [], 'no key outside the prefix');
});

/** The CLI on `settings` until it exits: its exit code, its JSON lines and its stderr. */
async function startFails(t: Test, settings: Record<string, unknown>) {
  const dir = await mkdtemp(join(tmpdir(), 'gw-refused-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'gateway.yaml');
  await writeFile(file, stringify({ listen: { port: 0 }, admin: { port: 0 }, replicas: [{ id: 'r1', url: 'http://127.0.0.1:1/mcp' }], ...settings }));
  const proc = spawnProcess(process.execPath, [CLI, '--config', file], { stdio: ['ignore', 'pipe', 'pipe'], t });
  const output = await outputOf(proc.child);
  const lines = output.stdout.split('\n').filter((line) => line !== '');
  return { code: output.code, lines, stderr: output.stderr, errors: lines.map(jsonLine).filter((l) => l !== undefined && Number(l['level']) >= 40) };
}

t.test('a wrong CA, a wrong password, a missing permission: one line naming it, no stack, exit 1', async (t) => {
  const cases = [
    { name: 'a CA that did not sign the server', settings: store(USER, PASSWORD, { ...tls, ca: server.files.otherCa }), cause: /^the store refused the gateway: TLS: the server's certificate is not signed by an authority the gateway trusts \(store\.tls\.ca\)/ },
    { name: 'a wrong password', settings: store(USER, 'not-the-password'), cause: /^the store refused the gateway: the server refused the user and password of the store URL: WRONGPASS/ },
    { name: 'a permission missing', settings: store(PARTIAL_USER), cause: /^the store refused the gateway: the store's user lacks a permission \(docs\/security\.md, Redis ACL\): hincrby: / },
  ];
  const runs = await Promise.all(cases.map((c) => startFails(t, { store: c.settings })));
  cases.forEach(({ name, cause }, i) => {
    const run = runs[i]!;
    t.equal(run.code, 1, `${name}: exit 1`);
    t.equal(run.errors.length, 1, `${name}: one line above info (${JSON.stringify(run.errors)})`);
    t.match(run.errors[0], { level: 60, code: 'GW_STORE_REFUSED', msg: cause }, `${name}: it names the cause`);
    t.notOk(run.lines.some((line) => /\n|\\n\s+at |"stack"/.test(line)), `${name}: no stack`);
    t.notOk(run.lines.some((line) => line.includes(PASSWORD) || line.includes('not-the-password')), `${name}: no password`);
    t.equal(run.stderr, '', `${name}: nothing on stderr`);
  });
});
