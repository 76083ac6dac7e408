/**
 * Clean logs (CONTRACT.md §1): a run through the failures an operator meets (a store given a
 * password it does not need, a replica killed and back, a blocked store) writes only JSON lines on
 * stdout; expected conditions come without stack traces and say their message once; a lost
 * session is logged once however many requests find it lost; a probe answer that means alive
 * reads so.
 */
import t from 'tap';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { post, rawSession, toolCallBody } from '../helpers/http.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplicas } from '../helpers/replicas.js';
import { bound, waitFor } from '../helpers/wait.js';

const HEALTH_INTERVAL_MS = 200;
const COMMAND_TIMEOUT_MS = 300;

t.test('a run with failures writes only JSON lines, each condition said once and without a stack', async (t) => {
  const redis = await startRedisServer(t);
  const [replica] = await spawnReplicas(t, 1);
  const storeUrl = new URL(redis.url);
  storeUrl.password = 'not-needed-by-this-redis';
  const gw = await startGatewayProcess(t, {
    store: { type: 'redis', url: storeUrl.toString(), commandTimeoutMs: COMMAND_TIMEOUT_MS },
    replicas: [{ id: replica!.id, url: replica!.url }],
    health: { intervalMs: HEALTH_INTERVAL_MS, unhealthyThreshold: 1, healthyThreshold: 1 },
    log: { level: 'debug' },
  });
  const said = (msg: string | RegExp) => gw.logs.filter((l) => (typeof msg === 'string' ? l['msg'] === msg : msg.test(String(l['msg']))));

  // A replica killed: the requests of its session in flight find it refused, then lost.
  const sessionId = await rawSession(gw.url);
  await replica!.kill();
  const answers = await Promise.all(Array.from({ length: 6 }, () => post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId })));
  await Promise.all(answers.map((a) => a.text()));
  t.ok(answers.every((a) => a.status === 404), 'every request of the lost session got 404');
  const fingerprint = ((await (await fetch(`${gw.adminUrl}/debug/sessions/${sessionId}`)).json()) as { fingerprints: { current: string } }).fingerprints.current;
  const lostLines = () => said('session lost').filter((l) => l['session'] === fingerprint);
  await waitFor('the session lost line', bound(HEALTH_INTERVAL_MS), () => lostLines().length > 0);

  // Back on its port: a probe of the MCP endpoint answers 4xx to a bare GET, which means alive.
  await replica!.restart();
  await waitFor('the replica back up', bound(HEALTH_INTERVAL_MS * 4), () => said('replica health changed').some((l) => l['to'] === 'up'));

  // A blocked store: requests get 503 within the command timeout, the fleet's tick fails.
  redis.pause();
  const blocked = await post(gw.url, toolCallBody('whoami'), { 'mcp-session-id': sessionId });
  t.equal(blocked.status, 503, 'a blocked store gives 503');
  await blocked.text();
  await waitFor('a logged store failure', bound(HEALTH_INTERVAL_MS + COMMAND_TIMEOUT_MS * 4), () => said(/store|epochs/).some((l) => l['err'] !== undefined));
  redis.resume();
  t.equal(await gw.stop('SIGTERM'), 0);

  const notJson = gw.lines.filter((line) => {
    try {
      const value = JSON.parse(line) as unknown;
      return value === null || typeof value !== 'object';
    } catch {
      return true;
    }
  });
  t.same(notJson, [], 'every stdout line is a JSON object');
  t.ok(said(/does not require a password/).every((l) => l['from'] === 'library' && l['level'] === 40), "the Redis client's warning went through the logger");
  t.equal(lostLines().length, 1, `"session lost" once for the session, not once per request (${said('session lost').length} lines)`);
  t.notOk(gw.lines.some((line) => line.includes(sessionId.slice(0, 8))), 'the session is named by its fingerprint: no line holds its id, nor a prefix of it');
  const up = said('replica health changed').filter((l) => l['to'] === 'up');
  t.ok(up.length > 0 && up.every((l) => l['level'] === 30 && /^alive \(probe answered \d{3}\)$/.test(String(l['why']))), 'coming back reads as alive, at info');
  const down = said('replica health changed').filter((l) => l['to'] === 'down');
  t.ok(down.length > 0 && down.every((l) => l['level'] === 40), 'going down is a warning');

  const stacks = gw.lines.filter((line) => line.includes('"stack"'));
  t.same(stacks, [], 'no expected condition carries a stack trace');
  const repeated = gw.lines.filter((line) => /([^":]{8,}): \1(?=["\\]|$)/.test(line));
  t.same(repeated, [], 'no message says the same thing twice');
});
