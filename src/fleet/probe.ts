/** Health probes: one GET to a replica, on its own connection pool, bounded by the probe timeout. */
import { Agent, request } from 'undici';
import type { Config, ReplicaConfig } from '../config/schema.js';
import { isRefused, isReset } from '../upstream/index.js';
import { LoopLag } from './loop-lag.js';

export interface ProbeResult {
  ok: boolean;
  /** Why, for the log line of a health change. */
  why: string;
  /** The process identity the replica answered with (health.instanceHeader), if any. */
  instance: string | undefined;
  /** The connection was refused: nothing listens there. */
  refused: boolean;
  /** The connection was cut before an answer (a process that is being killed, say). */
  reset: boolean;
  /**
   * No answer in time, while this gateway's own event loop ran at least half the timeout late:
   * the answer may have been waiting for the loop to read it. Counts neither way.
   */
  inconclusive: boolean;
}

export class Prober {
  readonly #agent: Agent;
  readonly #lag: LoopLag;

  constructor(timeoutMs: number, lag = new LoopLag()) {
    // Probes never queue behind requests, nor requests behind probes.
    this.#agent = new Agent({ connect: { timeout: timeoutMs }, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, connections: 2 });
    this.#lag = lag;
  }

  async probe(replica: ReplicaConfig, health: Config['health']): Promise<ProbeResult> {
    const { path, expectStatus, timeoutMs, instanceHeader } = health;
    const target = path ? new URL(path, replica.url) : new URL(replica.url);
    const started = performance.now();
    try {
      const response = await request(target, {
        method: 'GET',
        dispatcher: this.#agent,
        signal: AbortSignal.timeout(timeoutMs),
        headers: { accept: 'application/json, text/event-stream' },
      });
      await response.body.dump();
      const header = instanceHeader ? response.headers[instanceHeader.toLowerCase()] : undefined;
      const ok = expectStatus.length === 0 || expectStatus.includes(response.statusCode);
      return {
        ok,
        // Without expectStatus any answer means alive (a 400 or 405 from an MCP endpoint probed
        // with a bare GET included): said so, not as if the status were a fault.
        why: ok ? `alive (probe answered ${response.statusCode})` : `probe answered ${response.statusCode}, expected ${expectStatus.join(' or ')}`,
        instance: Array.isArray(header) ? header[0] : header,
        refused: false,
        reset: false,
        inconclusive: false,
      };
    } catch (err) {
      const refused = isRefused(err);
      const reset = isReset(err);
      const late = refused || reset ? 0 : this.#lag.maxSince(started);
      const inconclusive = late >= timeoutMs / 2;
      const why = `probe failed: ${probeFailure(err)}${inconclusive ? `, while this gateway's event loop ran ${Math.round(late)} ms late: not counted` : ''}`;
      return { ok: false, why, instance: undefined, refused, reset, inconclusive };
    }
  }

  close(): Promise<void> {
    this.#lag.stop();
    return this.#agent.close();
  }
}

/** A failed probe in a few words: the error's code (ECONNREFUSED, UND_ERR_HEADERS_TIMEOUT...), never a stack. */
function probeFailure(err: unknown): string {
  const { code, name, cause } = err as { code?: unknown; name?: unknown; cause?: { code?: unknown } };
  if (typeof cause?.code === 'string') return cause.code;
  if (typeof code === 'string') return code;
  return name === 'TimeoutError' || name === 'AbortError' ? 'no answer in time' : String(err);
}
