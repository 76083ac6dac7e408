/** The store the configuration asks for. */
import type { Config } from '../config/schema.js';
import type { Logger } from '../logger.js';
import { createMemoryStore } from './memory.js';
import { createRedisStore } from './redis/index.js';
import type { Store } from './types.js';

export type { Store } from './types.js';

export function createStore(config: Config['store'], logger: Logger): Store {
  if (config.type === 'memory') return createMemoryStore();
  let lastError = '';
  return createRedisStore({
    url: config.url,
    cluster: config.cluster,
    sentinel: config.sentinel,
    keyPrefix: config.keyPrefix,
    connectTimeoutMs: config.connectTimeoutMs,
    commandTimeoutMs: config.commandTimeoutMs,
    // The client retries forever; log each distinct failure once, not once per attempt.
    onError: (err) => {
      if (err.message === lastError) return;
      lastError = err.message;
      logger.warn({ code: (err as NodeJS.ErrnoException).code, err: err.message }, 'store connection error');
    },
  });
}
