/** What a test asks of the demo replica (demo/src/replica.ts) about its tool calls and sessions. */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { ReplicaProcess } from './replicas.js';

export interface ToolCalls {
  [tool: string]: { started: number; finished: number };
}

/** The replica's count of each tool's calls, started and answered (its /healthz). */
export async function toolCalls(replica: ReplicaProcess): Promise<ToolCalls> {
  const health = (await (await fetch(new URL('/healthz', replica.url))).json()) as { toolCalls: ToolCalls };
  return health.toolCalls;
}

/** The replica that owns the client's session. */
export async function ownerOf(client: Client, replicas: readonly ReplicaProcess[]): Promise<ReplicaProcess> {
  const result = await client.callTool({ name: 'whoami', arguments: {} });
  const id = (result.structuredContent as { replica: string }).replica;
  const owner = replicas.find((r) => r.id === id);
  if (owner === undefined) throw new Error(`whoami answered ${id}, not one of the replicas`);
  return owner;
}
