/** What the gateway records of an event, and the owner check it makes with it (CONTRACT.md §4 E6, §5 check 7). */
import fc from 'fast-check';
import t from 'tap';
import { CursorCodec } from '../../src/cursor/codec.js';
import { compareReplayed, eventDigest, eventTag, tagDigest, tagId } from '../../src/sse/event-tag.js';
import { SseRewriter, type RecordSink } from '../../src/sse/rewriter.js';
import { ownerCheck } from './event-tag.properties.js';

const codec = new CursorCodec('a-test-secret-of-at-least-32-bytes!!');

t.test('a tag holds the id and a digest of the block; a bare id (an earlier record) is its own id', async (t) => {
  const tag = eventTag('a b~c', 'event: message\nid: a b~c\ndata: 1\n\n');
  t.match(tag, /^~[A-Za-z0-9_-]{11} a b~c$/, 'the digest first, then the id as it was');
  t.equal(tagId(tag), 'a b~c');
  t.equal(tagDigest(tag), eventDigest('event: message\nid: a b~c\ndata: 1\n\n'));
  t.equal(tagId('u-7'), 'u-7', 'a bare id');
  t.equal(tagDigest('u-7'), undefined, 'has no digest: compared by id alone');
  t.equal(eventDigest(Buffer.from('é')), eventDigest('é'), 'bytes and text digest alike (UTF-8)');
  t.not(eventDigest('data: 1\n\n'), eventDigest('data: 2\n\n'));
});

t.test('compareReplayed: the same event, an owner numbering anew, or a skipped one', async (t) => {
  const block = (data: string) => () => `id: u2\ndata: ${data}\n\n`;
  const expected = [eventTag('u2', block('two')()), eventTag('u3', 'id: u3\ndata: three\n\n')];
  const recorded = new Set(['u1', 'u2', 'u3']);
  t.equal(compareReplayed(expected, 0, 'u2', block('two'), recorded), 'same');
  t.equal(compareReplayed(expected, 0, 'u2', block('other'), recorded), 'reused', 'the recorded id with other bytes');
  t.equal(compareReplayed(expected, 0, 'u1', block('two'), recorded), 'reused', 'the id of an event recorded before it');
  t.equal(compareReplayed(expected, 0, 'u3', block('two'), recorded), 'other', 'the id of a later event: skipped');
  t.equal(compareReplayed(expected, 0, 'u9', block('two'), recorded), 'other', 'an id never recorded');
  t.equal(compareReplayed(['u2'], 0, 'u2', block('anything'), recorded), 'same', 'a bare id compares by id alone');
});

function sink(): RecordSink & { tags: string[]; marks: string[] } {
  const tags: string[] = [];
  const marks: string[] = [];
  return {
    tags,
    marks,
    record: async (_from, ids) => {
      for (const id of ids) if (id) tags.push(id);
      return 'ok';
    },
    diverged: async (when) => {
      marks.push(when);
    },
  };
}

function rewriter(s: RecordSink, head: number, verify?: ConstructorParameters<typeof SseRewriter>[0]['verify']): SseRewriter {
  return new SseRewriter({ cursors: { codec, sessionId: 's1', incarnation: 'AAAAAAAAAAAAAAAA', sink: s }, head, maxEventBytes: 4096, trackResponses: false, ...(verify ? { verify } : {}) });
}

t.test('the live stream of a continuation: an event under a recorded id is not forwarded, and the incarnation is marked first', async (t) => {
  for (const canonical of [true, false]) {
    const block = (id: string, data: string) => (canonical ? `event: message\nid: ${id}\ndata: ${data}\n\n` : `id: ${id}\ndata: ${data}\n\n`);
    const s = sink();
    const r = rewriter(s, 3, { expected: [], fromSeq: 3, recorded: new Set(['1', '2', '3']), limit: 16 });
    const first = await r.push(Buffer.from(block('4', 'new')));
    t.equal(first.end, undefined, `${canonical ? 'copied' : 'parsed'}: a new id passes`);
    let marked = false;
    s.diverged = async (when) => {
      marked = true;
      s.marks.push(when);
    };
    const second = await r.push(Buffer.from(block('5', 'five') + block('1', 'a fresh counter') + block('6', 'after')));
    t.ok(marked, 'marked before the result is released');
    t.equal(second.end, 'reused');
    t.notMatch(second.out.toString(), /a fresh counter|after/, 'neither it nor what follows leaves');
    t.match(second.out.toString(), /five/, 'what came before it does');
    t.same(s.marks, ['live']);
    t.same(s.tags.map(tagId), ['4', '5'], 'the new events recorded, the reused one not');
  }
});

t.test('the live stream: an id the live stream itself used is reused too; the ids kept are bounded', async (t) => {
  const s = sink();
  const r = rewriter(s, 0, { expected: [], fromSeq: 0, recorded: new Set(), limit: 2 });
  t.equal((await r.push(Buffer.from('id: a\ndata: 1\n\nid: b\ndata: 2\n\nid: c\ndata: 3\n\n'))).end, undefined);
  t.equal((await r.push(Buffer.from('id: a\ndata: 4\n\n'))).end, undefined, 'the oldest beyond the bound is forgotten');
  t.equal((await r.push(Buffer.from('id: c\ndata: 5\n\n'))).end, 'reused', 'a kept one is not');
});

t.test('without a continuation from the owner, ids are not checked', async (t) => {
  const s = sink();
  const r = rewriter(s, 0);
  t.equal((await r.push(Buffer.from('id: a\ndata: 1\n\nid: a\ndata: 2\n\n'))).end, undefined);
  t.same(s.marks, []);
});

t.test('property: a faithful replay is continued; one reused or altered event never passes', async (t) => {
  const details = await fc.check(ownerCheck, { numRuns: 300 });
  t.notOk(details.failed, 'held for 300 cases', { report: details.failed ? fc.defaultReportMessage(details) : '' });
});
