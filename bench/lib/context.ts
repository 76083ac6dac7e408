/** What every workload is given (the load generator, the proxies' settings, the store) and returns (rows). */
import type { LoadClient } from './client.js';
import type { ProxyOptions, RedisServer } from './targets.js';

export interface Row {
  workload: string;
  target: string;
  metric: string;
  value: number;
  note?: string;
}

export interface Context {
  load: LoadClient;
  proxy: Omit<ProxyOptions, 'upstreams'>;
  redis: RedisServer | undefined;
  log: (line: string) => void;
}
