/**
 * Two gateway instances on one Redis with different cursor.secret values (E2: their cursors are
 * foreign to each other). Each publishes its key's fingerprint; each notices the other: one log
 * line per peer, mcp_gateway_cursor_key_mismatch_instances, and a warning in /readyz, which stays
 * 200. The secrets themselves appear nowhere.
 */
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { findSecrets } from '../helpers/log-scan.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';

const HEALTH_INTERVAL_MS = 200;
const MISMATCH = /uses another cursor key/;

async function metric(gw: GatewayProcess, pattern: RegExp): Promise<number> {
  const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
  return Number(pattern.exec(text)?.[1] ?? NaN);
}
const mismatchGauge = /^mcp_gateway_cursor_key_mismatch_instances (\d+)$/m;
const publishCount = /^mcp_gateway_store_duration_seconds_count\{op="publishKeyFingerprint"\} (\d+)$/m;

t.test('instances with different cursor secrets on one store: each warns once, counts the other, stays ready', async (t) => {
  const [redis, [replica]] = await Promise.all([startRedisServer(t), spawnReplicas(t, 1)]);
  const secrets = [randomBytes(32).toString('base64url'), randomBytes(32).toString('base64url')];
  const settings = (secret: string) => ({
    store: { type: 'redis', url: redis.url },
    replicas: [{ id: replica!.id, url: replica!.url }],
    health: { intervalMs: HEALTH_INTERVAL_MS },
    cursor: { secret },
  });
  const [a, b] = await Promise.all([startGatewayProcess(t, settings(secrets[0]!)), startGatewayProcess(t, settings(secrets[1]!))]);

  for (const [name, gw] of [['first', a], ['second', b]] as const) {
    await waitFor(`the ${name} instance notices`, bound(HEALTH_INTERVAL_MS * 3), async () => (await metric(gw, mismatchGauge)) === 1);
    const ready = await fetch(`${gw.adminUrl}/readyz`);
    const body = (await ready.json()) as { ready: boolean; warnings?: string[] };
    t.equal(ready.status, 200, `the ${name} instance stays ready`);
    t.match(body.warnings?.join('\n'), /cursor key mismatch: 1 other instance/, 'and says why in its warnings');
  }

  // Several more ticks: the mismatch is still there, and still logged once.
  const published = await metric(a, publishCount);
  await waitFor('three more ticks', bound(HEALTH_INTERVAL_MS * 3), async () => (await metric(a, publishCount)) >= published + 3);
  t.equal(a.logs.filter((l) => MISMATCH.test(String(l['msg']))).length, 1, 'the first instance logged the mismatch once');
  t.equal(a.logs.find((l) => MISMATCH.test(String(l['msg'])))?.['level'], 40, 'as a warning');

  t.equal(await b.stop('SIGTERM'), 0);
  // The stopped instance withdrew its fingerprint: gone by the first instance's next ticks, long
  // before the entry would have expired (10 s at least). Two ticks: one may have been in flight.
  const stoppedAt = await metric(a, publishCount);
  await waitFor('two more ticks of the first instance', bound(HEALTH_INTERVAL_MS * 4), async () => (await metric(a, publishCount)) >= stoppedAt + 2);
  t.equal(await metric(a, mismatchGauge), 0, 'the mismatch cleared at once');
  const cleared = (await (await fetch(`${a.adminUrl}/readyz`)).json()) as { warnings?: string[] };
  t.equal(cleared.warnings, undefined, 'no warning left');
  t.equal(await a.stop('SIGTERM'), 0);
  t.same(findSecrets([...a.lines, ...b.lines], secrets), [], 'neither secret is logged');
});

t.test('instances with the same secret agree', async (t) => {
  const [redis, [replica]] = await Promise.all([startRedisServer(t), spawnReplicas(t, 1)]);
  const settings = { store: { type: 'redis', url: redis.url }, replicas: [{ id: replica!.id, url: replica!.url }], health: { intervalMs: HEALTH_INTERVAL_MS } };
  const [a, b] = await Promise.all([startGatewayProcess(t, settings), startGatewayProcess(t, settings)]);
  await waitFor('both published twice', bound(HEALTH_INTERVAL_MS * 3), async () => (await metric(a, publishCount)) >= 2 && (await metric(b, publishCount)) >= 2);
  t.equal(await metric(a, mismatchGauge), 0);
  t.equal(await metric(b, mismatchGauge), 0);
  t.notOk(a.logs.some((l) => MISMATCH.test(String(l['msg']))), 'nothing to warn about');
});
