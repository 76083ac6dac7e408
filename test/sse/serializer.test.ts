import assert from 'node:assert/strict';
import t from 'tap';
import fc from 'fast-check';
import { SseParser, type SseItem } from '../../src/sse/parser.js';
import { SseSerializeError, serializeComment, serializeEvent, type SseFieldName } from '../../src/sse/serializer.js';

function parse(buf: Buffer): SseItem[] {
  const items: SseItem[] = [];
  const parser = new SseParser((item) => items.push(item));
  parser.push(buf);
  parser.end();
  return items;
}

const str = (buf: Buffer): string => buf.toString('utf8');

t.test('canonical form: event, id, retry, data, blank line, all LF', async (t) => {
  t.equal(
    str(serializeEvent({ data: '{"a":1}', retry: 500, id: '1', event: 'message' })),
    'event: message\nid: 1\nretry: 500\ndata: {"a":1}\n\n',
  );
  t.equal(str(serializeEvent({ data: 'x' })), 'data: x\n\n', 'absent fields are not written');
});

t.test('data: one line per LF-separated line', async (t) => {
  t.equal(str(serializeEvent({ data: 'a\nb' })), 'data: a\ndata: b\n\n');
  t.equal(str(serializeEvent({ data: 'a\n' })), 'data: a\ndata: \n\n', 'a trailing LF is an empty last line');
  t.equal(str(serializeEvent({ data: '' })), 'data: \n\n', 'empty data is one empty line');
});

t.test('a value that starts with a space keeps it', async (t) => {
  t.equal(str(serializeEvent({ id: ' 1', data: ' x' })), 'id:  1\ndata:  x\n\n');
  t.strictSame(parse(serializeEvent({ id: ' 1', data: ' x' })), [
    { kind: 'event', id: ' 1', event: undefined, data: ' x', retry: undefined, size: 17 },
  ]);
});

t.test('an empty id is written, so that it still resets the client last event ID', async (t) => {
  t.equal(str(serializeEvent({ id: '', data: 'x' })), 'id: \ndata: x\n\n');
});

t.test('data-less events and the empty event', async (t) => {
  t.equal(str(serializeEvent({ id: '9' })), 'id: 9\n\n');
  t.equal(str(serializeEvent({ retry: 0 })), 'retry: 0\n\n');
  t.equal(str(serializeEvent({})), '\n');
});

t.test('comments', async (t) => {
  t.equal(str(serializeComment(' ping')), ': ping\n');
  t.equal(str(serializeComment('')), ':\n');
  t.strictSame(parse(serializeComment(' ping')), [{ kind: 'comment', text: ' ping' }]);
});

t.test('values SSE cannot carry are rejected with a code', async (t) => {
  const rejects = (f: () => unknown, field: SseFieldName, name: string): void => {
    t.throws(f, { name: 'SseSerializeError', code: 'SSE_FIELD_INVALID', field }, name);
  };
  for (const id of ['a\rb', 'a\nb', 'a\0b']) rejects(() => serializeEvent({ id }), 'id', JSON.stringify(id));
  for (const event of ['a\rb', 'a\nb']) rejects(() => serializeEvent({ event }), 'event', JSON.stringify(event));
  rejects(() => serializeEvent({ data: 'a\r\nb' }), 'data', 'data with CR');
  for (const retry of [-1, 1.5, NaN, Infinity, 2 ** 53]) rejects(() => serializeEvent({ retry }), 'retry', String(retry));
  for (const text of ['a\nb', 'a\rb']) rejects(() => serializeComment(text), 'comment', JSON.stringify(text));
  t.ok(new SseSerializeError('id', 'x') instanceof Error);
  t.equal(str(serializeEvent({ event: 'a\0b', data: 'x' })), 'event: a\0b\ndata: x\n\n', 'NUL is fine outside id');
});

const lineChar = fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }).filter((c) => c !== '\r' && c !== '\n');
const line = fc.string({ unit: lineChar, maxLength: 12 });

t.test('property: parse(serializeEvent(e)) is e, with the serialized length as its size', async (t) => {
  const fieldsArb = fc
    .record({
      id: fc.option(line.filter((s) => !s.includes('\0')), { nil: undefined }),
      event: fc.option(line, { nil: undefined }),
      data: fc.option(fc.array(line, { minLength: 1, maxLength: 4 }).map((l) => l.join('\n')), { nil: undefined }),
      retry: fc.option(fc.maxSafeNat(), { nil: undefined }),
    })
    .filter((e) => Object.values(e).some((v) => v !== undefined));
  fc.assert(
    fc.property(fieldsArb, (e) => {
      const buf = serializeEvent(e);
      assert.deepStrictEqual(parse(buf), [{ kind: 'event', ...e, size: buf.length }]);
    }),
    { numRuns: 300 },
  );
  fc.assert(
    fc.property(line, (text) => {
      assert.deepStrictEqual(parse(serializeComment(text)), [{ kind: 'comment', text }]);
    }),
    { numRuns: 100 },
  );
  t.pass('400 runs');
});
