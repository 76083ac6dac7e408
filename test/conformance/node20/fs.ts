/**
 * `fs` as the conformance CLI imports it on Node 20, where `fs.globSync` (Node 22) is missing:
 * everything of node:fs, and a `globSync` that says why it cannot run. The CLI calls it only in
 * `tier-check`, which the suite does not run.
 */
import fs from 'node:fs';

export * from 'node:fs';
export default fs;

export function globSync(): never {
  throw new Error('fs.globSync needs Node 22: the conformance tier-check cannot run on Node 20');
}
