/**
 * A real gateway in this process: configuration through the same schema and defaults as the CLI,
 * real listeners on loopback port 0, a real store, closed on teardown.
 */
import { Registry } from 'prom-client';
import { stringify } from 'yaml';
import { parseConfig } from '../../src/config/load.js';
import type { Config } from '../../src/config/schema.js';
import { createLogger } from '../../src/logger.js';
import { buildServer, type Gateway } from '../../src/server.js';
import { createStore } from '../../src/store/index.js';
import type { Store } from '../../src/store/types.js';
import type { Tracing } from '../../src/tracing/index.js';

export interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface RunningGateway {
  gateway: Gateway;
  config: Config;
  /** The MCP endpoint, e.g. http://127.0.0.1:41234/mcp */
  url: string;
  adminUrl: string;
  registry: Registry;
  close(): Promise<void>;
}

/** A configuration from a partial object, validated and defaulted like a file. */
export function testConfig(partial: Record<string, unknown>): Config {
  const base = {
    listen: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    // Probes stay out of the way unless a test wants them: faults come from requests.
    health: { intervalMs: 60_000 },
    log: { level: process.env['GW_TEST_LOG'] ?? 'silent' },
  };
  return parseConfig(stringify({ ...base, ...partial }), 'test.yaml', {});
}

export async function startGateway(t: Teardown, partial: Record<string, unknown>, store?: Store, tracing?: Tracing): Promise<RunningGateway> {
  const config = testConfig(partial);
  const logger = createLogger(config.log.level);
  const registry = new Registry();
  const gateway = buildServer(config, { store: store ?? createStore(config.store, logger), registry, logger, tracing });
  const { mcpUrl, adminUrl } = await gateway.listen();
  let closed: Promise<void> | undefined;
  const close = () => (closed ??= gateway.close());
  t.teardown(close);
  return { gateway, config, url: `${mcpUrl}${config.path}`, adminUrl, registry, close };
}

/** The sum of the samples of a metric whose labels include `labels`; 0 when there are none. */
export async function metricValue(registry: Registry, name: string, labels: Record<string, string> = {}): Promise<number> {
  const metric = await registry.getSingleMetric(name)?.get();
  const samples = (metric?.values ?? []).filter((v) => Object.entries(labels).every(([k, want]) => String(v.labels[k]) === want));
  return samples.reduce((sum, v) => sum + v.value, 0);
}
