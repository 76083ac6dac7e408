/** J1: a batch's payloads framed as the journal keeps them (src/store/journal-frames.ts). */
import t from 'tap';
import { JournalFrames, JournalFramesBuilder } from '../../src/store/journal-frames.js';

const frame = (bytes: Buffer): Buffer => {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(bytes.length);
  return Buffer.concat([length, bytes]);
};

t.test('texts are framed each by its UTF-8 length, and read back as they were', async (t) => {
  const texts = ['data: a\n\n', 'event: message\ndata: zwei ü\n\n', ''];
  const frames = JournalFrames.of(texts);
  t.equal(frames.length, 3);
  t.same(frames.frames, Buffer.concat(texts.map((x) => frame(Buffer.from(x)))), 'length (4 bytes, big-endian), then the bytes');
  t.equal(frames.payloadBytes, Buffer.byteLength(texts.join('')), 'the payloads without their frames');
  t.same(frames.texts(), texts);
});

t.test('each text is encoded on its own: lone surrogates at a boundary do not pair', async (t) => {
  const frames = JournalFrames.of(['a\ud83d', '\ude00b']);
  t.same(frames.frames, Buffer.concat([frame(Buffer.from('a\ud83d')), frame(Buffer.from('\ude00b'))]));
  t.not(frames.frames.toString('hex'), JournalFrames.of(['a\ud83d\ude00b']).frames.toString('hex'), 'joined they would be one character');
});

t.test('ranges copied from a chunk, an id line cut out of the middle, beside texts, in order', async (t) => {
  const chunk = Buffer.from('event: message\nid: 7\ndata: ü\n\nid: 8\ndata: two\n\n');
  const builder = new JournalFramesBuilder();
  const idStart = chunk.indexOf('id: 7');
  const idEnd = chunk.indexOf('data: ü');
  builder.copied(0, idStart, idEnd, chunk.indexOf('id: 8'), false);
  builder.text('data: parsed\n\n');
  const second = chunk.indexOf('data: two');
  builder.copied(chunk.indexOf('id: 8'), chunk.indexOf('id: 8'), second, chunk.length, false);
  t.equal(builder.length, 3);
  const frames = builder.build(chunk);
  t.same(frames.texts(), ['event: message\ndata: ü\n\n', 'data: parsed\n\n', 'data: two\n\n']);
  t.same(frames.frames, JournalFrames.of(frames.texts()).frames, 'the same bytes as the texts framed');
});

t.test('batches joined are one batch, in order; nothing built is EMPTY', async (t) => {
  const joined = JournalFrames.join([JournalFrames.of(['a', 'b']), JournalFrames.EMPTY, JournalFrames.of(['c'])]);
  t.equal(joined.length, 3);
  t.same(joined.texts(), ['a', 'b', 'c']);
  t.equal(new JournalFramesBuilder().build(Buffer.alloc(0)), JournalFrames.EMPTY);
  const one = JournalFrames.of(['x']);
  t.equal(JournalFrames.join([one]), one, 'one batch is itself');
});

t.test('payloads known to be ASCII are read as such; one other byte makes the batch UTF-8', async (t) => {
  t.equal(JournalFrames.of(['data: a\n\n', 'data: b\n\n']).ascii, true);
  t.equal(JournalFrames.of(['data: a\n\n', 'data: ü\n\n']).ascii, false, 'a text with a non-ASCII character');
  t.equal(JournalFrames.of(['\ud83d']).ascii, false, 'a lone surrogate');
  const chunk = Buffer.from('data: é\n\ndata: e\n\n');
  const copied = () => {
    const builder = new JournalFramesBuilder();
    builder.copied(0, 0, 0, chunk.indexOf('data: e'), false);
    return builder.build(chunk);
  };
  t.same(copied().texts(), ['data: é\n\n'], 'copied from a region that is not ASCII: decoded as UTF-8');
  t.equal(JournalFrames.join([JournalFrames.of(['a']), JournalFrames.of(['ü'])]).ascii, false, 'joined: ASCII only if each is');
  t.same(JournalFrames.join([JournalFrames.of(['a']), JournalFrames.of(['ü'])]).texts(), ['a', 'ü']);
});
