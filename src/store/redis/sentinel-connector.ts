/**
 * The connector of a master found through Sentinel: ioredis's, with every socket guarded
 * (socket-errors.ts), and a failover announcement that never ends the client.
 *
 * ioredis's failover detector (the `failoverDetector` option) listens for +switch-master on the
 * sentinels and then disconnects the connector, so that the client reconnects and asks the
 * sentinels for the new master. When the announcement comes while the connector is itself still
 * asking them (the old master is gone and the client is reconnecting: a sentinel is slow to answer,
 * or the connector pauses between rounds of them), that disconnect makes ioredis reject the attempt
 * in flight with "Connection is closed." and end the client for good: the store would answer
 * nothing again until the gateway restarted, on a master that is up. An attempt in flight asks
 * the sentinels anyway, so the announcement need only drop a connection that the connector holds.
 */

import type { Duplex } from 'node:stream';
import { GuardedSentinelConnector } from './socket-errors.js';

type ErrorEmitter = (type: string, err: Error) => void;

/** What ioredis's connector has and its types keep private. */
interface Internals {
  /** Set by initFailoverDetector (synchronously, before it subscribes): its `connector` is told of a failover. */
  failoverDetector: { connector: { disconnect(): void } } | null;
  disconnect(): void;
}

const Base = GuardedSentinelConnector as unknown as new (options: object) => {
  connect(emitter: ErrorEmitter): Promise<Duplex>;
  initFailoverDetector(): Promise<void>;
};

export class SentinelConnector extends Base {
  /** Between connect() and the stream it returns: the connector is asking the sentinels. */
  #asking = false;

  override async connect(emitter: ErrorEmitter): Promise<Duplex> {
    this.#asking = true;
    try {
      return await super.connect(emitter);
    } finally {
      this.#asking = false;
    }
  }

  override initFailoverDetector(): Promise<void> {
    const subscribed = super.initFailoverDetector();
    const self = this as unknown as Internals;
    const detector = self.failoverDetector;
    if (detector !== null) {
      detector.connector = {
        disconnect: () => {
          if (!this.#asking) self.disconnect();
        },
      };
    }
    return subscribed;
  }
}
