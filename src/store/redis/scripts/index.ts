/** Every script of the store, defined once on the client (EVALSHA, loading it on NOSCRIPT). */

import type { Cluster, Redis } from 'ioredis';
import { defineAccessScripts, type AccessScripts } from './access.js';
import { defineFleetScripts, type FleetScripts } from './fleet.js';
import { defineIncarnationScripts, type IncarnationScripts } from './incarnation.js';
import { defineRecordEventsScripts, type RecordEventsScripts } from './record-events.js';
import { defineSessionScripts, type SessionScripts } from './session.js';

/** The client once the scripts are defined on it (defineCommand adds these methods at run time). */
export type ScriptedClient = (Redis | Cluster) & SessionScripts & IncarnationScripts & RecordEventsScripts & FleetScripts & AccessScripts;

export function defineScripts(client: Redis | Cluster): ScriptedClient {
  defineSessionScripts(client);
  defineIncarnationScripts(client);
  defineRecordEventsScripts(client);
  defineFleetScripts(client);
  defineAccessScripts(client);
  return client as ScriptedClient;
}
