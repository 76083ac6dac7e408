/** The store the configuration asks for. */
import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import { unreadableFile } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { GatewayError } from '../errors.js';
import type { Logger } from '../logger.js';
import { createMemoryStore } from './memory.js';
import type { StoreTls } from './redis/connection.js';
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
    tls: config.tls === undefined ? undefined : readTls(config.tls),
    keyPrefix: config.keyPrefix,
    connectTimeoutMs: config.connectTimeoutMs,
    commandTimeoutMs: config.commandTimeoutMs,
    autoPipelining: config.autoPipelining,
    // The client retries forever; log each distinct failure once, not once per attempt.
    onError: (err) => {
      if (err.message === lastError) return;
      lastError = err.message;
      logger.warn({ code: (err as NodeJS.ErrnoException).code, err: err.message }, 'store connection error');
    },
  });
}

/**
 * store.tls with its files read, at start (a certificate rotated on disk is used from the next
 * start); a file that cannot be read, or that is not a certificate or key, is a configuration error.
 */
function readTls(tls: NonNullable<Config['store']['tls']>): StoreTls {
  const read = (key: 'ca' | 'cert' | 'key'): { [k in typeof key]?: Buffer } => {
    const file = tls[key];
    if (file === undefined) return {};
    try {
      return { [key]: readFileSync(file) };
    } catch {
      throw new GatewayError('GW_CONFIG_INVALID', `store.tls.${key}: ${unreadableFile(file) ?? `cannot read ${file}`}`);
    }
  };
  const options: StoreTls = {
    ...read('ca'),
    ...read('cert'),
    ...read('key'),
    ...(tls.servername === undefined ? {} : { servername: tls.servername }),
    rejectUnauthorized: tls.rejectUnauthorized,
  };
  try {
    // What each connection would find wrong, found once now: not PEM, a key that is not the certificate's.
    createSecureContext(options);
  } catch (err) {
    throw new GatewayError('GW_CONFIG_INVALID', `store.tls: the files ${[tls.ca, tls.cert, tls.key].filter((f) => f !== undefined).join(', ')} do not make a TLS context: ${(err as Error).message}`);
  }
  return options;
}
