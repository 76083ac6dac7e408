/**
 * `mcp-resume-gateway explain CURSOR [--session ID] [--config FILE] [--json]`: why a client got
 * (or would get) `resumed: false` (resumption/explain.ts), read from the store the configuration
 * names, with the key it names or the one agreed through that store. Reads only: no TTL is
 * extended, no secret offered, no session lost.
 *
 * Exit codes: 0 explained (whatever the answer), 2 bad usage or configuration (also a memory
 * store, which lives inside the gateway process: its admin listener explains), 1 the store does
 * not answer.
 */
import { Registry } from 'prom-client';
import type { Config } from './config/schema.js';
import { CursorCodec } from './cursor/codec.js';
import { isStoreError } from './errors.js';
import { Fleet } from './fleet/index.js';
import { createLogger, LogSecrets } from './logger.js';
import { createMetrics } from './metrics.js';
import { explainCursor, formatExplanation, type ExplainKey } from './resumption/explain.js';
import { retryWithin } from './retry.js';
import { createStore } from './store/index.js';

export const EXPLAIN_EXIT = { explained: 0, storeUnreachable: 1, usage: 2 } as const;

export async function explainCommand(config: Config, cursor: string, sessionId: string | undefined, json: boolean): Promise<number> {
  if (config.store.type === 'memory') {
    process.stderr.write(
      'store.type is memory: what it holds lives inside the gateway process; ask its admin listener instead: GET /debug/explain?cursor=...&session=...\n',
    );
    return EXPLAIN_EXIT.usage;
  }
  const secrets = new LogSecrets();
  secrets.addConfig(config);
  // Whatever the store's client has to say goes to stderr: stdout holds the explanation alone.
  const logger = createLogger('warn', { secrets, destination: process.stderr });
  const store = createStore(config.store, logger);
  const fleet = new Fleet({ config, store, metrics: createMetrics(new Registry()), logger });
  try {
    await retryWithin(config.store.connectTimeoutMs, { firstMs: 10, maxMs: 200 }, () => store.ping());
    const key = async (): Promise<ExplainKey | null> => {
      if (config.cursor.secret) return { codec: new CursorCodec(config.cursor.secret, config.cursor.previousSecrets), source: 'configured' };
      const agreed = await store.readSecret();
      return agreed === null ? null : { codec: new CursorCodec(agreed), source: 'agreed' };
    };
    // A fresh fleet knows no epoch yet: the store's are read (bindingEpoch reads them all) before
    // the owner is judged. Health is known to running gateways only: none is claimed here.
    const owners = { ownerGone: async (session: { owner: string; ownerEpoch: string }) => (await fleet.bindingEpoch(session.owner), fleet.ownerGone(session)) };
    const explanation = await explainCursor(
      { store, mode: config.resumption.mode, journal: config.resumption.journal.enabled, key, fleet: owners, health: () => undefined },
      cursor,
      sessionId,
    );
    process.stdout.write(json ? `${JSON.stringify(explanation, null, 2)}\n` : formatExplanation(explanation));
    return EXPLAIN_EXIT.explained;
  } catch (err) {
    if (!isStoreError(err)) throw err;
    process.stderr.write(`the store does not answer (within ${config.store.connectTimeoutMs} ms): nothing can be explained without it\n`);
    return EXPLAIN_EXIT.storeUnreachable;
  } finally {
    await fleet.close();
    await store.close();
  }
}
