/**
 * MCP servers of the 2024-11-05 HTTP+SSE transport (test/helpers/legacy-replica-main.ts) as child
 * processes, for that transport through the gateway (legacySse).
 */
import { fileURLToPath } from 'node:url';
import { spawnChild } from './child-server.js';
import type { Teardown } from './processes.js';

const MAIN_JS = fileURLToPath(new URL('./legacy-replica-main.js', import.meta.url));

export interface LegacyReplica {
  readonly id: string;
  /** Its configured url: the gateway derives the SSE endpoint, /sse on its origin. */
  readonly url: string;
  state(): Promise<{ sessions: number; posts: number }>;
  kill(): Promise<void>;
}

export async function spawnLegacyReplicas(t: Teardown, count: number): Promise<LegacyReplica[]> {
  return Promise.all(Array.from({ length: count }, (_, i) => spawnLegacyReplica(t, `l${i + 1}`)));
}

export async function spawnLegacyReplica(t: Teardown, id: string): Promise<LegacyReplica> {
  const { url, origin, proc } = await spawnChild(t, MAIN_JS, 'legacy replica', id);
  return {
    id,
    url,
    async state() {
      return (await (await fetch(`${origin}/control/state`)).json()) as { sessions: number; posts: number };
    },
    async kill() {
      await proc.kill('SIGKILL');
    },
  };
}
