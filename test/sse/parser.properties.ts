/**
 * Properties of the SSE parser (src/sse/parser.ts): a random stream written with every liberty the
 * spec allows parses to the items it was built from however it is cut into chunks, and to the
 * events the MCP SDK client's parser (eventsource-parser) sees; malformed bytes never throw.
 */
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { SseParser, type SseItem } from '../../src/sse/parser.js';
import { serializeEvent } from '../../src/sse/serializer.js';
import { property, type NamedProperty } from '../helpers/property.js';
import { asDispatched, canonicalStreamArb, malformedArb, oracle, parse, serializeItems, splitAt, streamArb, withoutSize } from './streams.js';

const cutsArb = fc.array(fc.nat(), { maxLength: 12 });
const anyValidArb = fc.oneof(streamArb, canonicalStreamArb);

/** Items of `chunks`, pushed one by one: anything the parser throws fails the property. */
function items(chunks: readonly Uint8Array[], maxEventBytes?: number): SseItem[] {
  const out: SseItem[] = [];
  const parser = new SseParser((item) => out.push(item), maxEventBytes === undefined ? {} : { maxEventBytes });
  for (const c of chunks) parser.push(c);
  parser.end();
  return out;
}

export const parserProperties: readonly NamedProperty[] = [
  property(
    'a random stream parses to its items, however it is split in two, and byte by byte',
    streamArb,
    ({ bytes, expected }) => {
      const whole = parse([bytes]);
      assert.deepStrictEqual(withoutSize(whole), expected);
      for (let i = 0; i <= bytes.length; i++) {
        assert.deepStrictEqual(parse([bytes.subarray(0, i), bytes.subarray(i)]), whole, `split at ${i}`);
      }
      assert.deepStrictEqual(parse([...bytes].map((b) => Uint8Array.of(b))), whole, 'byte by byte');
    },
    { numRuns: 40 },
  ),
  property(
    'a random stream parses to the same items, however it is split in many',
    fc.tuple(anyValidArb, cutsArb),
    ([{ bytes, expected }, cuts]) => {
      const split = parse(splitAt(bytes, cuts));
      assert.deepStrictEqual(withoutSize(split), expected);
      assert.deepStrictEqual(split, parse([bytes]));
    },
    { numRuns: 300 },
  ),
  property(
    'serialize(parse(x)) is a fixed point',
    streamArb,
    ({ bytes }) => {
      const parsed = parse([bytes]);
      const canonical = serializeItems(parsed);
      const reparsed = parse([canonical]);
      assert.deepStrictEqual(withoutSize(reparsed), withoutSize(parsed));
      assert.ok(serializeItems(reparsed).equals(canonical));
      for (const item of reparsed) {
        if (item.kind === 'event') assert.equal(item.size, serializeEvent(item).length, 'canonical size is the byte length');
      }
    },
    { numRuns: 200 },
  ),
  property(
    'the SDK client parser sees the same events in our re-serialized bytes',
    streamArb,
    ({ bytes }) => {
      assert.deepStrictEqual(oracle(serializeItems(parse([bytes]))), oracle(bytes));
    },
    { numRuns: 200 },
  ),
  property(
    'our events, whole or split, are the events eventsource-parser dispatches',
    fc.tuple(anyValidArb, cutsArb),
    ([{ bytes }, cuts]) => {
      assert.deepStrictEqual(asDispatched(items(splitAt(bytes, cuts))), oracle(bytes));
    },
    { numRuns: 300 },
  ),
  property(
    'malformed bytes never throw, parse to the same items however they are split, and to eventsource-parser’s events',
    fc.tuple(malformedArb, cutsArb),
    ([bytes, cuts]) => {
      const whole = items([bytes]);
      assert.deepStrictEqual(items(splitAt(bytes, cuts)), whole);
      assert.deepStrictEqual(asDispatched(whole), oracle(bytes));
    },
    { numRuns: 300 },
  ),
  property(
    'under maxEventBytes, malformed bytes give the same items however they are split, and at most one error, last',
    fc.tuple(malformedArb, cutsArb, fc.integer({ min: 1, max: 400 })),
    ([bytes, cuts, max]) => {
      const whole = items([bytes], max);
      assert.deepStrictEqual(items(splitAt(bytes, cuts), max), whole);
      const errors = whole.filter((i) => i.kind === 'error');
      assert.ok(errors.length <= 1);
      if (errors.length === 1) assert.equal(whole[whole.length - 1]!.kind, 'error', 'nothing after the error');
      for (const item of whole) if (item.kind === 'event') assert.ok(item.size <= max, 'no event over the limit');
    },
    { numRuns: 300 },
  ),
];
