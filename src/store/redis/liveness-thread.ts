/**
 * The thread that renews an instance's liveness in Redis (docs/journal.md#instance-liveness), over
 * a connection of its own: no record write queued on the store's connection, and no work on the
 * instance's event loop, delays it. It renews while the instance's loop beats ('beat', every
 * period): a loop stalled by a burst of work still holds its streams, and reads them once it runs
 * again; one that has not beaten for maxStallMs is taken as hung, and its liveness lapses.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { renewOnSchedule } from '../renewals.js';
import { createRunner } from './command.js';
import { connect } from './connection.js';
import type { LivenessThreadData, ToLiveness } from './liveness.js';

const data = workerData as LivenessThreadData;
const port = parentPort!;
const connection = connect(data.connection);
// The store's own connection reports the outage; this one only stops renewing meanwhile.
connection.on('error', () => undefined);
const run = createRunner(connection, data.connection);
let beat = performance.now();

const renew = async (): Promise<boolean> => {
  if (performance.now() - beat > data.maxStallMs) return false;
  await run('renewInstance', () => connection.set(data.key, '1', 'PX', data.ttlMs));
  return true;
};
const stop = renewOnSchedule(renew, data.everyMs, (lateMs) => port.postMessage({ lateMs }));

port.on('message', (message: ToLiveness) => {
  if (message === 'beat') {
    beat = performance.now();
    return;
  }
  stop();
  void run('withdrawInstance', () => connection.del(data.key))
    .catch(() => undefined)
    .finally(() => {
      connection.disconnect();
      port.close();
    });
});
