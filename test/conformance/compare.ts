/**
 * The conformance suite (@modelcontextprotocol/conformance, its server scenarios) run for one era
 * against one fixture server directly and, at the same time, against a gateway in front of two
 * replicas of it: every check that passes directly must pass through the gateway.
 *
 * Each era runs the whole server side of its requirement set (`--requirements`), scored and
 * unscored. The gateway is configured as a loopback deployment must be: `security.allowedOrigins`
 * lists its own origins, since it rewrites `Host` for its replicas and so is the one to refuse a
 * DNS-rebinding `Origin` (R6).
 *
 * A few scenarios wait a fixed time for a notification (a `subscriptions/listen` stream, 0.8 to
 * 1.5 s); on a loaded machine a run can miss such a window, directly as well as through the
 * gateway, so a scenario that failed directly when it should not have, or lost a check through the
 * gateway, is run once more there, alone, and only a second failure fails the test.
 */
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { freePort, type Teardown } from '../helpers/processes.js';
import { failed, requirements, runConformance, spawnConformanceServer, tally, type Era, type Results } from './run.js';

interface Tap extends Teardown {
  same(found: unknown, wanted: unknown, message: string): void;
  comment(message: string): void;
}

export interface EraSpec {
  era: Era;
  revision: string;
  /** The scenarios the fixture fails directly, for want of the tools they call. */
  failingDirectly: string[];
}

export async function directAndThroughGateway(t: Tap, { era, revision, failingDirectly }: EraSpec): Promise<void> {
  const { scored, notScored } = await requirements(revision);
  const ports = [await freePort(), await freePort()];
  const peerOf = (i: number) => `http://127.0.0.1:${ports[1 - i]!}/mcp`;
  const [directUrl, ...replicaUrls] = await Promise.all([
    spawnConformanceServer(t, era, { id: `direct-${era}` }),
    ...ports.map((port, i) => spawnConformanceServer(t, era, { id: `r${i + 1}-${era}`, port, peers: [peerOf(i)] })),
  ]);
  const gwPort = await freePort();
  const gw = await startGatewayProcess(t, {
    listen: { host: '127.0.0.1', port: gwPort },
    replicas: replicaUrls.map((url, i) => ({ id: `r${i + 1}`, url })),
    security: { allowedOrigins: [`http://127.0.0.1:${gwPort}`, `http://localhost:${gwPort}`] },
  });

  const [direct, gateway] = await Promise.all([runConformance(t, directUrl!, revision), runConformance(t, gw.url, revision)]);

  const all = [...scored, ...notScored].sort();
  t.same([...direct.keys()].sort(), all, 'every scenario of the requirement set ran directly');
  t.same([...gateway.keys()].sort(), all, 'and through the gateway');

  const again = async (results: Results, url: string, scenario: string, why: string) => {
    t.comment(`${scenario} ${why}; run again alone`);
    results.set(scenario, (await runConformance(t, url, revision, scenario)).get(scenario) ?? new Map());
  };
  for (const scenario of all.filter((s) => failed(direct.get(s)!) && !failingDirectly.includes(s))) {
    await again(direct, directUrl!, scenario, 'failed directly');
  }
  t.same(all.filter((s) => failed(direct.get(s)!)), [...failingDirectly].sort(), 'directly, the fixture fails only the scenarios it has no tools for');
  for (const scenario of new Set(lost(direct, gateway).map(([scenario]) => scenario))) {
    await again(gateway, gw.url, scenario, 'lost a check through the gateway');
  }
  t.same(
    lost(direct, gateway).map(([scenario, id, status]) => `${scenario}: ${id} (${status})`),
    [],
    'every check that passes directly passes through the gateway',
  );

  t.comment(`${revision} scored, direct: ${tally(direct, scored)}; through the gateway: ${tally(gateway, scored)}`);
  t.comment(`${revision} unscored, direct: ${tally(direct, notScored)}; through the gateway: ${tally(gateway, notScored)}`);
}

/** Checks that succeeded directly and did not through the gateway: [scenario, check, status there]. */
function lost(direct: Results, gateway: Results): [string, string, string][] {
  const out: [string, string, string][] = [];
  for (const [scenario, checks] of direct) {
    for (const [id, status] of checks) {
      const there = gateway.get(scenario)?.get(id) ?? 'absent';
      if (status === 'SUCCESS' && there !== 'SUCCESS') out.push([scenario, id, there]);
    }
  }
  return out;
}
