/**
 * Every socket ioredis opens gets a lasting 'error' listener. ioredis listens for a socket's first
 * error only (`stream.once('error')`); a TLS socket can emit a second one as it is torn down (a
 * handshake refused, then the server's alert: "tlsv1 alert decode error"), and an 'error' event
 * with no listener is an uncaught exception, which would end the gateway for a store it can
 * recover from (redis/ioredis#1183, #961). The first error stays ioredis's to handle (it closes
 * and reconnects); each later one is passed to the client's own 'error' event, where the store
 * logs it like any connection error.
 */

import { createRequire } from 'node:module';
import type { Duplex } from 'node:stream';

/** What a connector's connect() is told to emit on its client ('error', 'sentinelReconnecting'...). */
type ErrorEmitter = (type: string, err: Error) => void;

interface Connecting {
  connect(emitter: ErrorEmitter): Promise<Duplex>;
}

/** An ioredis connector class: made with the client's options, it opens the client's socket. */
type ConnectorClass = new (options: object) => Connecting;

/** After the socket's first error, every further one goes to `emitter` as an 'error'. */
export function keepListening(stream: Duplex, emitter: ErrorEmitter): Duplex {
  let seen = 0;
  stream.on('error', (err: Error) => {
    seen += 1;
    if (seen > 1) emitter('error', err);
  });
  return stream;
}

/** `Base` whose every socket keeps an 'error' listener for its whole life. */
export function guarded(Base: ConnectorClass): ConnectorClass {
  return class extends Base {
    override async connect(emitter: ErrorEmitter): Promise<Duplex> {
      return keepListening(await super.connect(emitter), emitter);
    }
  };
}

// ioredis exports its Sentinel connector but not the one for a single node (or a Cluster's nodes).
const require = createRequire(import.meta.url);
const { default: StandaloneConnector } = require('ioredis/built/connectors/StandaloneConnector') as { default: ConnectorClass };
const { SentinelConnector } = require('ioredis') as { SentinelConnector: ConnectorClass };

/** The connector of a single node, and of each node of a Cluster (redisOptions.Connector). */
export const GuardedStandaloneConnector = guarded(StandaloneConnector);
/** The connector of a master found through Sentinel. */
export const GuardedSentinelConnector = guarded(SentinelConnector);
