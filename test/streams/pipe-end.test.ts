/**
 * src/streams/pipe-end.ts on real loopback sockets: the gateway's end sends a retry hint only to a
 * begun stream; a draining stream ends once no call is in flight; the replica ending before the
 * start is a failed start, after it an upstream end.
 */
import t from 'tap';
import { drain, drained, gatewayEnd, upstreamEnd } from '../../src/streams/pipe-end.js';
import { begin } from '../../src/streams/pipe-start.js';
import { pipeState, RETRY_HINT_MS } from '../helpers/pipe-state.js';

t.test('the gateway ending a begun stream sends the retry hint, then ends it', async (t) => {
  const { client: clientSide, handled } = await pipeState(t);
  begin(handled.state, () => undefined);
  const client = await clientSide;
  gatewayEnd(handled.state);
  t.same(await client.ended, { body: `retry: ${RETRY_HINT_MS}\n\n`, aborted: false });
  t.equal(await handled.state.channel.done, 'gateway_end');
});

t.test('a draining POST stream ends only once its call has been answered', async (t) => {
  const { client: clientSide, handled } = await pipeState(t, { awaiting: [7] });
  const { state } = handled;
  begin(state, () => undefined);
  await clientSide;
  t.notOk(drained(state), 'not draining: nothing to end');
  drain(state);
  t.ok(state.draining);
  t.notOk(state.channel.settled, 'a call is in flight: the stream goes on');
  t.notOk(drained(state));
  const result = await state.rewriter.commit(state.rewriter.prepare(Buffer.from('data: {"jsonrpc":"2.0","id":7,"result":{}}\n\n')));
  t.equal(result.events, 1);
  t.ok(drained(state), 'answered: the stream ends');
  t.equal(await state.channel.done, 'gateway_end');
});

t.test('the replica ending before the start fails the start; nothing reaches the client', async (t) => {
  const { handled } = await pipeState(t);
  const { state, failures } = handled;
  await upstreamEnd(state, async () => undefined);
  t.ok(state.over);
  t.same(failures, ['upstream_end']);
  t.equal(await state.channel.done, 'not_verified');
});

t.test('the replica ending a begun stream ends the client response', async (t) => {
  const { client: clientSide, handled } = await pipeState(t);
  const { state } = handled;
  begin(state, () => undefined);
  const client = await clientSide;
  await upstreamEnd(state, async () => undefined);
  t.equal(await state.channel.done, 'upstream_end');
  t.same(await client.ended, { body: '', aborted: false });
});
