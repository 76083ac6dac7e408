/** How many worker processes `workers` asks for here (1: the gateway runs alone, no primary). */
import { availableParallelism } from 'node:os';
import type { Config } from '../config/schema.js';

export interface WorkerCount {
  readonly count: number;
  /** Said at start and by check-config when the count is not what the key seems to ask. */
  readonly note?: string;
}

export function workerCount(config: Pick<Config, 'workers' | 'store'>): WorkerCount {
  if (config.workers !== 'auto') return { count: config.workers };
  // A memory store lives in one process: a second worker would know none of the first's sessions.
  if (config.store.type === 'memory') return { count: 1, note: 'workers: auto runs 1 worker with a memory store (sessions in memory are one process\'s)' };
  const cores = availableParallelism();
  return { count: cores, note: `workers: auto runs one per core (${cores})` };
}
