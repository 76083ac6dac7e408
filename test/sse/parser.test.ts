import t from 'tap';
import { SseParser, type SseItem } from '../../src/sse/parser.js';
import { checkProperties } from '../helpers/property.js';
import { parserProperties } from './parser.properties.js';
import { enc, ev, parse, withoutSize } from './streams.js';

t.test('fields of one LF block', async (t) => {
  const s = 'id: 1\nevent: message\ndata: hello\n\n';
  t.strictSame(parse([s]), [ev({ id: '1', event: 'message', data: 'hello' }, s.length)]);
});

t.test('the MCP SDK priming event: id, retry and an empty data line', async (t) => {
  const s = 'id: p-1\nretry: 1000\ndata: \n\n';
  t.strictSame(parse([s]), [ev({ id: 'p-1', retry: 1000, data: '' }, s.length)]);
});

t.test('CR, LF and CRLF each end a line, mixed in one stream', async (t) => {
  const expected = [ev({ event: 'e', data: 'a\nb' }, 0), ev({ id: '7' }, 0)];
  for (const s of [
    'event: e\ndata: a\ndata: b\n\nid: 7\n\n',
    'event: e\rdata: a\rdata: b\r\rid: 7\r\r',
    'event: e\r\ndata: a\r\ndata: b\r\n\r\nid: 7\r\n\r\n',
    'event: e\rdata: a\r\ndata: b\n\r\nid: 7\r\r\n',
  ]) {
    t.strictSame(withoutSize(parse([s])), expected, JSON.stringify(s));
  }
});

t.test('a CRLF split across chunks is one line ending, not two', async (t) => {
  // Were the LF taken as a blank line, "a" would be dispatched alone.
  const items = parse(['data: a\r', '\ndata: b\r\n\r\n']);
  t.strictSame(items, [ev({ data: 'a\nb' }, 19)]);
  t.strictSame(parse(['data: a\r\ndata: b\r\n\r\n']), items, 'same size unsplit');
  t.strictSame(parse(['data: a\r\n\r', '\ndata: b\n\n']), [ev({ data: 'a' }, 10), ev({ data: 'b' }, 9)]);
});

t.test('an event ending in CR is dispatched at once, without waiting for a possible LF', async (t) => {
  const items: SseItem[] = [];
  const parser = new SseParser((i) => items.push(i));
  parser.push(enc('data: a\r\r'));
  t.strictSame(items, [ev({ data: 'a' }, 9)]);
  parser.push(enc('\ndata: b\n\n'));
  parser.end();
  t.strictSame(items, [ev({ data: 'a' }, 9), ev({ data: 'b' }, 9)], 'the trailing LF is not a line');
});

t.test('one leading BOM is skipped, even split across chunks', async (t) => {
  const bom = [0xef, 0xbb, 0xbf];
  const body = [...enc('data: x\n\n')];
  t.strictSame(withoutSize(parse([Uint8Array.from([...bom, ...body])])), [ev({ data: 'x' }, 0)]);
  t.strictSame(
    withoutSize(parse([Uint8Array.from([0xef]), Uint8Array.from([0xbb]), Uint8Array.from([0xbf, ...body])])),
    [ev({ data: 'x' }, 0)],
  );
  t.strictSame(parse([Uint8Array.from([...bom, ...bom, ...body])]), [], 'a second BOM is part of the field name');
  t.strictSame(
    withoutSize(parse([Uint8Array.from([...body, ...bom, ...body])])),
    [ev({ data: 'x' }, 0)],
    'a BOM later in the stream is not skipped',
  );
  t.strictSame(parse([Uint8Array.from([0xef, 0xbb])]), [{ kind: 'truncated', bytes: 2 }], 'a BOM prefix alone is data');
  t.strictSame(
    withoutSize(parse([Uint8Array.from([0xef]), enc('\n\ndata: y\n\n')])),
    [ev({ data: 'y' }, 0)],
    'a BOM prefix followed by other bytes is data',
  );
});

t.test('a multi-byte UTF-8 character split across chunks decodes whole', async (t) => {
  const buf = enc('data: 😀é€\n\n');
  const splits = Array.from({ length: buf.length + 1 }, (_, i) => parse([buf.subarray(0, i), buf.subarray(i)]));
  t.strictSame(splits, splits.map(() => [ev({ data: '😀é€' }, buf.length)]), 'split at every byte');
});

t.test('comments', async (t) => {
  t.test('pass through at once, before the block ends', async (t) => {
    const items: SseItem[] = [];
    const parser = new SseParser((i) => items.push(i));
    parser.push(enc('data: a\n: ping\n'));
    t.strictSame(items, [{ kind: 'comment', text: ' ping' }]);
    parser.push(enc(':\ndata: b\n\n'));
    t.strictSame(items, [
      { kind: 'comment', text: ' ping' },
      { kind: 'comment', text: '' },
      ev({ data: 'a\nb' }, 26),
    ]);
  });
  t.test('a block of only comments yields only its comments', async (t) => {
    t.strictSame(parse([':a\n:b\n\n']), [
      { kind: 'comment', text: 'a' },
      { kind: 'comment', text: 'b' },
    ]);
  });
  t.test('comments before a block are not part of its size', async (t) => {
    t.strictSame(parse([':c\ndata: a\n\n']), [{ kind: 'comment', text: 'c' }, ev({ data: 'a' }, 9)]);
  });
});

t.test('data', async (t) => {
  t.strictSame(withoutSize(parse(['data: a\ndata:\ndata: b\n\n'])), [ev({ data: 'a\n\nb' }, 0)], 'lines joined with LF');
  t.strictSame(withoutSize(parse(['data:x\n\n'])), [ev({ data: 'x' }, 0)], 'no space');
  t.strictSame(withoutSize(parse(['data:  x \n\n'])), [ev({ data: ' x ' }, 0)], 'only one space removed');
  t.strictSame(withoutSize(parse(['data\n\n'])), [ev({ data: '' }, 0)], 'no colon: empty value');
  t.strictSame(withoutSize(parse(['data: a:b\n\n'])), [ev({ data: 'a:b' }, 0)], 'split at the first colon');
});

t.test('event: the last one wins, and an empty one is kept', async (t) => {
  t.strictSame(withoutSize(parse(['event: a\nevent: b\ndata: x\n\n'])), [ev({ event: 'b', data: 'x' }, 0)]);
  t.strictSame(withoutSize(parse(['event: a\nevent:\ndata: x\n\n'])), [ev({ event: '', data: 'x' }, 0)]);
});

t.test('retry: only all ASCII digits', async (t) => {
  t.strictSame(withoutSize(parse(['retry: 3000\n\n'])), [ev({ retry: 3000 }, 0)]);
  t.strictSame(withoutSize(parse(['retry:0\n\n'])), [ev({ retry: 0 }, 0)]);
  t.strictSame(withoutSize(parse(['retry: 5\nretry: 6\n\n'])), [ev({ retry: 6 }, 0)], 'last wins');
  for (const bad of ['30a', '', '-1', '1.5', ' 1', '١٢', '9007199254740993']) {
    t.strictSame(withoutSize(parse([`retry: ${bad}\ndata: x\n\n`])), [ev({ data: 'x' }, 0)], JSON.stringify(bad));
  }
  t.strictSame(withoutSize(parse(['retry\n\n'])), [], 'no colon: empty, so ignored');
});

t.test('id', async (t) => {
  t.strictSame(withoutSize(parse(['id: 1\nid: a\0b\ndata: x\n\n'])), [ev({ id: '1', data: 'x' }, 0)], 'NUL ignored');
  t.strictSame(parse(['id: a\0b\n\n']), [], 'a block whose only field is ignored yields nothing');
  t.strictSame(withoutSize(parse(['id:\ndata: x\n\n'])), [ev({ id: '', data: 'x' }, 0)], 'empty id is an id');
  t.strictSame(withoutSize(parse(['id\n\n'])), [ev({ id: '' }, 0)], 'no colon: empty id');
  const [item] = parse(['data: x\n\n']);
  t.ok(item?.kind === 'event' && item.id === undefined && 'id' in item, 'no id field: undefined, not empty');
});

t.test('a data-less block still carries its id or retry', async (t) => {
  t.strictSame(parse(['id: 5\n\n']), [ev({ id: '5' }, 7)]);
  t.strictSame(parse(['id: 5\nretry: 10\n\n']), [ev({ id: '5', retry: 10 }, 17)]);
});

t.test('unknown fields are ignored', async (t) => {
  t.strictSame(parse(['foo: bar\nData: x\n data: y\ndata : z\nids: 1\nfoo\n\n']), []);
  t.strictSame(parse(['foo: bar\ndata: x\n\n']), [ev({ data: 'x' }, 18)], 'but count in the block size');
});

t.test('maxEventBytes', async (t) => {
  const s = 'id: 1\ndata: hello\n\n';
  t.strictSame(parse([s], { maxEventBytes: s.length }), [ev({ id: '1', data: 'hello' }, s.length)], 'exactly the limit');

  t.test('one byte over: one error, then nothing more', async (t) => {
    const items = parse([s, 'data: later\n\n'], { maxEventBytes: s.length - 1 });
    t.equal(items.length, 1);
    t.match(items[0], { kind: 'error', code: 'SSE_EVENT_TOO_LARGE', limit: s.length - 1 });
  });

  t.test('an endless line fails as soon as it passes the limit, whatever the chunking', async (t) => {
    const items: SseItem[] = [];
    const parser = new SseParser((i) => items.push(i), { maxEventBytes: 100 });
    parser.push(enc('data: '));
    for (let i = 0; i < 94; i++) parser.push(enc('x'));
    t.strictSame(items, [], '100 bytes buffered');
    parser.push(enc('x'));
    t.match(items, [{ kind: 'error', code: 'SSE_EVENT_TOO_LARGE' }]);
    parser.push(enc('\n\n'));
    parser.end();
    t.equal(items.length, 1);
  });

  t.test('a block of many short lines fails too', async (t) => {
    const items = parse(['data: x\n'.repeat(20)], { maxEventBytes: 100 });
    t.match(items, [{ kind: 'error', code: 'SSE_EVENT_TOO_LARGE' }]);
  });

  t.test('a long comment line fails', async (t) => {
    t.match(parse([`:${'x'.repeat(200)}\n`], { maxEventBytes: 100 }), [{ kind: 'error' }]);
  });

  t.test('comments and blank lines between blocks do not add up', async (t) => {
    const items = parse([':keep-alive\n'.repeat(100), '\n'.repeat(200), s], { maxEventBytes: s.length });
    t.equal(items.length, 101);
    t.strictSame(items[100], ev({ id: '1', data: 'hello' }, s.length));
  });
});

t.test('end()', async (t) => {
  t.strictSame(parse(['data: x\n\n']), [ev({ data: 'x' }, 9)], 'a clean end adds nothing');
  t.strictSame(parse(['data: x\n\n: ping\n']), [ev({ data: 'x' }, 9), { kind: 'comment', text: ' ping' }]);
  t.strictSame(parse(['data: x\n']), [{ kind: 'truncated', bytes: 8 }], 'a block without its blank line');
  t.strictSame(parse(['data: x\n\nid: 2\ndata: y']), [ev({ data: 'x' }, 9), { kind: 'truncated', bytes: 13 }]);
  t.strictSame(parse([': pi']), [{ kind: 'truncated', bytes: 4 }], 'an incomplete comment');
  t.strictSame(parse(['data: x\r']), [{ kind: 'truncated', bytes: 8 }], 'a line ended by CR is complete');
});

t.test('input', async (t) => {
  t.test('a Uint8Array view into a larger buffer', async (t) => {
    const whole = enc('garbagedata: x\n\ngarbage');
    const view = new Uint8Array(whole.buffer, whole.byteOffset + 7, 9);
    t.strictSame(parse([view]), [ev({ data: 'x' }, 9)]);
  });
  t.test('a chunk reused by the caller after push does not corrupt a pending line', async (t) => {
    const items: SseItem[] = [];
    const parser = new SseParser((i) => items.push(i));
    const chunk = enc('data: hel');
    parser.push(chunk);
    chunk.fill(0x21);
    parser.push(enc('lo\n\n'));
    t.strictSame(items, [ev({ data: 'hello' }, 13)]);
  });
});


checkProperties(t, parserProperties);
