/** planPlainGet: what a plain GET does about its session's current GET stream (streams/held-get.ts). */
import t from 'tap';
import type { IncarnationRecord } from '../../src/store/types.js';
import { planPlainGet } from '../../src/streams/held-get.js';

const NOW = 1_000_000;
const held: IncarnationRecord = {
  id: 'inc-get-000000001',
  sessionId: 's1',
  owner: 'r1',
  kind: 'get',
  state: 'open',
  head: 4,
  base: 0,
  attach: 1,
  pending: [],
  pump: 'gw-a',
  pumpUntil: NOW + 30_000,
  tailUntil: 0,
  held: true,
  clientSeq: 3,
  journaled: true,
};

t.test('a held GET of the owner, pumped, with no client: taken over from the position written to its client', async (t) => {
  t.same(planPlainGet(held, 'r1', NOW), { kind: 'take_over', record: held });
  const idle = { ...held, head: 0, clientSeq: 0 };
  t.same(planPlainGet(idle, 'r1', NOW), { kind: 'take_over', record: idle }, 'with no event yet, as well');
  const tailEnded = { ...held, tailUntil: NOW };
  t.same(planPlainGet(tailEnded, 'r1', NOW), { kind: 'take_over', record: tailEnded }, 'a tail lease that ends now is no client');
});

t.test('a client attached, on the pump\'s instance or tailing: the owner is asked, a 409 expected', async (t) => {
  t.same(planPlainGet({ ...held, held: false }, 'r1', NOW), { kind: 'ask_owner', attached: true }, 'attached to its pump');
  t.same(planPlainGet({ ...held, tailUntil: NOW + 1 }, 'r1', NOW), { kind: 'ask_owner', attached: true }, 'tailed through another instance');
});

t.test('nothing to take: the owner is asked as without a journal', async (t) => {
  const cases: [string, IncarnationRecord | null, string][] = [
    ['no current GET', null, 'r1'],
    ['a POST stream', { ...held, kind: 'post' }, 'r1'],
    ['a closed one', { ...held, state: 'closed' }, 'r1'],
    ['one of an owner the session no longer has', held, 'r2'],
    ['no pump', { ...held, pump: '', pumpUntil: 0 }, 'r1'],
    ['a pump lease that ran out', { ...held, pumpUntil: NOW }, 'r1'],
  ];
  for (const [what, current, owner] of cases) {
    t.same(planPlainGet(current, owner, NOW), { kind: 'ask_owner', attached: false }, what);
  }
});

t.test("a pump lease only late, its instance alive: the held GET is taken over all the same; its instance gone, the owner is asked", async (t) => {
  const late = { ...held, pumpUntil: NOW - 5000 };
  t.same(planPlainGet(late, 'r1', NOW, true), { kind: 'take_over', record: late }, 'alive: taken over');
  t.same(planPlainGet(late, 'r1', NOW, false), { kind: 'ask_owner', attached: false }, 'gone: nothing to take');
  t.same(planPlainGet({ ...late, pumpUntil: NOW - 120_000 }, 'r1', NOW, true), { kind: 'ask_owner', attached: false }, 'lapsed too long ago: a release lost, not lateness');
});
