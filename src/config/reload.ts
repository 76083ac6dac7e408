/**
 * What a reload (SIGHUP) can change in a running gateway. Everything is applied live except what
 * is bound when the process starts: the listeners' addresses and the MCP path (sockets and routes),
 * the store (its connections and topology), and the header block size (Node's parser is made with
 * it). Those keep their running values, are named as not applied, and take effect at the next
 * start; a later reload names them again until then. The cursor keys are applied live: open
 * streams sign with the new key from their next event (cursor/keys.ts).
 */
import { isDeepStrictEqual } from 'node:util';
import type { Config } from './schema.js';

/** Key paths that need a restart, each with what keeps it from changing live. */
export const RESTART_ONLY = {
  listen: 'the MCP listener is bound to its address',
  admin: 'the admin listener is bound to its address',
  path: 'the MCP route is registered at start',
  workers: 'the worker processes are started with the gateway',
  legacySse: 'the HTTP+SSE routes are registered at start',
  store: 'the store connection and its topology are set up at start',
  tracing: 'the OpenTelemetry SDK is set up at start',
  'limits.headerBytes': "Node's HTTP parser is made with its header limit",
} as const;

export type ReloadResult = 'applied' | 'partial';

export interface ReloadPlan {
  /** The configuration to run with: `next`, with the restart-only keys at their running values. */
  readonly config: Config;
  /** Restart-only key paths whose value in the file differs from the running one. */
  readonly notApplied: readonly (keyof typeof RESTART_ONLY)[];
  /** Key paths (top-level sections) that changed and are applied now. */
  readonly applied: readonly string[];
  readonly result: ReloadResult;
}

export function planReload(running: Config, next: Config): ReloadPlan {
  const notApplied = (Object.keys(RESTART_ONLY) as (keyof typeof RESTART_ONLY)[]).filter((path) => !isDeepStrictEqual(at(running, path), at(next, path)));
  const config: Config = {
    ...next,
    listen: running.listen,
    admin: running.admin,
    path: running.path,
    workers: running.workers,
    store: running.store,
    limits: { ...next.limits, headerBytes: running.limits.headerBytes },
  };
  // legacySse, like path, keeps its running value: set or unset.
  if (running.legacySse === undefined) delete (config as { legacySse?: unknown }).legacySse;
  else Object.assign(config, { legacySse: running.legacySse });
  const applied = (Object.keys(config) as (keyof Config)[]).filter((key) => !isDeepStrictEqual(running[key], config[key]));
  return { config: Object.freeze(config), notApplied, applied, result: notApplied.length === 0 ? 'applied' : 'partial' };
}

function at(config: Config, path: string): unknown {
  return path.split('.').reduce<unknown>((value, key) => (value as Record<string, unknown> | undefined)?.[key], config);
}
