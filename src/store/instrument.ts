/**
 * Wraps any store so that every operation is timed and every failure counted, by operation
 * (`mcp_gateway_store_duration_seconds{op}`, `mcp_gateway_store_errors_total{op}`), in one place
 * for both implementations and for every operation the interface gains.
 */
import type { Metrics } from '../metrics.js';
import type { Tracing } from '../tracing/index.js';
import type { Store } from './types.js';

/** Not operations on the data: closing, watching notes and keeping alive (synchronous, not a round trip). */
const UNTIMED = new Set<PropertyKey>(['close', 'watchJournal', 'watchBindings', 'keepInstanceAlive']);

/** With `tracing`, each operation is also a span (tracing/sdk.ts). */
export function instrumentStore(store: Store, metrics: Metrics, tracing?: Pick<Tracing, 'storeSpan'>): Store {
  const wrappers = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, prop) {
      const value: unknown = Reflect.get(target, prop, target);
      if (typeof value !== 'function' || UNTIMED.has(prop)) return value;
      let wrapper = wrappers.get(prop);
      if (!wrapper) {
        const op = String(prop);
        const bound = value.bind(target) as (...args: unknown[]) => Promise<unknown>;
        const call = tracing === undefined ? bound : (...args: unknown[]) => tracing.storeSpan(store.kind, op, () => bound(...args));
        wrapper = async (...args: unknown[]) => {
          const end = metrics.storeTimer(op);
          try {
            return await call(...args);
          } catch (err) {
            metrics.countStoreError(op);
            throw err;
          } finally {
            end();
          }
        };
        wrappers.set(prop, wrapper);
      }
      return wrapper;
    },
  });
}
