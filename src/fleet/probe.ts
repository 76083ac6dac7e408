/** Health probes: one GET to a replica, on its own connection pool, bounded by the probe timeout. */
import { Agent, request } from 'undici';
import type { Config, ReplicaConfig } from '../config/schema.js';

export interface ProbeResult {
  ok: boolean;
  /** Why, for the log line of a health change. */
  why: string;
  /** The process identity the replica answered with (health.instanceHeader), if any. */
  instance: string | undefined;
}

export class Prober {
  readonly #agent: Agent;

  constructor(timeoutMs: number) {
    // Probes never queue behind requests, nor requests behind probes.
    this.#agent = new Agent({ connect: { timeout: timeoutMs }, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, connections: 2 });
  }

  async probe(replica: ReplicaConfig, health: Config['health']): Promise<ProbeResult> {
    const { path, expectStatus, timeoutMs, instanceHeader } = health;
    const target = path ? new URL(path, replica.url) : new URL(replica.url);
    try {
      const response = await request(target, {
        method: 'GET',
        dispatcher: this.#agent,
        signal: AbortSignal.timeout(timeoutMs),
        headers: { accept: 'application/json, text/event-stream' },
      });
      await response.body.dump();
      const header = instanceHeader ? response.headers[instanceHeader.toLowerCase()] : undefined;
      return {
        ok: expectStatus.length === 0 || expectStatus.includes(response.statusCode),
        why: `probe answered ${response.statusCode}`,
        instance: Array.isArray(header) ? header[0] : header,
      };
    } catch (err) {
      return { ok: false, why: `probe failed: ${(err as { code?: string }).code ?? String(err)}`, instance: undefined };
    }
  }

  close(): Promise<void> {
    return this.#agent.close();
  }
}
