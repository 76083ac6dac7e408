/**
 * MCP servers on the SDK v2 (test/helpers/v2-replica-main.ts) as child processes, for the
 * 2026-07-28 era through the gateway.
 */
import { fileURLToPath } from 'node:url';
import { spawnChild } from './child-server.js';
import type { Teardown } from './processes.js';

const MAIN_JS = fileURLToPath(new URL('./v2-replica-main.js', import.meta.url));

export interface V2Replica {
  readonly id: string;
  readonly url: string;
  /** The replica's control endpoints (see v2-replica-main.ts). */
  state(): Promise<{ seen: Record<string, string>[]; openStreams: number }>;
  toolsChanged(): Promise<void>;
  kill(): Promise<void>;
}

export async function spawnV2Replicas(t: Teardown, count: number, idPrefix = 'v'): Promise<V2Replica[]> {
  return Promise.all(Array.from({ length: count }, (_, i) => spawnV2Replica(t, `${idPrefix}${i + 1}`)));
}

export async function spawnV2Replica(t: Teardown, id: string): Promise<V2Replica> {
  const { url, origin, proc } = await spawnChild(t, MAIN_JS, 'v2 replica', id);
  return {
    id,
    url,
    async state() {
      const response = await fetch(`${origin}/control/state`);
      return (await response.json()) as { seen: Record<string, string>[]; openStreams: number };
    },
    async toolsChanged() {
      const response = await fetch(`${origin}/control/tools-changed`, { method: 'POST' });
      await response.arrayBuffer();
    },
    async kill() {
      await proc.kill('SIGKILL');
    },
  };
}
