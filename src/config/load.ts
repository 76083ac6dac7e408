/**
 * Reads the YAML configuration: `${VAR}` / `${VAR:-default}` interpolation, validation against
 * the schema with defaults filled in, and one problem per line naming the key path and the line
 * in the file. The result is frozen: nothing changes the configuration after it is loaded.
 */
import { accessSync, constants, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { isMap, isScalar, isSeq, LineCounter, parse as parseYaml, parseDocument, visit, type Document, type Node } from 'yaml';
import { GatewayError } from '../errors.js';
import { ConfigSchema, type Config } from './schema.js';

export const DEFAULT_CONFIG_FILE = 'config/gateway.yaml';

export class ConfigError extends GatewayError {
  constructor(
    readonly file: string,
    readonly problems: readonly string[],
    code: 'GW_CONFIG_INVALID' | 'GW_CONFIG_UNREADABLE' = 'GW_CONFIG_INVALID',
  ) {
    super(code, `${file}: ${problems.length} problem(s):\n${problems.join('\n')}`);
    this.name = 'ConfigError';
  }
}

type Path = readonly (string | number)[];

/** Compiled on the first configuration it checks (about 0.6 s of CPU): loading this module costs nothing of it. */
let validator: ValidateFunction<Config> | undefined;
const validate = (value: unknown): value is Config => {
  validator ??= new Ajv({ allErrors: true, useDefaults: true, strict: true }).compile<Config>(ConfigSchema);
  return validator(value);
};

/** Which file to read: `--config FILE`, else `MCP_GATEWAY_CONFIG` (when not empty), else the default. */
export function configFileFrom(flag: string | undefined, env: NodeJS.ProcessEnv): string {
  return flag ?? (env['MCP_GATEWAY_CONFIG'] || DEFAULT_CONFIG_FILE);
}

export function loadConfig(file: string, env: NodeJS.ProcessEnv = process.env): Config {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    const reason = (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : String(err);
    throw new ConfigError(file, [`${file}: cannot read: ${reason}`], 'GW_CONFIG_UNREADABLE');
  }
  return parseConfig(text, file, env);
}

export function parseConfig(text: string, file: string, env: NodeJS.ProcessEnv = process.env): Config {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  // What no node of the file stands for (a key missing from an empty file) is at its first line.
  const at = (offset: number | undefined) => `:${offset === undefined ? 1 : lines.linePos(offset).line}`;

  const syntax = [...doc.errors, ...doc.warnings].map((e) => `${file}${at(e.pos[0])}: ${e.message.split('\n')[0]}`);
  if (doc.errors.length > 0) throw new ConfigError(file, syntax, 'GW_CONFIG_UNREADABLE');

  // Kept with their offsets and reported in file order, whichever check found them.
  const found: { offset: number; text: string }[] = [];
  const problem = (node: Node | undefined, path: Path, message: string) => {
    const offset = node?.range?.[0];
    found.push({ offset: offset ?? -1, text: `${file}${at(offset)}: ${formatPath(path)}: ${message}` });
  };
  const unset = interpolate(doc, env, problem);

  const value = plainValue(doc, file, at) ?? {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new ConfigError(file, [`${file}:1: (root): expected a mapping of configuration keys`]);
  }
  removeUnset(value);

  if (!validate(value)) {
    // A value that matches no alternative (anyOf) is one problem, not one per alternative.
    const errors = validator?.errors ?? [];
    const alternatives = errors.filter((e) => e.keyword === 'anyOf').map((e) => `${e.schemaPath}/`);
    for (const error of errors) {
      if (alternatives.some((prefix) => error.schemaPath.startsWith(prefix))) continue;
      const { path, message } = describeError(error);
      const note = unset.get(pathKey(path));
      problem(nodeAt(doc, path), path, `${message}${note ? ` (${note} is not set)` : ''}`);
    }
  }
  // Also when the schema failed elsewhere: every problem of the file is reported at once.
  for (const { path, message, near } of semanticProblems(value)) {
    problem(nodeAt(doc, near && !doc.hasIn(path) ? near : path), path, message);
  }
  if (found.length > 0) {
    const problems = found.sort((a, b) => a.offset - b.offset).map((p) => p.text);
    throw new ConfigError(file, problems);
  }
  return deepFreeze(value as Config);
}

/**
 * The document as plain values. yaml finds two problems of a file only here, and throws: an alias
 * whose anchor is not set before it, and aliases that expand past its limit (a "billion laughs"
 * file). Both are the file's, at the first alias that does not resolve, or else the first alias.
 */
function plainValue(doc: Document, file: string, at: (offset: number | undefined) => string): ReturnType<Document['toJS']> {
  try {
    return doc.toJS();
  } catch (err) {
    let first: number | undefined;
    let unresolved: number | undefined;
    visit(doc, {
      Alias(_key, node) {
        first ??= node.range?.[0];
        if (node.resolve(doc) === undefined) {
          unresolved = node.range?.[0];
          return visit.BREAK;
        }
        return undefined;
      },
    });
    const message = err instanceof Error ? err.message : String(err);
    throw new ConfigError(file, [`${file}${at(unresolved ?? first)}: ${message}`], 'GW_CONFIG_UNREADABLE');
  }
}

const UNSET = Symbol('unset');
const VARIABLE = /\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;
const WHOLE_VARIABLE = /^\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}$/;

/**
 * Replaces `${VAR}` in string scalars. A plain scalar that is one variable alone takes the type its
 * value has in YAML (`port: ${PORT}` is a number); an unset or empty one makes the key absent, so
 * that optional keys such as `cursor.secret: ${MCP_GATEWAY_CURSOR_SECRET}` simply stay unset.
 * `$${` stands for a literal `${`. Returns the key paths left unset, to explain "is required".
 */
function interpolate(doc: Document, env: NodeJS.ProcessEnv, problem: (node: Node, path: Path, message: string) => void) {
  const unset = new Map<string, string>();
  visit(doc, {
    Scalar(_key, node, ancestors) {
      if (typeof node.value !== 'string' || !node.value.includes('${')) return;
      const whole = WHOLE_VARIABLE.exec(node.value);
      if (whole) {
        const [, name, fallback] = whole as unknown as [string, string, string | undefined];
        const raw = env[name] || fallback;
        if (raw === undefined || raw === '') {
          node.value = UNSET;
          unset.set(pathKey(pathOf(ancestors, node)), `\${${name}}`);
        } else {
          node.value = node.type === 'PLAIN' ? scalarFromYaml(raw) : raw;
        }
        return;
      }
      node.value = node.value.replace(VARIABLE, (match, name: string | undefined, fallback: string | undefined) => {
        if (name === undefined) return '${';
        const raw = env[name] || fallback;
        if (raw === undefined) {
          problem(node, pathOf(ancestors, node), `\${${name}} is not set and has no default (write \${${name}:-default})`);
          return match;
        }
        return raw;
      });
    },
  });
  return unset;
}

function scalarFromYaml(raw: string): unknown {
  try {
    const parsed: unknown = parseYaml(raw);
    return parsed !== null && typeof parsed === 'object' ? raw : parsed;
  } catch {
    return raw;
  }
}

/**
 * Removes what interpolate left unset: a key, or an item of a list of strings (`previousSecrets:
 * [${OLD_SECRET}]` is empty while OLD_SECRET is unset). In a list of anything else the item stays,
 * as undefined, for the schema to name as missing.
 */
function removeUnset(value: Record<string, unknown> | unknown[]): void {
  if (Array.isArray(value) && value.includes(UNSET) && value.every((item) => item === UNSET || typeof item === 'string')) {
    const kept = value.filter((item) => item !== UNSET);
    value.splice(0, value.length, ...kept);
    return;
  }
  for (const [key, child] of Object.entries(value)) {
    if (child === UNSET) {
      if (Array.isArray(value)) value[Number(key)] = undefined;
      else delete value[key];
    } else if (child !== null && typeof child === 'object') {
      removeUnset(child as Record<string, unknown>);
    }
  }
}

/** The key path of a node from the ancestors that `visit` reports. */
function pathOf(ancestors: readonly unknown[], node: unknown): Path {
  const path: (string | number)[] = [];
  const chain = [...ancestors, node];
  for (let i = 0; i < chain.length - 1; i++) {
    const parent = chain[i];
    const child = chain[i + 1];
    if (isSeq(parent)) path.push(parent.items.indexOf(child as never));
    else if (isMap(parent)) {
      const pair = child as { key?: unknown };
      path.push(isScalar(pair.key) ? keyText(pair.key.value) : String(pair.key));
    }
  }
  return path;
}

function describeError(error: ErrorObject): { path: Path; message: string } {
  const path: (string | number)[] = error.instancePath
    .split('/')
    .slice(1)
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((s) => (/^\d+$/.test(s) ? Number(s) : s));
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'required':
      return { path: [...path, String(params['missingProperty'])], message: 'is required' };
    case 'additionalProperties':
      return { path: [...path, String(params['additionalProperty'])], message: 'is not a known key' };
    case 'enum':
      return { path, message: `expected one of ${(params['allowedValues'] as unknown[]).join(', ')}` };
    case 'type':
      return { path, message: `expected ${String(params['type'])}` };
    case 'pattern':
      return { path, message: `expected a string matching ${String(params['pattern'])}` };
    case 'minLength':
      return { path, message: `expected at least ${String(params['limit'])} characters` };
    case 'minimum':
      return { path, message: `expected at least ${String(params['limit'])}` };
    case 'maximum':
      return { path, message: `expected at most ${String(params['limit'])}` };
    case 'anyOf':
      return { path, message: `expected ${describeAlternatives(error.schemaPath)}` };
    case 'minItems':
      return { path, message: `expected at least ${String(params['limit'])} item(s)` };
    default:
      return { path, message: `expected a value that ${error.message ?? 'validates'}` };
  }
}

/** The alternatives of the anyOf at `schemaPath` (#/properties/...), as a message says them. */
function describeAlternatives(schemaPath: string): string {
  const branches = schemaPath
    .split('/')
    .slice(1)
    .reduce<unknown>((at, key) => (at as Record<string, unknown> | undefined)?.[key], ConfigSchema) as Record<string, unknown>[] | undefined;
  const said = (Array.isArray(branches) ? branches : []).map((branch) =>
    branch['const'] !== undefined ? String(branch['const']) : branch['minimum'] !== undefined ? `an ${String(branch['type'])} of at least ${String(branch['minimum'])}` : `a value of type ${String(branch['type'])}`,
  );
  return said.length > 0 ? said.join(' or ') : 'one of the allowed forms';
}

/**
 * What the schema cannot say: ids and URLs unique, URLs parseable, the two listeners apart. It runs
 * on a value that may have failed the schema, so it reads only the parts of the right shape, and
 * leaves a value the schema already rejected (a URL without http://) to the schema's message.
 */
function semanticProblems(config: Record<string, unknown>): { path: Path; message: string; near?: Path }[] {
  const problems: { path: Path; message: string; near?: Path }[] = [];
  const seen = new Map<string, number>();
  const replicas = Array.isArray(config['replicas']) ? (config['replicas'] as unknown[]) : [];
  replicas.forEach((replica, i) => {
    if (!isRecord(replica)) return;
    for (const key of ['id', 'url'] as const) {
      const value = replica[key];
      if (typeof value !== 'string') continue;
      const first = seen.get(`${key}:${value}`);
      if (first !== undefined) {
        problems.push({ path: ['replicas', i, key], message: `duplicates replicas[${first}].${key}` });
      } else seen.set(`${key}:${value}`, i);
    }
    const url = replica['url'];
    if (typeof url === 'string' && /^https?:\/\//.test(url) && !URL.canParse(url)) {
      problems.push({ path: ['replicas', i, 'url'], message: 'expected an absolute http(s) URL' });
    }
  });
  const { listen, admin, store } = config;
  if (
    isRecord(listen) &&
    isRecord(admin) &&
    typeof listen['port'] === 'number' &&
    listen['port'] !== 0 &&
    listen['port'] === admin['port'] &&
    listen['host'] === admin['host']
  ) {
    // Where the file does not set admin.port, the line to show is the listen.port that clashes with its default.
    problems.push({
      path: ['admin', 'port'],
      near: ['listen', 'port'],
      message: 'must differ from listen.port (metrics never share the MCP listener)',
    });
  }
  const legacySse = config['legacySse'];
  if (isRecord(legacySse)) {
    // Three routes on one listener: each path names one of them.
    const taken = new Map<unknown, string>([[config['path'] ?? '/mcp', 'path']]);
    for (const key of ['path', 'messagesPath'] as const) {
      const other = taken.get(legacySse[key]);
      if (other !== undefined) problems.push({ path: ['legacySse', key], message: `must differ from ${other}` });
      taken.set(legacySse[key], `legacySse.${key}`);
    }
  }
  if (isRecord(store)) problems.push(...storeProblems(store));
  if (isRecord(config['cursor'])) problems.push(...cursorProblems(config['cursor']));
  const workers = config['workers'];
  if (typeof workers === 'number' && workers > 1 && (!isRecord(store) || (store['type'] ?? 'memory') === 'memory')) {
    // Sessions, cursors and journals in memory are one process's: a second worker would not know them.
    problems.push({ path: ['workers'], message: 'more than one worker needs store.type: redis (a memory store lives in one process; use workers: 1 or a Redis store)' });
  }
  return problems;
}

/** Verify-only keys beside a signing key, each of them a key of its own. Never names a value. */
function cursorProblems(cursor: Record<string, unknown>): { path: Path; message: string }[] {
  const problems: { path: Path; message: string }[] = [];
  const previous = cursor['previousSecrets'];
  if (!Array.isArray(previous) || previous.length === 0) return problems;
  const secret = cursor['secret'];
  if (typeof secret !== 'string') {
    problems.push({ path: ['cursor', 'previousSecrets'], message: 'needs cursor.secret (the key that signs); an agreed key does not rotate' });
  }
  previous.forEach((value, i) => {
    if (typeof value !== 'string') return;
    if (value === secret) problems.push({ path: ['cursor', 'previousSecrets', i], message: 'is the same as cursor.secret (which verifies already)' });
    else {
      const first = previous.indexOf(value);
      if (first < i) problems.push({ path: ['cursor', 'previousSecrets', i], message: `duplicates cursor.previousSecrets[${first}]` });
    }
  });
  return problems;
}

/** One topology at a time, and node URLs that parse and that log in the same way. */
function storeProblems(store: Record<string, unknown>): { path: Path; message: string }[] {
  const problems: { path: Path; message: string }[] = [];
  const isRedisUrl = (url: unknown): url is string => typeof url === 'string' && /^rediss?:\/\//.test(url);
  if (store['type'] === 'redis' && isRedisUrl(store['url']) && !URL.canParse(store['url'])) {
    problems.push({ path: ['store', 'url'], message: 'expected a redis:// or rediss:// URL' });
  }
  const topologies = (['cluster', 'sentinel'] as const).filter((key) => store[key] !== undefined);
  if (topologies.length === 2) {
    problems.push({ path: ['store', 'sentinel'], message: 'store.cluster and store.sentinel exclude each other: set one of them' });
  }
  for (const key of topologies) {
    if (store['type'] !== 'redis') {
      problems.push({ path: ['store', key], message: `store.${key} needs store.type: redis` });
    }
    const section = store[key];
    const nodes = isRecord(section) && Array.isArray(section['nodes']) ? (section['nodes'] as unknown[]) : [];
    // The client logs in to every node (discovered ones too) with one set of credentials.
    let first: string | undefined;
    nodes.forEach((node, i) => {
      if (!isRedisUrl(node)) return;
      const path = ['store', key, 'nodes', i];
      if (!URL.canParse(node)) {
        problems.push({ path, message: 'expected a redis://host:port or rediss://host:port URL' });
        return;
      }
      const url = new URL(node);
      if (url.pathname !== '' && url.pathname !== '/') {
        problems.push({ path, message: `expected no database in a ${key} node URL` });
      }
      const login = `${url.protocol}${url.username}:${url.password}`;
      if (first === undefined) first = login;
      else if (login !== first) {
        problems.push({ path, message: `expected the same scheme, user and password as store.${key}.nodes[0]` });
      }
    });
  }
  const tls = store['tls'];
  if (isRecord(tls)) problems.push(...tlsProblems(store, tls));
  return problems;
}

/** TLS options that would apply to no connection, a certificate without its key, and files that cannot be read. */
function tlsProblems(store: Record<string, unknown>, tls: Record<string, unknown>): { path: Path; message: string }[] {
  const problems: { path: Path; message: string }[] = [];
  const urls = isRecord(store['cluster'])
    ? store['cluster']['nodes']
    : isRecord(store['sentinel'])
      ? [store['url'], ...(Array.isArray(store['sentinel']['nodes']) ? (store['sentinel']['nodes'] as unknown[]) : [])]
      : [store['url']];
  const secure = Array.isArray(urls) && urls.some((url) => typeof url === 'string' && url.startsWith('rediss://'));
  if (store['type'] !== 'redis') problems.push({ path: ['store', 'tls'], message: 'store.tls needs store.type: redis' });
  else if (!secure) {
    problems.push({ path: ['store', 'tls'], message: 'store.tls applies to rediss:// connections only, and none is configured: write rediss:// in the store URLs' });
  }
  for (const [key, other] of [['cert', 'key'], ['key', 'cert']] as const) {
    if (typeof tls[key] === 'string' && tls[other] === undefined) {
      problems.push({ path: ['store', 'tls', key], message: `store.tls.${key} needs store.tls.${other}` });
    }
  }
  for (const key of ['ca', 'cert', 'key'] as const) {
    const file = tls[key];
    if (typeof file !== 'string' || file === '') continue;
    const unreadable = unreadableFile(file);
    if (unreadable !== undefined) problems.push({ path: ['store', 'tls', key], message: unreadable });
  }
  return problems;
}

/** Why `file` cannot be read, or undefined when it can. */
export function unreadableFile(file: string): string | undefined {
  try {
    accessSync(file, constants.R_OK);
    return undefined;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const reason = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : String(code ?? err);
    return `cannot read ${resolve(file)}: ${reason}`;
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** The node for a key path, or the nearest ancestor that exists (for a missing key). */
function nodeAt(doc: Document, path: Path): Node | undefined {
  for (let n = path.length; n >= 0; n--) {
    const prefix = path.slice(0, n);
    if (n > 0) {
      const parent = prefix.length > 1 ? doc.getIn(prefix.slice(0, -1), true) : doc.contents;
      if (isMap(parent)) {
        const pair = parent.items.find((p) => isScalar(p.key) && keyText(p.key.value) === String(prefix[n - 1]));
        if (pair && isScalar(pair.key)) return pair.key;
      }
    }
    const node = n === 0 ? doc.contents : doc.getIn(prefix, true);
    if (node && typeof node === 'object' && 'range' in node) return node as Node;
  }
  return undefined;
}

/** A scalar key as the configuration's object has it: a null key (`~:`, or `:` alone) is ''. */
function keyText(value: unknown): string {
  return value === null ? '' : String(value);
}

/** `a.b[0].c`; a key that is not a plain name (empty, or with a space, dot or colon) is quoted: `a[""]`, `["port "]`. */
function formatPath(path: Path): string {
  if (path.length === 0) return '(root)';
  return path
    .map((p, i) => (typeof p === 'number' ? `[${p}]` : !PLAIN_KEY.test(p) ? `[${JSON.stringify(p)}]` : i === 0 ? p : `.${p}`))
    .join('');
}

const PLAIN_KEY = /^[A-Za-z0-9_-]+$/;

function pathKey(path: Path): string {
  return JSON.stringify(path);
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
