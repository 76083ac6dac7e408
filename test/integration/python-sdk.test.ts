/**
 * The official MCP Python SDK behind the gateway, on real processes: its client
 * (`mcp.client.streamable_http`, which opens the session's GET stream by itself and reconnects it
 * with its own rules), the repository's SDK replica and the Python SDK's MCPServer as replicas
 * (both with their defaults: no event log, 409 to a second GET), two gateway processes on one
 * redis-server, a balancer between client and gateways that cuts.
 *
 * The Python client gives its GET stream up after two failed attempts in a row (the SDK's
 * MAX_RECONNECTION_ATTEMPTS), one second apart, so a dropped idle GET stream must be open again at
 * its first reconnect: with the cursor of the gateway's priming event (J1), the stream continued
 * from the journal (J2, J3).
 */
import t, { type Test } from 'tap';
import { startBalancer, type Balancer } from '../helpers/balancer.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { pythonSdk, spawnPythonReplica, startPythonClient, type ClientEvent, type PythonClient } from '../helpers/python-sdk.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplica } from '../helpers/replicas.js';
import { scrapeMetric } from '../helpers/scrape.js';
import { bound, waitFor } from '../helpers/wait.js';

/** Far longer than the file: only a takeover can end a held stream here. */
const HOLD_MS = 600_000;
/** resumption.journal.holdMs at its least. */
const MIN_HOLD_MS = 1000;
/** What the Python SDK logs when it stops reopening its GET stream (StreamableHTTPTransport.handle_get_stream). */
const GAVE_UP = /max reconnection attempts/i;

const sdk = pythonSdk();
if ('skip' in sdk) {
  t.plan(0, sdk.skip);
} else {
  await suite(sdk.python);
}

async function suite(python: string): Promise<void> {
  // Python processes take seconds to import the SDK on a loaded machine, and every case starts one.
  t.setTimeout(240_000);
  const [redis, tsReplica, pyReplica] = await Promise.all([
    startRedisServer(t),
    spawnReplica(t, { id: 'ts1', eventStore: false }),
    spawnPythonReplica(t, python, 'py1'),
  ]);

  interface Fleet {
    gateways: GatewayProcess[];
    balancer: Balancer;
  }

  /** `instances` gateway processes on `replica` behind a balancer, holding a GET stream `holdMs`. */
  async function fleet(replica: { id: string; url: string }, holdMs = HOLD_MS, instances = 2): Promise<Fleet> {
    const settings = {
      store: { type: 'redis', url: redis.url },
      replicas: [{ id: replica.id, url: replica.url }],
      resumption: { journal: { holdMs } },
    };
    const gateways = await Promise.all(Array.from({ length: instances }, () => startGatewayProcess(t, settings)));
    const balancer = await startBalancer(t, gateways.map((g) => g.url));
    return { gateways, balancer };
  }

  // One fleet for each kind of case, each case with a session of its own (its client closes it).
  const [tsFleet, pyFleet, resetFleet] = await Promise.all([fleet(tsReplica), fleet(pyReplica), fleet(tsReplica, MIN_HOLD_MS, 1)]);

  const isGet = (status: number) => (e: ClientEvent) => e.event === 'http' && e['method'] === 'GET' && e['status'] === status;
  const established = (e: ClientEvent) => e.event === 'log' && e['message'] === 'GET SSE connection established';
  /** The emit tool's notifications/message with data.seq `seq`. */
  const emitted = (seq: number) => (e: ClientEvent) =>
    e.event === 'notification' && e['method'] === 'notifications/message' && (e['params'] as { data?: { seq?: number } }).data?.seq === seq;

  const journaled = (f: Fleet) => scrapeMetric(f.gateways[0]!.adminUrl, 'mcp_gateway_journal_events_total');

  /**
   * A Python client through the balancer, with its GET stream open through instance 0 and primed:
   * the gateway's priming event (J1), the stream's only event, journaled and in the client's hands.
   * (That the gateway recorded it is not enough: a cut before it reaches the client leaves the
   * client without a cursor, and its reconnect is a plain GET.)
   */
  async function clientWithGet(t: Test, f: Fleet, opts: { bindReset?: boolean } = {}): Promise<PythonClient> {
    f.balancer.pin(0);
    const before = await journaled(f);
    const client = await startPythonClient(t, python, f.balancer.url, opts);
    t.teardown(() => client.quit());
    const open = await client.next('its GET stream open', isGet(200));
    await client.next("its GET stream's priming event received", (e) => e.event === 'sse_id', client.events.indexOf(open));
    t.ok((await journaled(f)) >= before + 1, 'the priming event was journaled before it left (E5)');
    return client;
  }

  /**
   * Cuts every connection of the client (the GET stream idle) with the next ones going to
   * instance `to`, and resolves with the index of the reconnect's GET response among the events.
   */
  async function cutAndReopen(client: PythonClient, { balancer }: Fleet, to: number): Promise<number> {
    const before = client.events.length;
    balancer.pin(to);
    balancer.cut();
    const reopened = await client.next('its GET stream reopened', (e) => e.event === 'http' && e['method'] === 'GET', before);
    return client.events.indexOf(reopened);
  }

  for (const [name, to] of [['the same instance', 0], ['the other instance', 1]] as const) {
    t.test(`an idle GET stream of the Python client, cut and reopened through ${name}, gets what follows (SDK replica)`, async (t) => {
      const f = tsFleet;
      const continued = await scrapeMetric(f.gateways[to]!.adminUrl, 'mcp_gateway_continuations_total', { source: 'journal' });
      const client = await clientWithGet(t, f);
      const at = await cutAndReopen(client, f, to);
      const reopened = client.events[at]!;
      const primed = client.events.slice(0, at).filter((e) => e.event === 'sse_id');
      t.equal(primed.length, 1, 'the stream carried one event before the cut');
      t.equal(reopened['lastEventId'], primed[0]!['id'], 'the client resumed with it');
      t.match(reopened['lastEventId'], /^1\./, "the cursor of the stream's priming event, its only one (J1)");
      t.equal(reopened['status'], 200, 'answered 200 at once, not 409');
      await client.next('the reopened stream established', established, at);

      t.equal(await client.call('emit', { count: 2, intervalMs: 0 }), 'emitted 2 on get stream', 'a tools/call after the cut works');
      await client.next('the first notification emitted after the reconnect', emitted(1), at);
      await client.next('the second', emitted(2), at);
      t.equal(await client.call('whoami'), tsReplica.id, 'sticky: the session stays on its replica');
      t.equal(await scrapeMetric(f.gateways[to]!.adminUrl, 'mcp_gateway_continuations_total', { source: 'journal' }), continued + 1, 'the held stream was continued from the journal');
      t.notOk(client.logMessages().some((m) => GAVE_UP.test(m)), 'the client never gave its GET stream up');
      t.equal(client.events.filter(isGet(409)).length, 0, 'and never saw a 409');
    });
  }

  t.test('an idle GET stream of the Python client against a Python SDK replica, cut and reopened through the other instance', async (t) => {
    const f = pyFleet;
    const client = await clientWithGet(t, f);
    t.equal(await client.call('whoami'), pyReplica.id, 'a tools/call reaches the Python replica');
    const at = await cutAndReopen(client, f, 1);
    t.equal(client.events[at]!['status'], 200, 'its GET, with the priming cursor, is answered 200 at once');
    await client.next('the reopened stream established', established, at);

    t.equal(await client.call('emit', { count: 1 }), 'emitted 1 on get stream', 'a tools/call after the cut works');
    await client.next('the notification emitted after the reconnect', emitted(1), at);
    t.equal(await scrapeMetric(f.gateways[1]!.adminUrl, 'mcp_gateway_continuations_total', { source: 'journal' }), 1, 'the held stream was continued from the journal');
    t.notOk(client.logMessages().some((m) => GAVE_UP.test(m)), 'the client never gave its GET stream up');
  });

  /**
   * A GET stream that carried an event, held past the hold period with the client kept away (the
   * replica keeps no log): the client's resumption is a gap, signalled (`stream_reset`, then a
   * fresh GET of the owner).
   */
  async function afterReset(t: Test, bindReset: boolean): Promise<{ client: PythonClient; at: number }> {
    const f = resetFleet;
    const expiries = await scrapeMetric(f.gateways[0]!.adminUrl, 'mcp_gateway_hold_expiries_total', { reason: 'timeout' });
    const client = await clientWithGet(t, f, { bindReset });
    await client.call('emit', { count: 1, intervalMs: 0 });
    await client.next('a notification before the cut', emitted(1));
    f.balancer.pause();
    const before = client.events.length;
    // Its reconnect waits, connected to nothing, until the hold has passed.
    f.balancer.cut();
    await waitFor('the held stream let go', bound(MIN_HOLD_MS), async () =>
      (await scrapeMetric(f.gateways[0]!.adminUrl, 'mcp_gateway_hold_expiries_total', { reason: 'timeout' })) === expiries + 1,
    );
    f.balancer.resume();
    const reopened = await client.next('its GET stream reopened', (e) => e.event === 'http' && e['method'] === 'GET', before);
    const at = client.events.indexOf(reopened);
    t.match(reopened, { status: 200, lastEventId: /./ }, 'it resumes with the last event id it saw and gets 200');
    await client.call('emit', { count: 2, intervalMs: 0 });
    await client.next('the notification emitted on the fresh stream', emitted(2), at);
    t.notOk(client.logMessages().some((m) => GAVE_UP.test(m)), 'the client never gave its GET stream up');
    return { client, at };
  }

  t.test('the Python client gets notifications/gateway/stream_reset through a NotificationBinding, and the fresh stream after it', async (t) => {
    const { client, at } = await afterReset(t, true);
    const reset = await client.next('the signal', (e) => e.event === 'stream_reset', at);
    t.match(reset['params'], { resumed: false, reason: 'gap', lastEventId: client.events[at]!['lastEventId'] }, 'with the cursor it resumed with');
  });

  t.test('without a binding the Python client drops notifications/gateway/stream_reset, and still gets the fresh stream', async (t) => {
    const { client, at } = await afterReset(t, false);
    t.equal(client.events.filter((e) => e.event === 'stream_reset').length, 0, 'no binding, nothing delivered');
    // The SDK handles each notification in a task of its own: the drop's log line may follow the
    // notifications after it, so it is awaited, not looked for.
    const dropped = await client.next(
      'the SDK logs (at debug) that it dropped the signal',
      (e) => e.event === 'log' && String(e['message']).includes('notifications/gateway/stream_reset') && String(e['message']).includes('dropped'),
    );
    t.equal(dropped['level'], 'DEBUG', 'at debug');
    t.ok(client.events.slice(at).some(emitted(2)), 'the notifications after it arrive');
  });

  t.test("a Python client's call whose stream carries nothing before its answer, cut before it: answered, the tool run once (J1)", async (t) => {
    const client = await clientWithGet(t, tsFleet);
    const ran = async () => ((await (await fetch(new URL('/healthz', tsReplica.url))).json()) as { toolCalls: Record<string, { started: number; finished: number }> }).toolCalls['progress'];
    const before = (await ran()) ?? { started: 0, finished: 0 };
    const from = client.events.length;
    // No progress token: the tool sends nothing before its answer, 3 s later.
    const answer = client.call('progress', { steps: 30, intervalMs: 100 });
    const primed = await client.next("the call's priming cursor", (e) => e.event === 'token', from);
    tsFleet.balancer.pin(1);
    tsFleet.balancer.cut();
    t.equal(await answer, 'done after 30 steps', 'the answer');
    t.same(await ran(), { started: before.started + 1, finished: before.finished + 1 }, 'the tool ran once, to its end');
    const resumed = client.events.slice(from).find((e) => e.event === 'http' && e['method'] === 'GET' && e['lastEventId'] === primed['token']);
    t.match(resumed, { status: 200 }, 'the client resumed the call from the priming cursor');
  });
}
