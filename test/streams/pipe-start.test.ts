/**
 * src/streams/pipe-start.ts on real loopback sockets: the start of the client's stream sends the
 * head set by start() with what was held back, counts those events and runs the begun hook; a
 * failure before the start is answered once.
 */
import t from 'tap';
import { begin, fail, holdBack } from '../../src/streams/pipe-start.js';
import { pipeState, TEST_INCARNATION, testCodec } from '../helpers/pipe-state.js';

t.test('begin sends the head with the output held back, counts its events, then runs the begun hook', async (t) => {
  const { client: clientSide, handled } = await pipeState(t, { verify: ['u1'] });
  const { state, events } = handled;
  const order: string[] = [];
  t.ok(holdBack(state, { out: Buffer.from('data: one\n\n'), events: 1 }, () => order.push('begun early')), 'a held batch keeps the stream going');
  t.equal(state.started, false, 'nothing begins while the replay is not verified');
  state.unverified.chunks.push(Buffer.from('data: two\n\n'));
  state.unverified.bytes += 11;
  state.unverified.events += 1;
  begin(state, () => order.push(`begun with ${events.join('+')} events`));
  const client = await clientSide;
  t.equal(client.res.headers['x-started'], 'yes', 'the head set by start()');
  await client.seen('data: two\n\n');
  t.equal(client.text(), 'data: one\n\ndata: two\n\n', 'the held output, in order');
  t.same(order, ['begun with 2 events'], 'begun runs once, after the events were counted');
  t.equal(state.delivered, state.rewriter.head, 'delivered: what the rewriter committed');
  t.same(state.unverified, { chunks: [], bytes: 0, events: 0 }, 'nothing is held any more');
  t.ok(state.written && state.started);
  state.channel.settle('gateway_end');
});

t.test('begin with nothing held sends the head alone, at once', async (t) => {
  const { client: clientSide, handled } = await pipeState(t);
  begin(handled.state, () => undefined);
  const client = await clientSide;
  t.equal(client.res.headers['x-started'], 'yes');
  t.equal(client.text(), '');
  t.same(handled.events, [], 'no events counted');
  handled.state.channel.settle('gateway_end');
});

t.test('a held batch past the bound fails the start once, and nothing has left', async (t) => {
  const { handled } = await pipeState(t, { verify: ['u1'] });
  const { state, failures } = handled;
  t.notOk(holdBack(state, { out: Buffer.alloc(2048, 'x'), events: 0 }, () => t.fail('must not begin')), 'too large');
  fail(state, 'timeout');
  t.same(failures, ['too_large'], 'answered once, with the first reason');
  t.equal(await state.channel.done, 'not_verified');
  t.equal(state.started, false);
});

for (const journal of [true, false]) {
  // Not journaled: the owner's replay with the journal off, primed all the same.
  const which = journal ? 'a journaled continuation' : "a continuation that is not journaled (the owner's replay, the journal off)";
  t.test(`${which} begins with a priming event for the position it continues after, then what was held (J1)`, async (t) => {
    const { client: clientSide, handled } = await pipeState(t, { verify: ['u1'], prime: true, journal });
    const { state } = handled;
    state.unverified.chunks.push(Buffer.from('data: one\n\n'));
    state.unverified.bytes += 11;
    state.unverified.events += 1;
    let primed = 0;
    begin(state, () => undefined, () => primed++);
    const client = await clientSide;
    await client.seen('data: one\n\n');
    const [cursor] = testCodec.issuer('s1', TEST_INCARNATION).encode([0]);
    t.equal(client.text(), `id: ${cursor}\ndata: \n\ndata: one\n\n`, "the client's own position first, empty data");
    t.equal(primed, 0, 'nothing recorded for it: the client holds that cursor already');
    state.channel.settle('gateway_end');
  });
}

t.test("the owner's replay on a response that began with the journal's events adds no priming event: the client holds that position", async (t) => {
  const { client: clientSide, handled } = await pipeState(t, { verify: ['u1'], prime: true });
  const { state } = handled;
  const { res } = state.options;
  res.writeHead(200, { 'content-type': 'text/event-stream', 'x-started': 'journal' });
  res.write('id: j1\ndata: journaled\n\n');
  state.unverified.chunks.push(Buffer.from('data: one\n\n'));
  state.unverified.bytes += 11;
  state.unverified.events += 1;
  begin(state, () => undefined, () => t.fail('nothing to record'));
  const client = await clientSide;
  await client.seen('data: one\n\n');
  t.equal(client.res.headers['x-started'], 'journal', 'the head the journal continuation sent');
  t.equal(client.text(), 'id: j1\ndata: journaled\n\ndata: one\n\n', "the journal's event, then the replay's, nothing between");
  state.channel.settle('gateway_end');
});

t.test('a journaled stream that has issued nothing asks for its own priming event, once', async (t) => {
  const { handled } = await pipeState(t, { prime: true });
  let primed = 0;
  begin(handled.state, () => undefined, () => primed++);
  t.equal(primed, 1);
  handled.state.channel.settle('gateway_end');
});
