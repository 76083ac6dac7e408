import calculateSlot from 'cluster-key-slot';
import t from 'tap';
import { CallFlush, type PreparedCall } from '../../src/store/redis/call-flush.js';

/** A call whose keys are in the slot of `tag`, settled into `answers` under `name`. */
function batch(name: string, tag: string, answers: Map<string, string | Error>): PreparedCall<string> {
  const key = `gw:{${tag}}:inc:${name}`;
  return { keys: [key, `${key}:p`, `${key}:j`, `${key}:x`], args: [name], settle: (answer) => void answers.set(name, answer) };
}

/** Sends that record what each call held and answer every batch with its name. */
function recorder(): { calls: string[][]; send: (group: readonly PreparedCall<string>[]) => Promise<void> } {
  const calls: string[][] = [];
  return {
    calls,
    send: async (group) => {
      calls.push(group.map((record) => String(record.args[0])));
      for (const record of group) record.settle(`ok ${String(record.args[0])}`);
    },
  };
}

const turnEnded = () => new Promise<void>((resolve) => setImmediate(resolve));

t.test('the calls of one loop turn leave in one round trip, in order, each with its own answer', async (t) => {
  const { calls, send } = recorder();
  const flush = new CallFlush<string>(send, false);
  const answers = new Map<string, string | Error>();
  for (const name of ['a', 'b', 'c']) flush.add(batch(name, name, answers));
  t.same(calls, [], 'nothing leaves before the turn ends');
  await turnEnded();
  await turnEnded();
  t.same(calls, [['a', 'b', 'c']]);
  t.same([...answers], [['a', 'ok a'], ['b', 'ok b'], ['c', 'ok c']]);
  flush.add(batch('d', 'd', answers));
  await turnEnded();
  await turnEnded();
  t.same(calls, [['a', 'b', 'c'], ['d']], 'a later turn is a call of its own');
});

t.test('a full round trip leaves at once', async (t) => {
  const { calls, send } = recorder();
  const flush = new CallFlush<string>(send, false);
  const answers = new Map<string, string | Error>();
  for (let i = 0; i < 64; i++) flush.add(batch(`b${i}`, 'x', answers));
  t.equal(calls.length, 1, 'sent without waiting for the turn to end');
  t.equal(calls[0]!.length, 64);
  flush.add(batch('next', 'x', answers));
  await turnEnded();
  await turnEnded();
  t.same(calls[1], ['next']);
});

t.test('on a Cluster, one call per slot, each in the order recorded', async (t) => {
  const { calls, send } = recorder();
  const flush = new CallFlush<string>(send, true);
  const answers = new Map<string, string | Error>();
  // Tags chosen in two different slots.
  t.not(calculateSlot('gw:{s1}:inc'), calculateSlot('gw:{s2}:inc'));
  for (const [name, tag] of [['a1', 's1'], ['b1', 's2'], ['a2', 's1'], ['b2', 's2'], ['a3', 's1']] as const) flush.add(batch(name, tag, answers));
  await turnEnded();
  await turnEnded();
  t.same(calls, [['a1', 'a2', 'a3'], ['b1', 'b2']]);
});

t.test('a round trip that fails fails each of its calls with its error', async (t) => {
  const flush = new CallFlush<string>(async () => {
    throw new Error('no reply within 250 ms');
  }, false);
  const answers = new Map<string, string | Error>();
  flush.add(batch('a', 'a', answers));
  flush.add(batch('b', 'b', answers));
  await turnEnded();
  await turnEnded();
  t.equal(answers.size, 2);
  for (const answer of answers.values()) t.match(answer, { message: 'no reply within 250 ms' });
});
