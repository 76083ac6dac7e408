/**
 * The house of src/: each folder, and each file at its top, is a room; the rooms stand on floors,
 * declared once, top floor first, in docs/development.md ("How the code is laid out"). Every
 * import between rooms points down to a lower floor, types included: a helper that a low room
 * needs lives low, instead of the low room climbing back to fetch it. And no rooms import each
 * other in a circle, whatever the floors say.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import ts from 'typescript';

/** The section of docs/development.md whose first text block declares the floors. */
const FLOORS_HEADING = 'How the code is laid out';

/** An import of one file of src/ by another, both as paths in src/. */
interface Import {
  readonly from: string;
  readonly to: string;
}

/** A file's room: its folder under src/ (`routing/`), or the file itself at the top (`server.ts`). */
function roomOf(file: string): string {
  const slash = file.indexOf('/');
  return slash < 0 ? file : file.slice(0, slash + 1);
}

/** The floors of a page, top first: each line of the section's first text block, its rooms apart by spaces. */
function floorsOf(page: string): string[][] {
  const section = page.split(/^## /m).find((part) => part.startsWith(`${FLOORS_HEADING}\n`));
  const block = section === undefined ? null : /^```text\n([\s\S]*?)^```$/m.exec(section);
  if (block === null) throw new Error(`no floors: the section "${FLOORS_HEADING}" has no \`\`\`text block`);
  return (block[1] as string).split('\n').filter((line) => line.trim() !== '').map((line) => line.trim().split(/\s+/));
}

/** The imports between rooms that do not go to a lower floor, as lines to read (top floor is 1). */
function climbs(imports: readonly Import[], floors: readonly string[][]): string[] {
  const floor = new Map(floors.flatMap((rooms, i) => rooms.map((room) => [room, i + 1] as const)));
  return imports.flatMap(({ from, to }) => {
    const [a, b] = [floor.get(roomOf(from)), floor.get(roomOf(to))];
    if (roomOf(from) === roomOf(to) || a === undefined || b === undefined || b > a) return [];
    return [a === b ? `${from} → ${to}: sideways, both on floor ${a}` : `${from} → ${to}: climbs from floor ${a} to floor ${b}`];
  });
}

/** Each set of rooms that import each other round (a strongly connected component), with the imports that make it. */
function circles(imports: readonly Import[]): string[] {
  const out = new Map<string, Set<string>>();
  for (const { from, to } of imports) {
    if (roomOf(from) === roomOf(to)) continue;
    const targets = out.get(roomOf(from)) ?? new Set<string>();
    out.set(roomOf(from), targets.add(roomOf(to)));
  }
  const reaches = (start: string): Set<string> => {
    const seen = new Set<string>();
    const next = [start];
    for (let room = next.pop(); room !== undefined; room = next.pop()) {
      for (const to of out.get(room) ?? []) {
        if (seen.has(to)) continue;
        seen.add(to);
        next.push(to);
      }
    }
    return seen;
  };
  const reach = new Map([...out.keys()].map((room) => [room, reaches(room)]));
  const found = new Set<string>();
  for (const [room, reached] of reach) {
    const circle = [...reached].filter((other) => reach.get(other)?.has(room)).sort();
    if (circle.length < 2) continue;
    const through = imports.filter(({ from, to }) => roomOf(from) !== roomOf(to) && circle.includes(roomOf(from)) && circle.includes(roomOf(to)));
    found.add(`${circle.join(' ')}: ${through.map(({ from, to }) => `${from} → ${to}`).sort().join('; ')}`);
  }
  return [...found].sort();
}

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const SRC = join(ROOT, 'src');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') ? [relative(SRC, path)] : [];
  });
}

/** Every relative import of src/ (static, dynamic, `import type`, `export … from`), as paths in src/. */
function importsOf(files: readonly string[]): Import[] {
  return files.flatMap((from) => {
    const { importedFiles } = ts.preProcessFile(readFileSync(join(SRC, from), 'utf8'), true, true);
    return importedFiles
      .filter(({ fileName }) => fileName.startsWith('.'))
      .map(({ fileName }) => ({ from, to: join(dirname(from), fileName).replace(/\.js$/, '.ts') }));
  });
}

const files = sources(SRC);
const imports = importsOf(files);
const floors = floorsOf(readFileSync(join(ROOT, 'docs', 'development.md'), 'utf8'));

t.test(`every room of src/ stands on one floor of docs/development.md ("${FLOORS_HEADING}")`, async (t) => {
  const declared = floors.flat();
  const rooms = [...new Set(files.map(roomOf))].sort();
  t.ok(floors.length > 5, `floors read: ${floors.length}`);
  t.strictSame(declared.filter((room, i) => declared.indexOf(room) !== i), [], 'no room on two floors');
  t.strictSame(rooms.filter((room) => !declared.includes(room)), [], 'every room of src/ is on a floor');
  t.strictSame(declared.filter((room) => !rooms.includes(room)), [], 'every room on a floor is in src/');
});

t.test('every import between rooms points down', async (t) => {
  t.ok(imports.length > 300, `imports read: ${imports.length}`);
  t.ok(imports.every(({ to }) => files.includes(to)), 'every import names a file of src/');
  t.strictSame(climbs(imports, floors), [], 'no import climbs back, none goes sideways');
});

t.test('no rooms import each other in a circle', async (t) => {
  t.strictSame(circles(imports), []);
});

t.test('a climb, a sideways import and a circle are each reported', async (t) => {
  const page = ['# Development', `## ${FLOORS_HEADING}`, '', '```text', 'server.ts', 'routing/  clients/', 'errors.ts', '```', '', '```text', 'not.ts', '```'].join('\n');
  const declared = floorsOf(page);
  t.strictSame(declared, [['server.ts'], ['routing/', 'clients/'], ['errors.ts']], 'the first block of the section');
  t.throws(() => floorsOf('# Development\n\n## Elsewhere\n'), /no floors/);
  const picture: Import[] = [
    { from: 'server.ts', to: 'routing/proxy.ts' },
    { from: 'routing/proxy.ts', to: 'routing/forward.ts' },
    { from: 'clients/errors.ts', to: 'routing/answers.ts' },
    { from: 'errors.ts', to: 'server.ts' },
    { from: 'routing/forward.ts', to: 'errors.ts' },
  ];
  t.strictSame(climbs(picture, declared), [
    'clients/errors.ts → routing/answers.ts: sideways, both on floor 2',
    'errors.ts → server.ts: climbs from floor 3 to floor 1',
  ]);
  t.strictSame(circles(picture), ['errors.ts routing/ server.ts: errors.ts → server.ts; routing/forward.ts → errors.ts; server.ts → routing/proxy.ts']);
  t.strictSame(circles(picture.slice(0, 4)), [], 'no circle without the import back, and none inside a room');
});
