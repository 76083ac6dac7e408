/**
 * The facts a resumption decides on (facts.ts): what is read, and when the owner of a GET stream
 * that no pump reads any more is probed before the decision, against a real fleet whose replica is
 * a real HTTP server (alive) or a port that refuses (dead).
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import t, { type Test } from 'tap';
import type { DecodeResult } from '../../src/cursor/codec.js';
import { Fleet } from '../../src/fleet/index.js';
import { createLogger } from '../../src/logger.js';
import { createMetrics } from '../../src/metrics.js';
import { decide } from '../../src/resumption/decide.js';
import { gatherFacts, type FactsContext, type FactsReader } from '../../src/resumption/facts.js';
import { createMemoryStore } from '../../src/store/memory.js';
import type { IncarnationRecord, IncarnationView, SessionRecord } from '../../src/store/types.js';
import { testConfig } from '../helpers/gateway.js';
import { refusingPort } from '../helpers/http.js';
import { PROBE_TIMEOUT_MS } from '../helpers/wait.js';

const NOW = 1_000_000;
/** This instance's id, as its pumps write it into a lease. */
const HERE = 'gw-here';

const session: SessionRecord = { sessionId: 's1', owner: 'r1', ownerEpoch: '', state: 'active', createdAt: 0 };
/** The session's open GET stream, journaled, its replica without a log; its lease lapsed. */
const ended: IncarnationRecord = { id: 'inc-get-000000001', sessionId: 's1', owner: 'r1', kind: 'get', state: 'open', head: 5, base: 0, attach: 1, pending: [],
  pump: HERE, pumpUntil: NOW, tailUntil: 0, held: false, clientSeq: 0, journaled: true };
const cursor: DecodeResult = { kind: 'ok', fields: { incarnation: ended.id, seq: 3 } };

function viewOf(change: Partial<IncarnationRecord> = {}, currentGet: string | undefined = ended.id): IncarnationView {
  return { record: { ...ended, ...change }, currentGet, at: null, after: [null, null] };
}

/** A reader that answers `session` and `view`, and keeps what it was asked to read. */
function reader(found: { session: SessionRecord | null; view: IncarnationView | null }) {
  const reads: Parameters<FactsReader>[0][] = [];
  const read: FactsReader = async (at) => {
    reads.push(at);
    return found;
  };
  return { read, reads };
}

const context = (change: Partial<FactsContext> = {}): FactsContext => ({ journal: true, now: NOW, endedHere: () => false, ...change });

/** A fleet of one replica, r1: a real HTTP server that counts the probes it answers, or a port that refuses. */
async function fleetOf(t: Test, owner: 'alive' | 'dead') {
  let probes = 0;
  let url = `http://127.0.0.1:${await refusingPort()}/mcp`;
  if (owner === 'alive') {
    const http = createServer((_req, res) => {
      probes++;
      res.writeHead(405).end();
    });
    http.listen(0, '127.0.0.1');
    await once(http, 'listening');
    t.teardown(() => http.close());
    url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`;
  }
  const config = testConfig({ replicas: [{ id: 'r1', url }], health: { intervalMs: 60_000, timeoutMs: PROBE_TIMEOUT_MS } });
  const fleet = new Fleet({ config, store: createMemoryStore(), metrics: createMetrics(new Registry()), logger: createLogger('silent') });
  t.teardown(() => fleet.close());
  return { fleet, probes: () => probes };
}

t.test('a lease that lapsed, was released, or is this instance’s for a stream ended here: the owner is probed first', async (t) => {
  const cases: [string, IncarnationView, boolean][] = [
    ['the lease lapsed', viewOf(), false],
    ['the lease released', viewOf({ pump: '', pumpUntil: 0 }), false],
    ['this instance’s lease still running, the stream ended here', viewOf({ pumpUntil: NOW + 1000 }), true],
    ['no GET incarnation named current', viewOf({}, undefined), false],
  ];
  for (const [name, view, endedHere] of cases) {
    const dead = await fleetOf(t, 'dead');
    const facts = await gatherFacts(cursor, reader({ session, view }).read, dead.fleet, context({ endedHere: () => endedHere }));
    t.equal(facts.ownerGone, true, `${name}: a dead owner is found gone`);
    t.equal(facts.pumpEnded, endedHere, `${name}: pumpEnded as this instance knows it`);
    t.match(decide(facts), { kind: 'new_stream', reason: 'owner_gone', freshGet: false }, `${name}: owner_gone, not a gap nor the journal`);

    const alive = await fleetOf(t, 'alive');
    const up = await gatherFacts(cursor, reader({ session, view }).read, alive.fleet, context({ endedHere: () => endedHere }));
    t.equal(alive.probes(), 1, `${name}: one probe`);
    t.equal(up.ownerGone, false, `${name}: an owner that answers is not gone`);
    t.match(decide(up), { kind: 'journal', live: false }, `${name}: the journal, then the end (J5 decides what follows)`);
  }
});

t.test('a stream a pump still reads, or that is not the session’s open journaled GET stream: no probe', async (t) => {
  const cases: [string, IncarnationView, Partial<FactsContext>][] = [
    ['another instance’s lease running', viewOf({ pump: 'gw-other', pumpUntil: NOW + 1000 }), {}],
    ['this instance’s lease running, its pump here', viewOf({ pumpUntil: NOW + 1000 }), {}],
    ['the journal off', viewOf(), { journal: false }],
    ['not journaled', viewOf({ journaled: false }), {}],
    ['a POST stream', viewOf({ kind: 'post', pending: [7] }), {}],
    ['ended by the gateway', viewOf({ state: 'closed' }), {}],
    ['superseded', viewOf({}, 'inc-newer-0000001'), {}],
    ['of the session’s former owner', viewOf({ owner: 'r0' }), {}],
  ];
  for (const [name, view, change] of cases) {
    const alive = await fleetOf(t, 'alive');
    await gatherFacts(cursor, reader({ session, view }).read, alive.fleet, context(change));
    t.equal(alive.probes(), 0, `${name}: the owner is not asked`);
    const dead = await fleetOf(t, 'dead');
    const facts = await gatherFacts(cursor, reader({ session, view }).read, dead.fleet, context(change));
    t.equal(facts.ownerGone, false, `${name}: a dead owner not yet known here is not found gone`);
  }
});

t.test('an owner already known gone is not probed again', async (t) => {
  const alive = await fleetOf(t, 'alive');
  const facts = await gatherFacts(cursor, reader({ session: { ...session, ownerEpoch: 'retired' }, view: viewOf() }).read, alive.fleet, context());
  t.equal(facts.ownerGone, true, 'bound under a retired epoch: gone');
  t.equal(alive.probes(), 0, 'no probe');
});

t.test('without confirmAlive (explain reads, never probes): the facts as known', async (t) => {
  const dead = await fleetOf(t, 'dead');
  const known = { ownerGone: dead.fleet.ownerGone.bind(dead.fleet), health: dead.fleet.health.bind(dead.fleet) };
  const facts = await gatherFacts(cursor, reader({ session, view: viewOf() }).read, known, { journal: true, now: NOW });
  t.equal(facts.ownerGone, false, 'not probed: not known gone');
  t.equal(facts.pumpEnded, false, 'no pumps known: not ended here');
  t.equal(facts.ownerHealth, 'up');
});

t.test('what is read: the cursor’s incarnation at its position, and nothing of a session that is not there', async (t) => {
  const alive = await fleetOf(t, 'alive');
  const found = reader({ session, view: viewOf({ pump: 'gw-other', pumpUntil: NOW + 1000 }) });
  const facts = await gatherFacts(cursor, found.read, alive.fleet, context());
  t.same(found.reads, [{ incarnationId: ended.id, afterSeq: 3 }], 'one read, at the cursor');
  t.match(facts, { session, ownerGone: false, ownerHealth: 'up', cursor, journal: true, now: NOW, pumpEnded: false });

  const foreign: DecodeResult = { kind: 'foreign', why: 'bad_mac' };
  const none = reader({ session, view: null });
  await gatherFacts(foreign, none.read, alive.fleet, context());
  t.same(none.reads, [undefined], 'a foreign cursor names nothing to read');

  const gone = await fleetOf(t, 'dead');
  const nothing = await gatherFacts(cursor, reader({ session: null, view: viewOf() }).read, gone.fleet, context({ endedHere: () => true }));
  t.match(nothing, { session: null, view: null, ownerGone: false, ownerHealth: undefined, pumpEnded: false }, 'no session: no view, no owner');
});

t.test("a lease that lapsed lately: its instance's liveness is asked; alive, the pump lives and the owner is not probed", async (t) => {
  const asked: string[] = [];
  const instanceAlive = (alive: boolean) => async (id: string) => {
    asked.push(id);
    return alive;
  };
  const late = viewOf({ pump: 'gw-other', pumpUntil: NOW - 5000 });
  const dead = await fleetOf(t, 'dead');
  const facts = await gatherFacts(cursor, reader({ session, view: late }).read, dead.fleet, context({ instanceAlive: instanceAlive(true) }));
  t.same(asked, ['gw-other'], "the lease's instance is asked");
  t.equal(facts.pumpInstanceAlive, true);
  t.equal(facts.ownerGone, false, 'the owner is not probed: the pump reads its stream');
  t.match(decide(facts), { kind: 'journal', live: true }, 'the journal, then live: not a gap');

  asked.length = 0;
  const gone = await gatherFacts(cursor, reader({ session, view: late }).read, dead.fleet, context({ instanceAlive: instanceAlive(false) }));
  t.equal(gone.pumpInstanceAlive, undefined, 'its instance gone too');
  t.equal(gone.ownerGone, true, 'then the owner is probed, as for a pump gone');

  asked.length = 0;
  const cases: [string, IncarnationView, Partial<FactsContext>][] = [
    ['a lease running', viewOf({ pump: 'gw-other', pumpUntil: NOW + 1000 }), {}],
    ['no lease', viewOf({ pump: '', pumpUntil: 0 }), {}],
    ['ended here', late, { endedHere: () => true }],
    ['closed', viewOf({ pump: 'gw-other', pumpUntil: NOW - 5000, state: 'closed' }), {}],
    ['the journal off', late, { journal: false }],
  ];
  for (const [name, view, change] of cases) {
    const alive = await fleetOf(t, 'alive');
    await gatherFacts(cursor, reader({ session, view }).read, alive.fleet, context({ instanceAlive: instanceAlive(true), ...change }));
    t.same(asked, [], `${name}: no liveness asked`);
  }
});
