import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { ConfigError, DEFAULT_CONFIG_FILE, configFileFrom, loadConfig, parseConfig } from '../../src/config/load.js';
import { GatewayError } from '../../src/errors.js';
import { checkProperties } from '../helpers/property.js';
import { loadProperties } from './load.properties.js';

const FILE = 'gw.yaml';
const REPLICA = 'replicas:\n  - id: r1\n    url: http://127.0.0.1:3001/mcp\n';
const SECRET = 'x'.repeat(40);

/** The problems of a text that must not load, after checking the error's code. */
function problems(text: string, env: NodeJS.ProcessEnv = {}, code = 'GW_CONFIG_INVALID'): readonly string[] {
  try {
    parseConfig(text, FILE, env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    if (err.code !== code) throw new Error(`expected ${code}, got ${err.code}: ${err.problems.join('; ')}`);
    return err.problems;
  }
  throw new Error('expected the configuration to be rejected');
}

t.test('a file with only replicas gets every default', async (t) => {
  const config = parseConfig(REPLICA, FILE, {});
  t.strictSame(config, {
    listen: { host: '127.0.0.1', port: 8080 },
    admin: { host: '127.0.0.1', port: 9464 },
    path: '/mcp',
    workers: 1,
    store: { type: 'memory', url: 'redis://127.0.0.1:6379', keyPrefix: 'mcpgw', connectTimeoutMs: 1000, commandTimeoutMs: 500, autoPipelining: false, bindingCache: { maxEntries: 100_000 } },
    replicas: [{ id: 'r1', url: 'http://127.0.0.1:3001/mcp' }],
    balancer: 'round-robin',
    health: { intervalMs: 2000, timeoutMs: 1000, unhealthyThreshold: 3, healthyThreshold: 1, expectStatus: [] },
    sessions: { idleTtlMs: 1_800_000, tombstoneTtlMs: 3_600_000 },
    upstream: { connectTimeoutMs: 2000, headersTimeoutMs: 300_000, connections: 1024, maxStreams: 4096, retryAfterSeconds: 1 },
    resumption: {
      mode: 'signal',
      replayTimeoutMs: 5000,
      recordRetryMs: 0,
      unrecorded: { streamBytes: 1024 * 1024, totalBytes: 64 * 1024 * 1024 },
      recordedEvents: 1024,
      replayBufferBytes: 8 * 1024 * 1024,
      admission: { maxConcurrent: 64, maxQueued: 1024, queueMs: 500 },
      journal: { enabled: true, maxEvents: 1000, maxBytes: 1024 * 1024, holdMs: 60_000, leaseMs: 6000, maxHeld: 1000 },
    },
    cursor: {},
    security: { credentialHeaders: ['authorization'], principalCheckTimeoutMs: 5000 },
    limits: { bodyBytes: 4 * 1024 * 1024, headerBytes: 16 * 1024, sseEventBytes: 1024 * 1024, headersTimeoutMs: 10_000, clientConnections: 10_000 },
    shutdown: { graceMs: 10_000, retryHintMs: 1000 },
    log: { level: 'info', requests: false },
    tracing: { enabled: false },
    tasks: { maxTtlMs: 86_400_000 },
    cache: { enabled: false, maxEntries: 1000, maxBytes: 16 * 1024 * 1024 },
  });
});

t.test('a section given in part keeps the defaults of its other keys', async (t) => {
  const config = parseConfig(`${REPLICA}store: { commandTimeoutMs: 50 }\nlisten: { port: 1234 }\n`, FILE, {});
  t.equal(config.store.commandTimeoutMs, 50);
  t.equal(config.store.connectTimeoutMs, 1000);
  t.equal(config.store.type, 'memory');
  t.strictSame(config.listen, { host: '127.0.0.1', port: 1234 });
});

t.test('the example file of CONTRACT.md §2 is valid', async (t) => {
  const example = `listen: { host: 127.0.0.1, port: 8080 }     # the MCP endpoint
admin:  { host: 127.0.0.1, port: 9464 }     # /metrics /healthz /readyz, never on the MCP listener
path: /mcp                                  # public path of the MCP endpoint
store:
  type: memory                              # memory (one gateway process) | redis
  url: redis://127.0.0.1:6379               # type: redis
replicas:
  - id: r1
    url: http://127.0.0.1:3001/mcp          # the replica's own MCP endpoint
resumption:
  mode: signal                              # signal (default) | reject
cursor:
  secret: \${MCP_GATEWAY_CURSOR_SECRET}      # optional; see 4
`;
  const withoutSecret = parseConfig(example, FILE, {});
  t.strictSame(withoutSecret.listen, { host: '127.0.0.1', port: 8080 });
  t.strictSame(withoutSecret.admin, { host: '127.0.0.1', port: 9464 });
  t.equal(withoutSecret.path, '/mcp');
  t.equal(withoutSecret.store.type, 'memory');
  t.equal(withoutSecret.store.url, 'redis://127.0.0.1:6379');
  t.strictSame(withoutSecret.replicas, [{ id: 'r1', url: 'http://127.0.0.1:3001/mcp' }]);
  t.equal(withoutSecret.resumption.mode, 'signal');
  t.notOk('secret' in withoutSecret.cursor, 'an unset secret leaves the key absent');

  const withSecret = parseConfig(example, FILE, { MCP_GATEWAY_CURSOR_SECRET: SECRET });
  t.equal(withSecret.cursor.secret, SECRET);
});

t.test('the shipped config/gateway.yaml is valid', async (t) => {
  const file = fileURLToPath(new URL('../../../config/gateway.yaml', import.meta.url));
  const config = loadConfig(file, {});
  t.ok(config.replicas.length > 0);
  t.equal(config.store.url, 'redis://127.0.0.1:6379', 'the default of ${MCP_GATEWAY_REDIS_URL:-...}');
  t.equal(loadConfig(file, { MCP_GATEWAY_REDIS_URL: 'redis://other:6380' }).store.url, 'redis://other:6380');
});

t.test('environment variables', async (t) => {
  t.test('${VAR} is replaced, alone or inside a string', async (t) => {
    const config = parseConfig(`${REPLICA}path: \${P}\nstore: { keyPrefix: "gw-\${FLEET}-x" }\n`, FILE, { P: '/gw', FLEET: 'blue' });
    t.equal(config.path, '/gw');
    t.equal(config.store.keyPrefix, 'gw-blue-x');
  });

  t.test('${VAR:-default} takes the default when the variable is unset or empty', async (t) => {
    const text = `${REPLICA}path: \${P:-/fallback}\n`;
    t.equal(parseConfig(text, FILE, {}).path, '/fallback');
    t.equal(parseConfig(text, FILE, { P: '' }).path, '/fallback');
    t.equal(parseConfig(text, FILE, { P: '/set' }).path, '/set');
    t.equal(parseConfig(`${REPLICA}path: "/a\${P:-b}c"\n`, FILE, {}).path, '/abc');
  });

  t.test('$${ stands for a literal ${', async (t) => {
    const config = parseConfig(`${REPLICA}path: "/a$\${X}-\${Y}"\n`, FILE, { X: 'no', Y: 'z' });
    t.equal(config.path, '/a${X}-z');
  });

  t.test('an unset variable alone makes an optional key absent', async (t) => {
    const config = parseConfig(`${REPLICA}cursor:\n  secret: \${NOT_SET}\nhealth:\n  path: \${ALSO_NOT_SET}\n`, FILE, {});
    t.notOk('secret' in config.cursor);
    t.notOk('path' in config.health);
  });

  t.test('an unset variable alone makes a required key "is required", naming the variable', async (t) => {
    const text = 'replicas:\n  - id: r1\n    url: ${REPLICA_URL}\n';
    t.strictSame(problems(text), [`${FILE}:3: replicas[0].url: is required (\${REPLICA_URL} is not set)`]);
    t.equal(parseConfig(text, FILE, { REPLICA_URL: 'http://h:1/mcp' }).replicas[0]?.url, 'http://h:1/mcp');
  });

  t.test('an unset variable inside a longer string is a problem', async (t) => {
    const text = 'replicas:\n  - id: r1\n    url: http://${HOST}:3001/mcp\n';
    t.strictSame(problems(text), [`${FILE}:3: replicas[0].url: \${HOST} is not set and has no default (write \${HOST:-default})`]);
  });

  t.test('a plain ${PORT} takes its YAML type; a quoted one stays a string', async (t) => {
    const plain = parseConfig(`${REPLICA}listen:\n  port: \${PORT}\n`, FILE, { PORT: '8181' });
    t.equal(plain.listen.port, 8181);
    t.equal(parseConfig(`${REPLICA}listen:\n  port: \${PORT:-8282}\n`, FILE, {}).listen.port, 8282);
    t.strictSame(problems(`${REPLICA}listen:\n  port: "\${PORT}"\n`, { PORT: '8181' }), [`${FILE}:5: listen.port: expected integer`]);
  });
});

t.test('unknown keys are errors at every level', async (t) => {
  const sections = ['listen', 'admin', 'store', 'health', 'sessions', 'upstream', 'resumption', 'cursor', 'security', 'limits', 'shutdown', 'log'];
  const lines = [
    'replicas:',
    '  - id: r1',
    '    url: http://127.0.0.1:3001/mcp',
    '    weight: 2',
    ...sections.map((s) => `${s}: { bogus: 1 }`),
    'colour: blue',
  ];
  t.strictSame(problems(`${lines.join('\n')}\n`), [
    `${FILE}:4: replicas[0].weight: is not a known key`,
    ...sections.map((s, i) => `${FILE}:${5 + i}: ${s}.bogus: is not a known key`),
    `${FILE}:${5 + sections.length}: colour: is not a known key`,
  ]);
});

t.test('a key that is not a plain name is quoted in the path, at its own line', async (t) => {
  // Found by the loader's property: an empty key read "gw.yaml:1: : is not a known key", and a
  // null key (`:` or `~:`) was looked for as "null", so that its line was its parent's.
  t.strictSame(problems(`${REPLICA}listen: {}\n:\nsecurity:\n  "port ": 1\n  ~: 2\n  "a.b": 3\n`), [
    `${FILE}:5: [""]: is not a known key`,
    `${FILE}:7: security["port "]: is not a known key`,
    `${FILE}:8: security[""]: is not a known key`,
    `${FILE}:9: security["a.b"]: is not a known key`,
  ]);
});

t.test('wrong types', async (t) => {
  const text = [
    'listen: { port: "80" }',
    'health: { intervalMs: 1.5, expectStatus: [200, 700] }',
    'replicas: { id: r1 }',
    'security: { allowedOrigins: https://a.example }',
    'limits: { bodyBytes: true }',
    'path: 5',
    'store: yes',
  ].join('\n');
  t.strictSame(problems(text), [
    `${FILE}:1: listen.port: expected integer`,
    `${FILE}:2: health.intervalMs: expected integer`,
    `${FILE}:2: health.expectStatus[1]: expected at most 599`,
    `${FILE}:3: replicas: expected array`,
    `${FILE}:4: security.allowedOrigins: expected array`,
    `${FILE}:5: limits.bodyBytes: expected integer`,
    `${FILE}:6: path: expected string`,
    `${FILE}:7: store: expected object`,
  ]);
});

t.test('limits of numbers, strings and lists', async (t) => {
  t.strictSame(problems('replicas: []\nlisten: { port: 70000 }\ncursor: { secret: short }\nshutdown: { graceMs: -1 }\n'), [
    `${FILE}:1: replicas: expected at least 1 item(s)`,
    `${FILE}:2: listen.port: expected at most 65535`,
    `${FILE}:3: cursor.secret: expected at least 32 characters`,
    `${FILE}:4: shutdown.graceMs: expected at least 0`,
  ]);
});

t.test('a value outside an enum', async (t) => {
  const text = `${REPLICA}store: { type: mongo }\nresumption: { mode: ask }\nlog: { level: loud }\nbalancer: random\n`;
  t.strictSame(problems(text), [
    `${FILE}:4: store.type: expected one of memory, redis`,
    `${FILE}:5: resumption.mode: expected one of signal, reject`,
    `${FILE}:6: log.level: expected one of fatal, error, warn, info, debug, trace, silent`,
    `${FILE}:7: balancer: expected one of round-robin, least-sessions`,
  ]);
});

t.test('bad URLs', async (t) => {
  const text = [
    'replicas:',
    '  - { id: a, url: "ftp://127.0.0.1/mcp" }',
    '  - { id: b, url: "http://exa mple/mcp" }',
    'store: { type: redis, url: "redis://[::1" }',
  ].join('\n');
  t.strictSame(problems(text), [
    `${FILE}:2: replicas[0].url: expected a string matching ^https?://`,
    `${FILE}:3: replicas[1].url: expected an absolute http(s) URL`,
    `${FILE}:4: store.url: expected a redis:// or rediss:// URL`,
  ]);
  t.equal(parseConfig(`${REPLICA}store: { type: redis, url: "rediss://:pw@h:6380/2" }\n`, FILE, {}).store.url, 'rediss://:pw@h:6380/2');
});

t.test('replica ids and urls are unique', async (t) => {
  const text = [
    'replicas:',
    '  - id: r1',
    '    url: http://127.0.0.1:3001/mcp',
    '  - id: r2',
    '    url: http://127.0.0.1:3001/mcp',
    '  - id: r1',
    '    url: http://127.0.0.1:3003/mcp',
  ].join('\n');
  t.strictSame(problems(text), [`${FILE}:5: replicas[1].url: duplicates replicas[0].url`, `${FILE}:6: replicas[2].id: duplicates replicas[0].id`]);
});

t.test('the admin listener never shares the MCP listener', async (t) => {
  t.strictSame(problems(`${REPLICA}listen: { port: 9000 }\nadmin: { port: 9000 }\n`), [
    `${FILE}:5: admin.port: must differ from listen.port (metrics never share the MCP listener)`,
  ]);
  t.strictSame(problems(`${REPLICA}listen: { port: 9464 }\n`), [
    `${FILE}:4: admin.port: must differ from listen.port (metrics never share the MCP listener)`,
  ], 'against the default admin port: reported at the listen.port that clashes');
  t.equal(parseConfig(`${REPLICA}listen: { port: 9000, host: 127.0.0.1 }\nadmin: { port: 9000, host: 127.0.0.2 }\n`, FILE, {}).admin.port, 9000, 'other host');
  t.equal(parseConfig(`${REPLICA}listen: { port: 0 }\nadmin: { port: 0 }\n`, FILE, {}).admin.port, 0, 'both any free port');
});

t.test('workers: an integer of at least 1 or auto; above 1 only with the Redis store', async (t) => {
  const redis = 'store: { type: redis }\n';
  t.equal(parseConfig(`${REPLICA}${redis}workers: 4\n`, FILE, {}).workers, 4);
  t.equal(parseConfig(`${REPLICA}workers: auto\n`, FILE, {}).workers, 'auto', 'auto with memory is valid (it runs one)');
  t.equal(parseConfig(`${REPLICA}workers: 1\n`, FILE, {}).workers, 1, 'one with memory');
  for (const value of ['0', 'many', '1.5', 'true']) {
    t.strictSame(problems(`${REPLICA}${redis}workers: ${value}\n`), [`${FILE}:5: workers: expected an integer of at least 1 or auto`], `${value}: one problem`);
  }
  t.strictSame(problems(`${REPLICA}workers: 2\n`), [`${FILE}:4: workers: more than one worker needs store.type: redis (a memory store lives in one process; use workers: 1 or a Redis store)`]);
  t.equal(parseConfig(`${REPLICA}workers: \${N}\n${redis}`, FILE, { N: 'auto' }).workers, 'auto', 'from the environment');
});

t.test('legacySse: its two paths and the MCP path are three different routes', async (t) => {
  t.same(parseConfig(`${REPLICA}legacySse: { path: /sse, messagesPath: /messages }\n`, FILE, {}).legacySse, { path: '/sse', messagesPath: '/messages' });
  t.strictSame(problems(`${REPLICA}legacySse: { path: /mcp, messagesPath: /sse }\n`), [`${FILE}:4: legacySse.path: must differ from path`]);
  t.strictSame(problems(`${REPLICA}legacySse: { path: /sse, messagesPath: /sse }\n`), [`${FILE}:4: legacySse.messagesPath: must differ from legacySse.path`]);
  t.strictSame(problems(`${REPLICA}legacySse: { path: /sse }\n`).length, 1, 'both keys are required');
});

t.test('YAML that does not parse is GW_CONFIG_UNREADABLE, with the line', async (t) => {
  t.strictSame(problems('path: /mcp\nreplicas:\n  - id: r1\n  url: http://x\n', {}, 'GW_CONFIG_UNREADABLE'), [
    `${FILE}:4: All mapping items must start at the same column`,
  ]);
  t.strictSame(problems(`${REPLICA}path: /a\npath: /b\n`, {}, 'GW_CONFIG_UNREADABLE'), [`${FILE}:5: Map keys must be unique`]);
  const unterminated = problems('path: /mcp\nreplicas:\n  - id: r1\n    url: "http://x\n', {}, 'GW_CONFIG_UNREADABLE');
  t.match(unterminated, [/^gw\.yaml:\d+: Missing closing "quote/]);
});

t.test('aliases that yaml resolves only on conversion are GW_CONFIG_UNREADABLE, at the alias', async (t) => {
  // Found by the loader's property (load.properties.ts): both threw a ReferenceError out of parseConfig.
  t.strictSame(problems(`${REPLICA}listen: { port: 1 }\nadmin: *nope\n`, {}, 'GW_CONFIG_UNREADABLE'), [
    `${FILE}:5: Unresolved alias (the anchor must be set before the alias): nope`,
  ]);
  const laughs = ['a: &a [x, x, x, x, x, x, x, x, x]', 'b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]', 'c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]', 'd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]'];
  t.strictSame(problems(`${REPLICA}${laughs.join('\n')}\n`, {}, 'GW_CONFIG_UNREADABLE'), [`${FILE}:5: Excessive alias count indicates a resource exhaustion attack`]);
  t.equal(parseConfig(`${REPLICA}listen: &l { port: 1234 }\n`, FILE, {}).listen.port, 1234, 'an anchor alone is fine');
});

t.test('a document that is not a mapping', async (t) => {
  t.strictSame(problems('- a\n- b\n'), [`${FILE}:1: (root): expected a mapping of configuration keys`]);
  t.strictSame(problems(''), [`${FILE}:1: replicas: is required`], 'an empty file: at its first line');
});

t.test('every problem of a file with several mistakes, each at its line', async (t) => {
  const text = `# a file with many mistakes
listen:
  host: 127.0.0.1
  port: seventy
  bogus: 1
store:
  type: mongo
replicas:
  - id: r1
    url: ftp://x
  - id: "bad id"
  - id: r1
    url: http://127.0.0.1:3001/mcp
balancer: random
cursor:
  secret: short
path: http://\${UNSET_HOST}/mcp
extra: true
`;
  const found = problems(text);
  t.strictSame(found, [
    `${FILE}:4: listen.port: expected integer`,
    `${FILE}:5: listen.bogus: is not a known key`,
    `${FILE}:7: store.type: expected one of memory, redis`,
    `${FILE}:10: replicas[0].url: expected a string matching ^https?://`,
    `${FILE}:11: replicas[1].url: is required`,
    `${FILE}:11: replicas[1].id: expected a string matching ^[A-Za-z0-9._-]{1,64}$`,
    `${FILE}:12: replicas[2].id: duplicates replicas[0].id`,
    `${FILE}:14: balancer: expected one of round-robin, least-sessions`,
    `${FILE}:16: cursor.secret: expected at least 32 characters`,
    `${FILE}:17: path: expected a string matching ^/`,
    `${FILE}:17: path: \${UNSET_HOST} is not set and has no default (write \${UNSET_HOST:-default})`,
    `${FILE}:18: extra: is not a known key`,
  ]);
});

t.test('the error carries a stable code, the file and every problem', async (t) => {
  try {
    parseConfig('replicas: []\nlog: { level: loud }\n', FILE, {});
    t.fail('expected an error');
  } catch (err) {
    t.ok(err instanceof GatewayError);
    t.ok(err instanceof ConfigError);
    const e = err as ConfigError;
    t.equal(e.code, 'GW_CONFIG_INVALID');
    t.equal(e.file, FILE);
    t.equal(e.problems.length, 2);
    t.match(e.message, /^gw\.yaml: 2 problem\(s\):\n/);
    for (const p of e.problems) t.ok(e.message.includes(p), p);
  }
});

t.test('loadConfig reads a file; a missing one is GW_CONFIG_UNREADABLE', async (t) => {
  const dir = t.testdir({ 'good.yaml': `${REPLICA}listen:\n  port: \${PORT}\n` });
  t.equal(loadConfig(join(dir, 'good.yaml'), { PORT: '7070' }).listen.port, 7070);

  const missing = join(dir, 'missing.yaml');
  t.throws(() => loadConfig(missing, {}), { code: 'GW_CONFIG_UNREADABLE', file: missing, problems: [`${missing}: cannot read: no such file`] });
  t.throws(() => loadConfig(dir, {}), { code: 'GW_CONFIG_UNREADABLE', problems: [/EISDIR/] }, 'a directory');
});

t.test('the configuration is deeply frozen', async (t) => {
  const config = parseConfig(`${REPLICA}security: { allowedOrigins: [https://a.example] }\n`, FILE, {});
  for (const part of [config, config.listen, config.store, config.replicas, config.replicas[0], config.health.expectStatus, config.security.allowedOrigins]) {
    t.ok(Object.isFrozen(part));
  }
  t.throws(() => {
    (config.listen as { port: number }).port = 1;
  }, TypeError);
  t.throws(() => {
    (config.replicas as { id: string; url: string }[]).push({ id: 'r2', url: 'http://x' });
  }, TypeError);
  t.equal(config.listen.port, 8080);
  t.equal(config.replicas.length, 1);
});

t.test('configFileFrom: --config, then MCP_GATEWAY_CONFIG, then config/gateway.yaml', async (t) => {
  t.equal(DEFAULT_CONFIG_FILE, 'config/gateway.yaml');
  t.equal(configFileFrom('flag.yaml', { MCP_GATEWAY_CONFIG: 'env.yaml' }), 'flag.yaml');
  t.equal(configFileFrom(undefined, { MCP_GATEWAY_CONFIG: 'env.yaml' }), 'env.yaml');
  t.equal(configFileFrom(undefined, {}), 'config/gateway.yaml');
  t.equal(configFileFrom(undefined, { MCP_GATEWAY_CONFIG: '' }), 'config/gateway.yaml', 'an empty variable counts as unset');
});

checkProperties(t, loadProperties);
