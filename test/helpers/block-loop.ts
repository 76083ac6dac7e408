/**
 * Preloaded into a gateway process (startGatewayProcess's `preload`): SIGUSR2 blocks its event
 * loop for BLOCKED_MS, as a burst of synchronous work on an overloaded instance does. The process
 * stays alive and reads on once the loop runs again; its other threads run meanwhile.
 */
import { fileURLToPath } from 'node:url';

export const BLOCKED_MS = 6000;
/** This module, as the preload to give. */
export const BLOCK_LOOP_PRELOAD = fileURLToPath(import.meta.url);

process.on('SIGUSR2', () => {
  const end = performance.now() + BLOCKED_MS;
  while (performance.now() < end);
});
