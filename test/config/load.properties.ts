/**
 * Properties of the configuration loader (src/config/load.ts): no text crashes it, it loads a
 * frozen configuration or throws a ConfigError, and every problem names its line, and (when the
 * file parses) the key, on the line where that key, or its nearest part that the file has, is
 * written.
 *
 * The texts are drawn from the schema itself: its keys with values of the right type, the wrong
 * one, or out of range, unknown keys among them, written as YAML in block or flow style, then cut
 * about: lines dropped, doubled, indented, or YAML constructs put in (anchors, aliases, tags,
 * variables, stray brackets).
 */
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { isMap, isScalar, isSeq, LineCounter, parseDocument, stringify, type Document, type Node } from 'yaml';
import { ConfigError, parseConfig } from '../../src/config/load.js';
import { ConfigSchema } from '../../src/config/schema.js';
import { property, type NamedProperty } from '../helpers/property.js';

const FILE = 'gw.yaml';

interface Schema {
  type?: string;
  properties?: Record<string, Schema>;
  items?: Schema;
  anyOf?: Schema[];
  enum?: unknown[];
  const?: unknown;
  minimum?: number;
  maximum?: number;
  pattern?: string;
}

/** Keys as a configuration may misspell them. */
const keyArb = fc.oneof(fc.constantFrom('unknownKey', 'Path', 'port ', '__proto__', 'constructor', ' ', '', 'a.b', 'a[0]', '"'), fc.stringMatching(/^[A-Za-z_ -]{1,6}$/));
const scalarArb = fc.oneof(
  fc.constantFrom(null, '', -1, 0, 1.5, 'x', true, 'http://', 'redis://', '${UNSET}', '${PORT}', '$${X}', '~', 'null', 'yes', '0o17'),
  fc.string({ maxLength: 8 }),
  fc.integer(),
  fc.double(),
);
const junkArb: fc.Arbitrary<unknown> = fc.oneof({ weight: 3, arbitrary: scalarArb }, fc.array(scalarArb, { maxLength: 2 }), fc.dictionary(keyArb, scalarArb, { maxKeys: 2 }));

/** Values for `schema`: mostly of its form, now and then anything. */
function valueArb(schema: Schema, depth: number): fc.Arbitrary<unknown> {
  return fc.oneof({ weight: 5, arbitrary: formArb(schema, depth) }, junkArb);
}

function formArb(schema: Schema, depth: number): fc.Arbitrary<unknown> {
  if (schema.anyOf) return fc.oneof(...schema.anyOf.map((s) => formArb(s, depth)));
  if (schema.const !== undefined) return fc.constant(schema.const);
  if (schema.enum) return fc.constantFrom(...schema.enum);
  switch (schema.type) {
    case 'object': {
      if (!schema.properties || depth > 3) return fc.dictionary(keyArb, junkArb, { maxKeys: 2 });
      const entries = Object.entries(schema.properties).map(([k, s]) => [k, valueArb(s, depth + 1)] as const);
      return fc
        .tuple(fc.record(Object.fromEntries(entries), { requiredKeys: [] }), fc.option(fc.tuple(keyArb, junkArb), { freq: 6 }))
        .map(([known, extra]) => (extra ? { ...known, [extra[0]]: extra[1] } : known));
    }
    case 'array':
      return fc.array(schema.items ? valueArb(schema.items, depth + 1) : junkArb, { maxLength: 3 });
    case 'integer':
    case 'number': {
      const min = schema.minimum ?? -5;
      const max = schema.maximum ?? min + 100_000;
      return fc.oneof(fc.integer({ min, max }), fc.constantFrom(min - 1, max + 1, min, max, 0.5));
    }
    case 'string':
      return schema.pattern ? fc.oneof(fc.stringMatching(new RegExp(schema.pattern)), fc.string({ maxLength: 8 })) : fc.string({ maxLength: 12 });
    case 'boolean':
      return fc.boolean();
    default:
      return junkArb;
  }
}

const REPLICAS = [{ id: 'r1', url: 'http://127.0.0.1:3001/mcp' }];
const configArb = fc
  .tuple(formArb(ConfigSchema as Schema, 0), fc.boolean())
  .map(([value, withReplica]) => (withReplica && value !== null && typeof value === 'object' && !('replicas' in value) ? { ...value, replicas: REPLICAS } : value));

type Edit =
  | { op: 'drop'; at: number }
  | { op: 'double'; at: number }
  | { op: 'indent'; at: number; by: string }
  | { op: 'insert'; at: number; line: string };

const editArb: fc.Arbitrary<Edit> = fc.oneof(
  fc.record({ op: fc.constant('drop' as const), at: fc.nat() }),
  fc.record({ op: fc.constant('double' as const), at: fc.nat() }),
  fc.record({ op: fc.constant('indent' as const), at: fc.nat(), by: fc.constantFrom(' ', '  ', '\t', '- ') }),
  fc.record({
    op: fc.constant('insert' as const),
    at: fc.nat(),
    line: fc.oneof(
      fc.constantFrom('listen: &a { port: 1 }', 'admin: *a', 'port: *nope', '<<: *a', 'path: !!binary aGk=', 'path: !custom x', 'x: [', '- ', ':', '? a', '%YAML 1.2', '---', '...', '# note', 'path: "unterminated', 'path: ${PATH_VAR}', 'path: ${UNSET}x', '  port: 0x1F', 'workers: 1e3', 'a: b: c', '\uFEFF', '\u0000'),
      fc.string({ maxLength: 16 }),
    ),
  }),
);

const textArb = fc.tuple(configArb, fc.constantFrom('block', 'flow'), fc.array(editArb, { maxLength: 3 })).map(([value, style, edits]) => {
  const lines = stringify(value, style === 'flow' ? { collectionStyle: 'flow', lineWidth: 60 } : {}).split('\n');
  for (const e of edits) {
    const at = e.at % (lines.length + 1);
    if (e.op === 'drop') lines.splice(at, 1);
    else if (e.op === 'double' && at < lines.length) lines.splice(at, 0, lines[at]!);
    else if (e.op === 'indent' && at < lines.length) lines[at] = e.by + lines[at]!;
    else if (e.op === 'insert') lines.splice(at, 0, e.line);
  }
  return lines.join('\n');
});

const envArb = fc.record({ PATH_VAR: fc.constantFrom('/other', '', 'x'), PORT: fc.constantFrom('8181', 'abc', '') }, { requiredKeys: [] });

/** A key path, then what the loader says of it (a key may hold ": " itself). */
const MESSAGE = /^(\(root\)|.+?): (?:is |expected |cannot |needs |duplicates |must |more than |store\.|\$\{)/s;

/** `gw.yaml:<line>: <rest>`: the line, 1-based, and the rest; fails when there is no line. */
function lineOf(problem: string): { line: number; rest: string } {
  const m = /^gw\.yaml:(\d+): ([^]*)$/.exec(problem);
  assert.ok(m, `names a line: ${JSON.stringify(problem)}`);
  return { line: Number(m[1]), rest: m[2]! };
}

/** The key path that the loader wrote: `a.b[0].c`, a key that is not a plain name quoted (`a["port "]`). */
function pathFrom(text: string): (string | number)[] {
  return [...text.matchAll(/\[("(?:[^"\\]|\\.)*")\]|\[(\d+)\]|([^.[\]]+)/g)].map((m) => (m[1] !== undefined ? (JSON.parse(m[1]) as string) : m[2] !== undefined ? Number(m[2]) : m[3]!));
}

interface Parsed {
  doc: Document;
  counter: LineCounter;
}

function parsed(text: string): Parsed {
  const counter = new LineCounter();
  return { doc: parseDocument(text, { lineCounter: counter, uniqueKeys: true }), counter };
}

/** The lines where the key at `path`, or failing that its nearest part that the document has, is written. */
function linesOfPath({ doc, counter }: Parsed, path: readonly (string | number)[]): Set<number> {
  const lines = new Set<number>();
  const mark = (node: Node | undefined | null): void => {
    const offset = node?.range?.[0];
    if (offset !== undefined) lines.add(counter.linePos(offset).line);
  };
  let node: unknown = doc.contents;
  for (const key of path) {
    if (isMap(node)) {
      const pair = node.items.find((p) => isScalar(p.key) && (p.key.value === null ? '' : String(p.key.value)) === String(key));
      if (!pair) break;
      mark(pair.key as Node);
      node = pair.value;
      mark(node as Node);
    } else if (isSeq(node) && typeof key === 'number' && key < node.items.length) {
      node = node.items[key];
      mark(node as Node);
    } else break;
  }
  if (lines.size === 0) {
    mark(doc.contents as Node | null);
    lines.add(1);
  }
  return lines;
}

export const loadProperties: readonly NamedProperty[] = [
  property(
    'no text crashes the loader; every problem names its line, and its key where that key is written',
    fc.tuple(textArb, envArb),
    ([text, env]) => {
      let error: unknown;
      try {
        const config = parseConfig(text, FILE, env);
        assert.ok(Object.isFrozen(config), 'frozen');
        return;
      } catch (err) {
        error = err;
      }
      assert.ok(error instanceof ConfigError, `a ConfigError, not ${String(error)}`);
      assert.ok(error.code === 'GW_CONFIG_INVALID' || error.code === 'GW_CONFIG_UNREADABLE');
      assert.ok(error.problems.length > 0);
      const total = text.split(/\r\n|\r|\n/).length;
      const doc = parsed(text);
      for (const problem of error.problems) {
        const { line, rest } = lineOf(problem);
        assert.ok(line >= 1 && line <= total, `line ${line} of ${total}`);
        if (error.code === 'GW_CONFIG_UNREADABLE') continue;
        const m = MESSAGE.exec(rest);
        assert.ok(m, `names a key: ${JSON.stringify(problem)}`);
        if (m[1] === '(root)') continue;
        const lines = linesOfPath(doc, pathFrom(m[1]!));
        // admin.port set by no one clashes with the listen.port that is written (the default of one against the other).
        if (m[1] === 'admin.port') for (const l of linesOfPath(doc, ['listen', 'port'])) lines.add(l);
        assert.ok(lines.has(line), `${JSON.stringify(problem)}: the key is written on line(s) ${[...lines].join(', ')}`);
      }
    },
    {
      numRuns: 60,
      examples: [
        // An alias to no anchor: yaml throws only when it converts the document.
        ['port: *nope\nbalancer: {}\nupstream:\n  retryAfterSeconds: -1\nsecurity: 0\n', {}],
        // An empty file: the missing key is at line 1.
        ['', {}],
        // A null key: named as "", at its own line.
        ['listen: {}\n:\n', {}],
      ],
    },
  ),
];
