/**
 * MCP servers behind the SDK's bearer middleware (test/helpers/auth-replica-main.ts) as child
 * processes: replicas that check a token on every request and bind each session to its user.
 */
import { fileURLToPath } from 'node:url';
import { spawnChild } from './child-server.js';
import type { Teardown } from './processes.js';

export { AUTH_TOKENS } from './auth-tokens.js';

const MAIN_JS = fileURLToPath(new URL('./auth-replica-main.js', import.meta.url));

export interface AuthReplica {
  readonly id: string;
  readonly url: string;
  kill(): Promise<void>;
}

export async function spawnAuthReplica(t: Teardown, id: string): Promise<AuthReplica> {
  const { url, proc } = await spawnChild(t, MAIN_JS, 'auth replica', id);
  return { id, url, kill: async () => void (await proc.kill('SIGKILL')) };
}
