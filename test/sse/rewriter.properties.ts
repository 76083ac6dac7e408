/**
 * Properties of the SSE rewriter (src/sse/rewriter.ts): however the replica's stream is cut into
 * chunks, the client gets the same bytes and the store the same records; every id becomes a
 * cursor of the session and incarnation, numbered on from the head; the events are otherwise the
 * replica's, as eventsource-parser sees them; and malformed input never throws out of it.
 *
 * Batches are prepared one after the other and joined, as the read-ahead of streams/pipe.ts joins
 * them: that is the record and the bytes one commit makes of them, synchronously.
 */
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { CursorCodec } from '../../src/cursor/codec.js';
import { responseIds } from '../../src/jsonrpc.js';
import type { SseEvent } from '../../src/sse/parser.js';
import { tagId } from '../../src/sse/event-tag.js';
import { joinBatches, SseRewriter, type Batch, type RewriterOptions } from '../../src/sse/rewriter.js';
import { eventText } from '../../src/sse/serializer.js';
import { property, type NamedProperty } from '../helpers/property.js';
import { canonicalStreamArb, malformedArb, oracle, parse, splitAt, streamArb } from './streams.js';

const codec = new CursorCodec('a-property-secret-of-at-least-32-bytes');
const SESSION = 's-1';
const INCARNATION = 'AbCdEfGhIjKlMnOp';

interface Setup {
  cursors: boolean;
  journal: boolean;
  trackResponses: boolean;
  head: number;
  maxEventBytes: number;
}

const setupArb: fc.Arbitrary<Setup> = fc.record({
  cursors: fc.oneof({ weight: 3, arbitrary: fc.constant(true) }, fc.constant(false)),
  journal: fc.boolean(),
  trackResponses: fc.boolean(),
  head: fc.oneof(fc.constant(0), fc.nat(1000), fc.constant(Number.MAX_SAFE_INTEGER - 1000)),
  maxEventBytes: fc.constant(1 << 20),
});

/** Setups whose limit is small enough for the random streams to pass it now and then. */
const smallLimitArb = setupArb.chain((s) => fc.integer({ min: 1, max: 400 }).map((maxEventBytes) => ({ ...s, maxEventBytes })));

function rewriter(setup: Setup): SseRewriter {
  const options: RewriterOptions = {
    cursors: setup.cursors
      ? { codec, sessionId: SESSION, incarnation: INCARNATION, journal: setup.journal, sink: { record: async () => 'ok' } }
      : undefined,
    head: setup.head,
    maxEventBytes: setup.maxEventBytes,
    trackResponses: setup.trackResponses,
  };
  return new SseRewriter(options);
}

interface Rewritten {
  out: Buffer;
  events: number;
  end: string | undefined;
  fromSeq: number;
  upstreamIds: readonly (string | null)[];
  responded: readonly unknown[];
  /** The journaled payloads (none without the journal). */
  payloads: string[];
  head: number;
}

/** The chunks through one rewriter, every batch prepared in turn and joined into one; then its end. */
function rewrite(setup: Setup, chunks: readonly Uint8Array[]): Rewritten {
  const r = rewriter(setup);
  const batches: Batch[] = chunks.map((c) => r.prepare(c));
  const b = joinBatches(batches.length > 0 ? batches : [r.prepare(Buffer.alloc(0))]);
  const ended = r.end();
  assert.equal(ended.out.length, 0, 'nothing is sent at the end');
  return {
    out: Buffer.concat(b.out),
    events: b.events,
    end: b.end,
    fromSeq: b.fromSeq,
    upstreamIds: b.upstreamIds.map((tag) => tag && tagId(tag)),
    responded: b.responded,
    payloads: b.payloads?.texts() ?? [],
    head: b.head,
  };
}

function events(bytes: Buffer): SseEvent[] {
  return parse([bytes]).filter((i): i is SseEvent => i.kind === 'event');
}

/** The position `cursor` names, failing unless it is one of this session and incarnation. */
function seqOf(cursor: string | undefined): number {
  const decoded = codec.decode(cursor ?? '', SESSION);
  assert.equal(decoded.kind, 'ok', `a cursor of the session: ${cursor}`);
  assert.equal(decoded.kind === 'ok' && decoded.fields.incarnation, INCARNATION);
  return decoded.kind === 'ok' ? decoded.fields.seq : -1;
}

const validArb = fc.oneof(streamArb, canonicalStreamArb).map((s) => s.bytes);
const cutsArb = fc.array(fc.nat(), { maxLength: 12 });

/** Split invariance: the same bytes, events, records and end as the whole stream in one chunk. */
function sameAsOneChunk([setup, bytes, cuts]: [Setup, Buffer, number[]]): void {
  const whole = rewrite(setup, [bytes]);
  const split = rewrite(setup, splitAt(bytes, cuts));
  assert.deepStrictEqual({ ...split, out: split.out.toString('latin1') }, { ...whole, out: whole.out.toString('latin1') });
}

export const rewriterProperties: readonly NamedProperty[] = [
  property('however a valid stream is split, the client gets the same bytes and the store the same records', fc.tuple(setupArb, validArb, cutsArb), sameAsOneChunk, {
    numRuns: 150,
  }),
  property(
    'every id becomes a cursor, numbered on from the head; everything else of an event is the replica’s',
    fc.tuple(setupArb, validArb, cutsArb),
    ([setup, bytes, cuts]) => {
      const input = events(bytes);
      const result = rewrite(setup, splitAt(bytes, cuts));
      const output = events(result.out);
      assert.equal(result.end, undefined);
      assert.equal(result.events, input.length);
      // Without cursors an event of only an upstream id is left with nothing to say: a blank line.
      const said = setup.cursors ? input : input.filter((e) => !e.id || e.event !== undefined || e.data !== undefined || e.retry !== undefined);
      assert.equal(output.length, said.length);
      const numbered = (e: SseEvent) => setup.cursors && (setup.journal || (e.id !== undefined && e.id !== ''));
      let seq = setup.head;
      const ids: (string | null)[] = [];
      const payloads: string[] = [];
      const responded: unknown[] = [];
      said.forEach((e, i) => {
        const o = output[i]!;
        assert.deepStrictEqual({ event: o.event, data: o.data, retry: o.retry }, { event: e.event, data: e.data, retry: e.retry });
        if (numbered(e)) {
          assert.equal(seqOf(o.id), ++seq, 'the next position');
          ids.push(e.id ? e.id : null);
          payloads.push(eventText({ ...e, id: undefined }));
          if (setup.trackResponses && e.data !== undefined) responded.push(...responseIds(e.data));
        } else {
          // Without cursors an upstream id is removed; an empty one passes, it resets the client's last id (E1).
          assert.equal(o.id, e.id === '' ? '' : undefined, 'no upstream id reaches the client');
        }
      });
      assert.deepStrictEqual(result.upstreamIds, ids, 'the records hold the upstream ids, in order');
      assert.equal(result.fromSeq, setup.head + 1);
      assert.equal(result.head, seq);
      assert.deepStrictEqual(result.payloads, setup.journal && setup.cursors ? payloads : [], 'journaled: each event without its id line');
      assert.deepStrictEqual(result.responded, responded);
    },
    {
      numRuns: 150,
      examples: [[{ cursors: false, journal: false, trackResponses: false, head: 0, maxEventBytes: 1 << 20 }, Buffer.from('id:\x0e\n\n'), []]],
    },
  ),
  property(
    'the SDK client parser sees the replica’s events in what the client gets, ids aside',
    fc.tuple(setupArb, validArb, cutsArb),
    ([setup, bytes, cuts]) => {
      const withoutIds = (list: ReturnType<typeof oracle>) => list.map(({ event, data }) => ({ event, data }));
      const result = rewrite(setup, splitAt(bytes, cuts));
      assert.deepStrictEqual(withoutIds(oracle(result.out)), withoutIds(oracle(bytes)));
    },
    { numRuns: 200 },
  ),
  property(
    'malformed input never throws, splits make no difference, nothing is sent in part, and every id that leaves is a cursor or empty',
    fc.tuple(smallLimitArb, malformedArb, cutsArb),
    ([setup, bytes, cuts]) => {
      sameAsOneChunk([setup, bytes, cuts]);
      const result = rewrite(setup, splitAt(bytes, cuts));
      assert.ok(result.end === undefined || result.end === 'event_too_large', `end: ${result.end}`);
      for (const e of events(result.out)) if (e.id !== undefined && e.id !== '') seqOf(e.id);
      assert.deepStrictEqual(parse([result.out]).filter((i) => i.kind === 'truncated' || i.kind === 'error'), [], 'nothing is sent in part');
    },
    { numRuns: 150 },
  ),
];
