/**
 * The rewriter benchmark runs, briefly, against this checkout as its own baseline: every case gives
 * a figure, both builds write the same bytes, and those bytes are the flood's events with a cursor
 * each. How fast belongs to `npm run bench:rewriter`, never to a test.
 */
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { CASES, floodChunks, runRewriterBench } from '../../bench/rewriter.js';

// build/test/bench → the checkout's root, whose build/src the baseline loads.
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

t.test('a short run gives every case a figure and a ratio, both builds writing the same bytes', async (t) => {
  const results = await runRewriterBench({ events: 500, chunk: 4096, rounds: 3, baseline: ROOT });
  t.same(results.map(({ journal, sink }) => ({ journal, sink })), CASES, 'one result per case, in order');
  const input = Buffer.concat(floodChunks(500, 4096)).length;
  for (const r of results) {
    const name = `journal ${r.journal ? 'on' : 'off'}, sink ${r.sink}`;
    t.ok(Number.isFinite(r.nsPerEvent) && r.nsPerEvent > 0, `${name}: ${r.nsPerEvent} ns per event`);
    t.ok(Number.isFinite(r.baselineNsPerEvent) && r.baselineNsPerEvent! > 0, `${name}: the baseline's figure`);
    t.equal(r.ratios?.length, 1, `${name}: one paired ratio per measured round`);
    // Every event's short upstream id (id: N) became a longer cursor: more bytes out than in.
    t.ok(r.outBytes > input, `${name}: ${r.outBytes} bytes out for ${input} in`);
  }
});

t.test('the flood is cut into chunks of the size asked, the last one shorter', async (t) => {
  const chunks = floodChunks(100, 1000);
  t.ok(chunks.slice(0, -1).every((c) => c.length === 1000));
  t.ok(chunks[chunks.length - 1]!.length <= 1000);
  const text = Buffer.concat(chunks).toString();
  t.equal(text.match(/^id: \d+$/gm)?.length, 100, 'one id line per event');
  t.match(text, /^id: 100\ndata: .*"seq":100\}\}\}\n\n$/m, 'the last event whole');
});

t.test('fewer than three rounds is refused: the first two only warm up', async (t) => {
  await t.rejects(runRewriterBench({ events: 10, chunk: 4096, rounds: 2 }), /--rounds must be at least 3/);
});
