/**
 * The README is the front door and docs/ the book, each fact in one page and the others linking to
 * it: so every relative link of the README, of docs/ and of deploy/README.md must resolve, to a
 * file or folder of the repository and, with an anchor, to a heading (or `<a id>`) of that page,
 * named as GitHub names it.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { anchorsOf, brokenLinks, linksOf, slug } from '../helpers/markdown.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

const PAGES = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
  'deploy/README.md',
];

t.test('every relative link of the README and docs/ resolves, anchors included', async (t) => {
  const { checked, broken } = brokenLinks(ROOT, PAGES);
  t.ok(PAGES.length > 5, `pages read: ${PAGES.join(', ')}`);
  t.ok(checked > 100, `relative links checked: ${checked}`);
  t.strictSame(broken, [], 'no link is broken');
});

t.test("anchors are GitHub's slugs of the headings", async (t) => {
  t.equal(slug('Browsers: origins and CORS'), 'browsers-origins-and-cors');
  t.equal(slug('Why a client got `resumed: false`'), 'why-a-client-got-resumed-false');
  t.equal(slug('How "gone" reaches every instance'), 'how-gone-reaches-every-instance');
  t.equal(slug('Legacy HTTP+SSE (2024-11-05)'), 'legacy-httpsse-2024-11-05');
  t.equal(slug("Journal frames from the replica's bytes"), 'journal-frames-from-the-replicas-bytes');
  t.equal(slug('What 0.5 × nginx would take on this machine'), 'what-05--nginx-would-take-on-this-machine', 'a removed character leaves its spaces');
  t.equal(slug('The +9 % CPU per request through Redis'), 'the-9--cpu-per-request-through-redis');
  t.equal(slug('`POST` with `Last-Event-ID`'), 'post-with-last-event-id');
  t.equal(slug('See [the table](other.md#x) and <b>bold</b>'), 'see-the-table-and-bold', 'a link keeps its text, a tag goes');
  t.equal(slug('µs per event_total'), 'µs-per-event_total', 'letters of any script and _ stay');

  const page = ['# Page', '## Notes', '### Notes', '## Notes', '## Notes-1', '<a id="kept"></a>', '```', '## Not a heading', '```', '## Closed ##'].join('\n');
  t.strictSame([...anchorsOf(page)].sort(), ['closed', 'kept', 'notes', 'notes-1', 'notes-1-1', 'notes-2', 'page'].sort(), 'repeats suffixed -1, -2, as GitHub does');
});

t.test('links are read outside code, in every form', async (t) => {
  const page = [
    'A [link](a.md), an ![image](img/b.png "title") and [`code text`](c.md#x).',
    'Not links: `[inline](code.md)` and',
    '```sh',
    '[fenced](code.md)',
    '```',
    '[ref]: d.md#y',
    '<a href="e.md">e</a> and [absolute](https://example.com/f.md) and [here](#z)',
  ].join('\n');
  t.strictSame(
    linksOf(page).map((link) => `${link.line} ${link.target}`),
    ['1 a.md', '1 img/b.png', '1 c.md#x', '6 d.md#y', '7 https://example.com/f.md', '7 #z', '7 e.md'],
  );
});

t.test('a missing file, a missing anchor and an anchor into another kind of file are each reported', async (t) => {
  const dir = t.testdir({
    'README.md': [
      '# Top',
      '[ok](docs/a.md#section-one) [ok too](docs/) [self](#top) [from the root](/docs/a.md)',
      '[gone](docs/missing.md) [no such anchor](docs/a.md#section-two)',
      '[not markdown](data.json#x) [web](https://example.com/nowhere.md)',
    ].join('\n'),
    docs: { 'a.md': '# A\n\n## Section one\n\n[back](../README.md#top) [wrong](../README.md#bottom)\n' },
    'data.json': '{}',
  });
  const { checked, broken } = brokenLinks(dir, ['README.md', 'docs/a.md']);
  t.equal(checked, 9, 'every relative link, and no absolute one');
  t.strictSame(broken, [
    'README.md:3: docs/missing.md: no docs/missing.md',
    'README.md:3: docs/a.md#section-two: docs/a.md has no anchor #section-two',
    'README.md:4: data.json#x: an anchor into a file that is not Markdown',
    'docs/a.md:5: ../README.md#bottom: README.md has no anchor #bottom',
  ]);
});
