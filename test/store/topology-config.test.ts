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
