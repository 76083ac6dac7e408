import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { ConfigError, parseConfig } from '../../src/config/load.js';

const FILE = 'gw.yaml';
const REPLICA = 'replicas:\n  - id: r1\n    url: http://127.0.0.1:3001/mcp\n';

function problems(text: string): readonly string[] {
  try {
    parseConfig(`${REPLICA}${text}`, FILE, {});
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

t.test('store.cluster and store.sentinel are optional, unset by default, and parsed when set', async (t) => {
  const plain = parseConfig(REPLICA, FILE, {});
  t.notOk('cluster' in plain.store || 'sentinel' in plain.store);
  const cluster = parseConfig(`${REPLICA}store:\n  type: redis\n  cluster: { nodes: ["redis://:pw@h1:7000", "redis://:pw@h2:7000"] }\n`, FILE, {});
  t.strictSame(cluster.store.cluster, { nodes: ['redis://:pw@h1:7000', 'redis://:pw@h2:7000'] });
  const sentinel = parseConfig(`${REPLICA}store:\n  type: redis\n  url: redis://:pw@mymaster\n  sentinel: { name: mymaster, nodes: ["redis://h1:26379"] }\n`, FILE, {});
  t.strictSame(sentinel.store.sentinel, { name: 'mymaster', nodes: ['redis://h1:26379'] });
});

t.test('store.cluster and store.sentinel together: one problem naming both', async (t) => {
  t.strictSame(problems('store:\n  type: redis\n  cluster: { nodes: ["redis://h1:7000"] }\n  sentinel: { name: m, nodes: ["redis://h1:26379"] }\n'), [
    `${FILE}:7: store.sentinel: store.cluster and store.sentinel exclude each other: set one of them`,
  ]);
});

t.test('a topology needs store.type redis', async (t) => {
  t.strictSame(problems('store:\n  cluster: { nodes: ["redis://h1:7000"] }\n'), [`${FILE}:5: store.cluster: store.cluster needs store.type: redis`]);
});

t.test('nodes must log in the same way, have no database, and parse', async (t) => {
  t.strictSame(problems('store:\n  type: redis\n  cluster:\n    nodes:\n      - redis://:a@h1:7000\n      - redis://:b@h2:7000\n      - rediss://:a@h3:7000\n      - redis://:a@h4:7000/2\n      - "redis://:a@h5:port"\n'), [
    `${FILE}:9: store.cluster.nodes[1]: expected the same scheme, user and password as store.cluster.nodes[0]`,
    `${FILE}:10: store.cluster.nodes[2]: expected the same scheme, user and password as store.cluster.nodes[0]`,
    `${FILE}:11: store.cluster.nodes[3]: expected no database in a cluster node URL`,
    `${FILE}:12: store.cluster.nodes[4]: expected a redis://host:port or rediss://host:port URL`,
  ]);
  t.strictSame(problems('store:\n  type: redis\n  sentinel: { name: "", nodes: [] }\n'), [
    `${FILE}:6: store.sentinel.name: expected at least 1 characters`,
    `${FILE}:6: store.sentinel.nodes: expected at least 1 item(s)`,
  ]);
});

t.test('store.tls: its files are checked at load, and it must apply to a rediss:// connection', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'gw-tls-config-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const ca = join(dir, 'ca.pem');
  writeFileSync(ca, 'not read here');
  const loaded = parseConfig(`${REPLICA}store:\n  type: redis\n  url: rediss://h:6380\n  tls: { ca: "${ca}", servername: redis.internal }\n`, FILE, {});
  t.strictSame(loaded.store.tls, { ca, servername: 'redis.internal', rejectUnauthorized: true }, 'verification is on by default');
  const missing = join(dir, 'nope.pem');
  t.strictSame(problems(`store:\n  type: redis\n  url: rediss://h:6380\n  tls:\n    ca: "${missing}"\n    cert: "${ca}"\n`), [
    `${FILE}:8: store.tls.ca: cannot read ${missing}: no such file`,
    `${FILE}:9: store.tls.cert: store.tls.cert needs store.tls.key`,
  ]);
  t.strictSame(problems(`store:\n  type: redis\n  url: redis://h:6379\n  tls: { ca: "${ca}" }\n`), [
    `${FILE}:7: store.tls: store.tls applies to rediss:// connections only, and none is configured: write rediss:// in the store URLs`,
  ]);
  t.strictSame(problems(`store:\n  type: redis\n  url: redis://h:6379\n  sentinel: { name: m, nodes: ["rediss://s1:26379"] }\n  tls: { ca: "${ca}" }\n`), [], 'TLS to the sentinels only');
  t.strictSame(problems(`store:\n  type: redis\n  cluster: { nodes: ["redis://h1:7000"] }\n  url: rediss://unused:6380\n  tls: { ca: "${ca}" }\n`), [
    `${FILE}:8: store.tls: store.tls applies to rediss:// connections only, and none is configured: write rediss:// in the store URLs`,
  ], 'a cluster does not use store.url');
  t.strictSame(problems(`store:\n  tls: { ca: "${ca}" }\n`), [`${FILE}:5: store.tls: store.tls needs store.type: redis`]);
});
