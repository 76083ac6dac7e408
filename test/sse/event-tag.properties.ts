/**
 * Properties of the owner check (src/sse/event-tag.ts through src/sse/rewriter.ts; CONTRACT.md §4
 * E6, §5 check 7): a stream is recorded as it first passes, then continued from a cursor with what
 * an owner sends. A faithful replay of any sequence, then new events, is always continued; any
 * single event reused (an altered replay, another recorded id, a live event under a recorded id)
 * is never forwarded, and ends the continuation as `reused`, the incarnation marked once.
 */
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { CursorCodec } from '../../src/cursor/codec.js';
import { tagId } from '../../src/sse/event-tag.js';
import { SseParser } from '../../src/sse/parser.js';
import { SseRewriter, type EndReason, type RecordSink } from '../../src/sse/rewriter.js';
import { splitAt } from './streams.js';

const codec = new CursorCodec('a-property-secret-of-at-least-32-bytes');

type Mutation = 'none' | 'altered' | 'other_recorded' | 'live_reuse' | 'skipped';

interface Case {
  readonly datas: readonly string[];
  readonly cursor: number;
  readonly live: readonly string[];
  readonly mutation: Mutation;
  readonly at: number;
  readonly cuts: readonly number[];
  /** The form the owner writes its blocks in: the SDK's (copied as bytes on the live stream) or another (parsed). */
  readonly canonical: boolean;
}

const dataArb = fc.stringMatching(/^[ -~]{0,24}$/);
const caseArb: fc.Arbitrary<Case> = fc.record({
  datas: fc.array(dataArb, { minLength: 1, maxLength: 10 }),
  cursor: fc.nat(10),
  live: fc.array(dataArb, { maxLength: 4 }),
  mutation: fc.constantFrom<Mutation>('none', 'altered', 'other_recorded', 'live_reuse', 'skipped'),
  at: fc.nat(20),
  cuts: fc.array(fc.nat(2000), { maxLength: 6 }),
  canonical: fc.boolean(),
});

/** A block as the owner writes it. */
function block(id: string, data: string, canonical: boolean): string {
  return canonical ? `event: message\nid: ${id}\ndata: ${data}\n\n` : `id: ${id}\nevent: message\ndata: ${data}\n\n`;
}

interface Continued {
  readonly datas: string[];
  readonly end: EndReason | undefined;
  readonly diverged: string[];
}

function rewriter(head: number, sink: RecordSink, verify?: ConstructorParameters<typeof SseRewriter>[0]['verify']): SseRewriter {
  return new SseRewriter({ cursors: { codec, sessionId: 's', incarnation: 'AbCdEfGhIjKlMnOp', sink }, head, maxEventBytes: 1 << 16, trackResponses: false, ...(verify ? { verify } : {}) });
}

async function run(c: Case): Promise<{ continued: Continued; expectedDatas: string[]; mutation: Mutation }> {
  const n = c.datas.length;
  const cursor = c.cursor % (n + 1);
  // The stream as it first passed: its records, in order.
  const tags: string[] = [];
  const first = rewriter(0, {
    record: async (_from, ids) => {
      for (const id of ids) tags.push(id!);
      return 'ok';
    },
  });
  await first.push(Buffer.from(c.datas.map((d, i) => block(`u${i + 1}`, d, c.canonical)).join('')));
  assert.equal(tags.length, n, 'every event recorded');

  // What the owner sends after the cursor: the recorded events after it, then new ones.
  const sent = c.datas.slice(cursor).map((d, i) => ({ id: `u${cursor + i + 1}`, data: d }));
  const live = c.live.map((d, i) => ({ id: `v${i + 1}`, data: d }));
  let mutation = c.mutation;
  if (mutation !== 'none' && mutation !== 'live_reuse' && sent.length === 0) mutation = 'live_reuse';
  // An earlier recorded id: the replay's first event after the cursor 0 has none before it.
  if (mutation === 'other_recorded' && cursor + (c.at % sent.length) === 0) mutation = 'altered';
  let mutatedAt = -1;
  if (mutation === 'altered') {
    mutatedAt = c.at % sent.length;
    sent[mutatedAt] = { ...sent[mutatedAt]!, data: `${sent[mutatedAt]!.data}~` };
  } else if (mutation === 'other_recorded') {
    mutatedAt = c.at % sent.length;
    const own = cursor + mutatedAt + 1;
    sent[mutatedAt] = { ...sent[mutatedAt]!, id: `u${(c.at % (own - 1)) + 1}` };
  } else if (mutation === 'live_reuse') {
    const reused = { id: `u${(c.at % n) + 1}`, data: 'fresh' };
    live.splice(c.at % (live.length + 1), 0, reused);
    mutatedAt = sent.length + live.indexOf(reused);
  } else if (mutation === 'skipped') {
    mutatedAt = c.at % sent.length;
    sent.splice(mutatedAt, 1);
  }
  const owner = [...sent, ...live];
  const bytes = Buffer.from(owner.map((e) => block(e.id, e.data, c.canonical)).join(''));

  const diverged: string[] = [];
  const continuation = rewriter(n, { record: async () => 'ok', diverged: async (when) => void diverged.push(when) }, {
    expected: tags.slice(cursor),
    fromSeq: cursor,
    recorded: new Set(tags.map(tagId)),
    limit: 1024,
  });
  const datas: string[] = [];
  const parser = new SseParser((item) => {
    if (item.kind === 'event') datas.push(item.data ?? '');
  });
  let end: EndReason | undefined;
  for (const chunk of splitAt(bytes, [...c.cuts].sort((a, b) => a - b).filter((x) => x < bytes.length))) {
    const result = await continuation.push(chunk);
    parser.push(result.out);
    end ??= result.end;
  }
  end ??= continuation.end().end;
  const expectedDatas = owner.slice(0, mutatedAt < 0 ? owner.length : mutatedAt).map((e) => e.data);
  return { continued: { datas, end, diverged }, expectedDatas, mutation: mutatedAt >= 0 ? mutation : 'none' };
}

/** The property (asynchronous: the rewriter's records are promises), run by test/sse/event-tag.test.ts. */
export const ownerCheck = fc.asyncProperty(caseArb, async (c) => {
  const { continued, expectedDatas, mutation } = await run(c);
  if (mutation === 'none') {
    assert.equal(continued.end, undefined, 'a faithful owner is continued');
    assert.deepEqual(continued.datas, expectedDatas, 'every replayed and new event, once, in order');
    assert.deepEqual(continued.diverged, [], 'nothing marked');
    return;
  }
  // A skipped event is a gap (check 7); an id used again is the owner numbering anew (E6).
  assert.equal(continued.end, mutation === 'skipped' ? 'gap' : 'reused', `${mutation}: how the continuation ends`);
  assert.deepEqual(continued.datas.slice(0, expectedDatas.length), expectedDatas, 'what came before it was forwarded');
  assert.ok(continued.datas.length <= expectedDatas.length, 'nothing of it or after it was forwarded');
  assert.equal(continued.diverged.length, mutation === 'skipped' ? 0 : 1, 'the incarnation marked once when reused');
});
