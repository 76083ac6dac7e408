/**
 * The responses a signal hands over from a POST stream's journal (J4), and the calls it fails:
 * each call settles once, with its response where the journal holds it by the time it is read.
 */
import t from 'tap';
import { CursorCodec } from '../../src/cursor/codec.js';
import { journaledResponses, unanswered } from '../../src/resumption/from-journal.js';
import { createMemoryStore } from '../../src/store/memory.js';
import { JournalFrames } from '../../src/store/journal-frames.js';

const TTL_MS = 600_000;
const INC = 'p1p1p1p1p1p1p1p1';
const block = (data: string): string => `event: message\ndata: ${data}\n\n`;

t.test('unanswered: the pending calls without a journaled response, as a multiset, ids compared exactly', async (t) => {
  t.same(unanswered([7, 8], []), [7, 8], 'none journaled: all fail');
  t.same(unanswered([7, 8], [8]), [7], 'a response that landed after the decision read the stream: that call settles with it');
  t.same(unanswered([7, '7'], [7]), ['7'], '7 and "7" are different ids');
  t.same(unanswered([7, 7], [7]), [7], 'one response settles one request');
  t.same(unanswered([], [7]), [], 'nothing pending: nothing fails');
});

t.test('journaledResponses: the responses after a position, under their cursors, and their ids', async (t) => {
  const store = createMemoryStore();
  t.teardown(() => store.close());
  await store.bindSession({ sessionId: 's1', owner: 'r1', ownerEpoch: 'e1' }, TTL_MS);
  await store.openIncarnation({ id: INC, sessionId: 's1', owner: 'r1', kind: 'post', pending: [7, 'a'], supersede: false }, TTL_MS);
  const payloads = [
    block('{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}'),
    block('{"jsonrpc":"2.0","id":7,"result":{}}'),
    block('{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"no"}}'),
  ];
  const batch = { attach: 1, fromSeq: 1, upstreamIds: payloads.map(() => null), payloads: JournalFrames.of(payloads), responded: [7, 'a'] };
  t.equal(await store.recordEvents('s1', INC, batch, 1000, TTL_MS), 'ok');
  const codec = new CursorCodec('test-secret-0123456789abcdefghijklmnopqrstuvwxyz');
  const all = await journaledResponses(store, codec, 's1', INC, 0);
  t.same(all.ids, [7, 'a'], 'both responses, in order');
  const cursors = codec.issuer('s1', INC).encode([2, 3]);
  t.ok(all.text.includes(`id: ${cursors[0]}\n`) && all.text.includes(`id: ${cursors[1]}\n`), 'each under its original cursor');
  t.notOk(all.text.includes('notifications/progress'), 'not the events between');
  t.same((await journaledResponses(store, codec, 's1', INC, 2)).ids, ['a'], 'after a position: the ones after it');
  t.same(await journaledResponses(store, codec, 's1', 'AAAAAAAAAAAAAAAA', 0), { text: '', ids: [] }, 'an incarnation not recorded: none');
});
