import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { parseConfig } from '../../src/config/load.js';
import { configReference, errorCodeReference, replaceSection, sectionOf, SECTIONS } from '../../src/config/reference.js';
import { ERROR_CODES } from '../../src/errors.js';
import { outputOf, spawnProcess, type Output } from '../helpers/processes.js';

const CONFIGURATION = fileURLToPath(new URL('../../../docs/configuration.md', import.meta.url));
const ERRORS = fileURLToPath(new URL('../../../docs/errors.md', import.meta.url));
const SCRIPT = fileURLToPath(new URL('../../../scripts/config-reference.mjs', import.meta.url));
const STALE = 'docs/configuration.md or docs/errors.md is stale: run `npm run docs`';

/** The key column of the reference's rows. */
function keysOf(reference: string): string[] {
  return [...reference.matchAll(/^\| `([^`]+)` \|/gm)].map((m) => m[1] as string);
}

/** Leaf key paths of a loaded configuration (list entries as `key[].leaf`). */
function leafPaths(value: unknown, prefix = ''): string[] {
  if (Array.isArray(value)) {
    const objects = value.filter((v) => v !== null && typeof v === 'object');
    return objects.length > 0 ? [prefix, ...new Set(objects.flatMap((v) => leafPaths(v, `${prefix}[]`)))] : [prefix];
  }
  if (value !== null && typeof value === 'object') {
    return Object.entries(value).flatMap(([k, v]) => leafPaths(v, prefix ? `${prefix}.${k}` : k));
  }
  return [prefix];
}

t.test("docs/configuration.md's reference is the generated one", async (t) => {
  const page = readFileSync(CONFIGURATION, 'utf8');
  t.equal(replaceSection(page, 'config', configReference()), page, STALE);
});

t.test("docs/errors.md's codes are the generated ones, and list every code of ERROR_CODES", async (t) => {
  const page = readFileSync(ERRORS, 'utf8');
  t.equal(replaceSection(page, 'errors', errorCodeReference()), page, STALE);
  const section = sectionOf(page, 'errors');
  for (const [code, { meaning }] of Object.entries(ERROR_CODES)) {
    t.ok(section.includes(`| \`${code}\` | `) && section.includes(` | ${meaning} |`), `${code} is documented`);
  }
  t.match(section, '| `GW_SESSION_NOT_FOUND` | 404 | `-32001` | ', 'an answer gives its status and JSON-RPC code');
  t.match(section, '| `GW_CONFIG_INVALID` | (raised, not an answer) |  | ', 'a raised error has neither');
  const documented = [...section.matchAll(/^\| `(GW_[A-Z_]+)` \|/gm)].map((m) => m[1]);
  t.strictSame(documented, Object.keys(ERROR_CODES), 'and no code that does not exist');
});

t.test('the reference has one row per key of a loaded configuration, and the optional ones', async (t) => {
  const reference = configReference();
  const keys = keysOf(reference);
  const config = parseConfig('replicas:\n  - id: r1\n    url: http://127.0.0.1:3001/mcp\n', 'x.yaml', {});
  const optional = ['health.path', 'health.instanceHeader', 'cursor.secret', 'cursor.previousSecrets', 'security.allowedOrigins', 'store.cluster.nodes', 'store.sentinel.nodes', 'store.sentinel.name', ...['ca', 'cert', 'key', 'servername', 'rejectUnauthorized'].map((key) => `store.tls.${key}`), 'legacySse.path', 'legacySse.messagesPath', 'replicas[].sseUrl', ...['endpoint', 'protocol', 'headers', 'timeoutMs', 'sampleRatio', 'serviceName'].map((key) => `tracing.${key}`)];
  t.strictSame([...keys].sort(), [...leafPaths(config), ...optional].sort());
  t.equal(new Set(keys).size, keys.length, 'no key twice');
});

t.test('a row gives type, limits, default and description', async (t) => {
  const rows = new Map(configReference().split('\n').flatMap((line) => {
    const m = /^\| `([^`]+)` \| (.*) \|$/.exec(line);
    return m ? [[m[1] as string, m[2] as string] as const] : [];
  }));
  t.equal(
    rows.get('store.commandTimeoutMs'),
    'integer, at least 1 | `500` | how long one store operation may take before the request that needs it gets 503',
  );
  t.equal(rows.get('store.type'), '`memory` \\| `redis` | `"memory"` | memory: one gateway process; redis: any number of gateways sharing it');
  t.equal(rows.get('replicas[].id'), 'string, matching `^[A-Za-z0-9._-]{1,64}$` | required | stable name of the replica; sessions are recorded against it');
  t.equal(rows.get('replicas'), 'list of entries below, at least 1 | required | the MCP replicas behind the gateway');
  t.equal(rows.get('listen.port'), 'integer, 0 to 65535 | `8080` | TCP port of the MCP endpoint (0: any free port)');
  t.match(rows.get('cursor.secret'), /^string, at least 32 characters \| unset \| /);
  t.match(rows.get('health.expectStatus'), /^list of integer, 100 to 599 \| `\[\]` \| /);
});

t.test('sections need both markers', async (t) => {
  const { start, end } = SECTIONS.config;
  t.equal(replaceSection(`a\n${start}\nold\n${end}\nb\n`, 'config', 'new'), `a\n${start}\nnew\n${end}\nb\n`);
  t.equal(sectionOf(`${start}\ninside\n${end}`, 'config'), '\ninside\n');
  t.throws(() => sectionOf('no markers', 'config'), { message: `missing marker ${start}` });
  t.throws(() => replaceSection(`${start}\n`, 'config', 'x'), { message: `missing marker ${end}` });
  t.throws(() => replaceSection(`${end}\n${start}\n`, 'config', 'x'), { message: `missing marker ${end}` }, 'end before start');
});

function runScript(args: string[]): Promise<Output> {
  return outputOf(spawnProcess(process.execPath, [SCRIPT, ...args], { stdio: ['ignore', 'pipe', 'pipe'] }).child);
}

t.test('scripts/config-reference.mjs prints every section, and writes into each file the sections it holds', async (t) => {
  const { config, errors } = SECTIONS;
  const original = `# Title\n\nprose\n\n${config.start}\nold table\n${config.end}\n\nmore prose\n\n${errors.start}\n${errors.end}\n`;
  const onlyConfig = `# Configuration\n\n${config.start}\nold\n${config.end}\n`;
  const onlyErrors = `# Errors\n\n${errors.start}\n${errors.end}\ntail\n`;
  const halfMarked = `# Half\n\n${errors.start}\nno end\n`;
  const dir = t.testdir({ 'both.md': original, 'config.md': onlyConfig, 'errors.md': onlyErrors, 'bare.md': '# no markers\n', 'half.md': halfMarked });

  const printed = await runScript([]);
  t.equal(printed.code, 0);
  t.ok(printed.stdout.includes(`${config.start}\n${configReference()}\n${config.end}\n`));
  t.ok(printed.stdout.includes(`${errors.start}\n${errorCodeReference()}\n${errors.end}\n`));

  const written = await runScript(['--write', join(dir, 'both.md')]);
  t.equal(written.code, 0, written.stderr);
  const expected = replaceSection(replaceSection(original, 'config', configReference()), 'errors', errorCodeReference());
  t.equal(readFileSync(join(dir, 'both.md'), 'utf8'), expected);
  t.ok(expected.startsWith('# Title\n\nprose\n\n') && expected.includes('\n\nmore prose\n\n'), 'the prose around stays');

  const split = await runScript(['--write', join(dir, 'config.md'), '--write', join(dir, 'errors.md')]);
  t.equal(split.code, 0, split.stderr);
  t.equal(readFileSync(join(dir, 'config.md'), 'utf8'), replaceSection(onlyConfig, 'config', configReference()), 'a file with one section gets that one');
  t.equal(readFileSync(join(dir, 'errors.md'), 'utf8'), replaceSection(onlyErrors, 'errors', errorCodeReference()));

  for (const [name, message] of [['bare.md', 'holds no generated section'], ['half.md', `missing marker ${errors.end}`]] as const) {
    writeFileSync(join(dir, 'config.md'), onlyConfig);
    const refused = await runScript(['--write', join(dir, 'config.md'), '--write', join(dir, name)]);
    t.equal(refused.code, 1, `${name} is refused`);
    t.match(refused.stderr, message);
    t.equal(readFileSync(join(dir, 'config.md'), 'utf8'), onlyConfig, `and, with ${name}, no other file is written either`);
  }
  t.equal(readFileSync(join(dir, 'bare.md'), 'utf8'), '# no markers\n', 'a file without markers is left alone');
  t.equal(readFileSync(join(dir, 'half.md'), 'utf8'), halfMarked);

  const bad = await runScript(['--bogus']);
  t.equal(bad.code, 2);
  t.match(bad.stderr, /usage: /);
});
