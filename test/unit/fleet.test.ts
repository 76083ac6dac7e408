/** The fleet's health states, thresholds, probes and epochs, against real HTTP servers. */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import t, { type Test } from 'tap';
import { Fleet } from '../../src/fleet/index.js';
import { LoopLag, SAMPLE_MS } from '../../src/fleet/loop-lag.js';
import { createLogger } from '../../src/logger.js';
import { createMetrics } from '../../src/metrics.js';
import { createMemoryStore } from '../../src/store/memory.js';
import { testConfig } from '../helpers/gateway.js';
import { refusingPort } from '../helpers/http.js';
import { PROBE_TIMEOUT_MS } from '../helpers/wait.js';

async function server(t: Test, status: () => number): Promise<{ url: string; paths: string[]; http: Server }> {
  const paths: string[] = [];
  const http = createServer((req, res) => {
    paths.push(req.url ?? '');
    res.writeHead(status()).end();
  });
  http.listen(0, '127.0.0.1');
  await once(http, 'listening');
  t.teardown(() => http.close());
  return { url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`, paths, http };
}

function fleetFor(t: Test, replicas: { id: string; url: string }[], health: Record<string, unknown> = {}) {
  const config = testConfig({ replicas, health: { intervalMs: 60_000, timeoutMs: PROBE_TIMEOUT_MS, ...health } });
  const store = createMemoryStore();
  const metrics = createMetrics(new Registry());
  const fleet = new Fleet({ config, store, metrics, logger: createLogger('silent') });
  t.teardown(() => fleet.close());
  return { fleet, store, metrics };
}

t.test('any HTTP answer counts as alive by default; failures past the threshold mean gone', async (t) => {
  const alive = await server(t, () => 405);
  const dead = `http://127.0.0.1:${await refusingPort()}/mcp`;
  const { fleet, store, metrics } = fleetFor(t, [{ id: 'a', url: alive.url }, { id: 'd', url: dead }], { unhealthyThreshold: 2 });
  await fleet.tick();
  t.equal(fleet.health('a'), 'up', 'a 405 from the MCP endpoint is alive');
  t.same(alive.paths, ['/mcp'], 'the probe went to the MCP endpoint itself');
  t.equal(fleet.health('d'), 'up', 'one failure is below the threshold');
  await fleet.tick();
  t.equal(fleet.health('d'), 'down', 'two failures: down');
  t.equal((await metrics.replicaUp.get()).values.find((v) => v.labels.replica === 'd')?.value, 0, 'replica_up 0');
  const epochs = await store.replicaEpochs();
  t.ok(epochs['d'], 'its epoch was retired in the store');
  t.equal(fleet.epoch('d'), epochs['d'], 'and this instance uses the new one');
  t.equal(epochs['a'], undefined, 'the healthy one keeps its first epoch');
});

t.test('a configured probe path and expected statuses', async (t) => {
  let status = 200;
  const replica = await server(t, () => status);
  const { fleet } = fleetFor(t, [{ id: 'a', url: replica.url }], { path: '/ready', expectStatus: [200], unhealthyThreshold: 1, healthyThreshold: 2 });
  await fleet.tick();
  t.same(replica.paths, ['/ready'], 'the probe used the configured path on the replica origin');
  status = 500;
  await fleet.tick();
  t.equal(fleet.health('a'), 'down', 'an unexpected status fails the probe');
  const retired = fleet.epoch('a');
  status = 200;
  await fleet.tick();
  t.equal(fleet.health('a'), 'down', 'one good probe is below the healthy threshold');
  await fleet.tick();
  t.equal(fleet.health('a'), 'up', 'two good probes: up again');
  t.equal(fleet.epoch('a'), retired, 'coming back does not change the epoch: sessions bound now stay valid');
});

t.test('suspect: reported by requests, cleared by an answer or a good probe', async (t) => {
  const replica = await server(t, () => 400);
  const { fleet } = fleetFor(t, [{ id: 'a', url: replica.url }]);
  fleet.reportSuspect('a', 'timeout');
  t.equal(fleet.health('a'), 'suspect');
  t.equal(fleet.pick(new Set())?.id, 'a', 'a suspect replica still takes new sessions when no other is up');
  fleet.reportAnswer('a');
  t.equal(fleet.health('a'), 'up', 'an answer clears it');
  fleet.reportSuspect('a', 'reset');
  await fleet.tick();
  t.equal(fleet.health('a'), 'up', 'a good probe clears it');
});

t.test('two instances declaring the same replica gone retire its epoch once', async (t) => {
  const dead = `http://127.0.0.1:${await refusingPort()}/mcp`;
  const config = testConfig({ replicas: [{ id: 'd', url: dead }] });
  const store = createMemoryStore();
  const make = () => new Fleet({ config, store, metrics: createMetrics(new Registry()), logger: createLogger('silent') });
  const [one, two] = [make(), make()];
  t.teardown(() => Promise.all([one.close(), two.close()]));
  await Promise.all([one.reportRefused('d'), two.reportRefused('d')]);
  t.equal(one.epoch('d'), two.epoch('d'), 'both use the same new epoch');
  t.equal((await store.replicaEpochs())['d'], one.epoch('d'));
});

t.test('round robin skips replicas already tried and down ones', async (t) => {
  const [a, b] = [await server(t, () => 400), await server(t, () => 400)];
  const { fleet } = fleetFor(t, [{ id: 'a', url: a.url }, { id: 'b', url: b.url }]);
  const picks = [fleet.pick(new Set())?.id, fleet.pick(new Set())?.id, fleet.pick(new Set())?.id];
  t.same(picks, ['a', 'b', 'a'], 'in turn');
  t.equal(fleet.pick(new Set(['a', 'b'])), undefined, 'none left once both were tried');
  await fleet.reportRefused('a');
  t.same([fleet.pick(new Set())?.id, fleet.pick(new Set())?.id], ['b', 'b'], 'a down replica is skipped');
});

t.test("a stale cache never declares a session lost: the store's epoch decides", async (t) => {
  const dead = `http://127.0.0.1:${await refusingPort()}/mcp`;
  const config = testConfig({ replicas: [{ id: 'r', url: dead }] });
  const store = createMemoryStore();
  const make = () => new Fleet({ config, store, metrics: createMetrics(new Registry()), logger: createLogger('silent') });
  const [a, b] = [make(), make()];
  t.teardown(() => Promise.all([a.close(), b.close()]));
  await a.reportRefused('r');
  const bound = { owner: 'r', ownerEpoch: await a.bindingEpoch('r') };
  t.not(bound.ownerEpoch, '', 'a session bound after the retirement gets the new epoch');
  t.equal(b.epoch('r'), '', "the other instance's cache is still the old epoch");
  t.equal(await b.ownerGone(bound), false, 'it checks the store before declaring the session lost');
  t.equal(b.epoch('r'), bound.ownerEpoch, 'and now knows the new epoch');
  t.equal(await b.ownerGone({ owner: 'r', ownerEpoch: '' }), true, 'a session bound under the retired epoch is lost');
  t.equal(await b.ownerGone({ owner: 'elsewhere', ownerEpoch: '' }), true, 'an owner no longer configured is gone');
  b.reportAnswer('r');
  t.equal(b.health('r'), 'up', 'an answer from the address proves a replica is there again');
});

t.test('LoopLag: how late the loop ran since a moment, from the samples taken after it', async (t) => {
  let now = 1000;
  const lag = new LoopLag(() => now);
  t.teardown(() => lag.stop());
  now += SAMPLE_MS;
  lag.sample();
  t.equal(lag.maxSince(1000), 0, 'on time');
  now += SAMPLE_MS + 700;
  lag.sample();
  now += SAMPLE_MS;
  lag.sample();
  t.equal(lag.maxSince(1000), 700, 'a wait of 700 ms past the sample\'s time');
  t.equal(lag.maxSince(now), 0, 'nothing late since the last sample');
});

t.test("a probe with no answer in time while the gateway's own loop was blocked counts neither way (CONTRACT §7)", async (t) => {
  // A replica that takes the connection and never answers: every probe times out.
  const hanging = createServer(() => undefined);
  hanging.listen(0, '127.0.0.1');
  await once(hanging, 'listening');
  t.teardown(() => {
    hanging.closeAllConnections();
    hanging.close();
  });
  const url = `http://127.0.0.1:${(hanging.address() as AddressInfo).port}/mcp`;
  const timeoutMs = 1000;
  const { fleet } = fleetFor(t, [{ id: 'a', url }], { timeoutMs, unhealthyThreshold: 1 });

  const blocked = fleet.tick();
  // The gateway's loop does nothing else for longer than the probe's timeout.
  const until = performance.now() + 1.5 * timeoutMs;
  while (performance.now() < until);
  await blocked;
  t.equal(fleet.health('a'), 'up', 'a probe the gateway could not have read in time is not the replica\'s failure');

  await fleet.tick();
  t.equal(fleet.health('a'), 'down', 'the same silence with the loop free to read: the replica failed');
});
