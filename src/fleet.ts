/**
 * The replica fleet: which replicas take new sessions (health), which one a new session goes to
 * (balancer), and each replica's fleet-wide epoch (R4: a replica declared gone gets a new epoch in
 * the store, and every session bound under the old one is lost, on every gateway instance).
 *
 * Health has three states. `up` takes new sessions. `suspect` misbehaved (timeout, reset, 5xx):
 * requests for its sessions get 503 until it answers again. `down` refused connections or failed
 * `unhealthyThreshold` probes in a row: it is gone, its epoch is retired.
 */
import { randomBytes } from 'node:crypto';
import { Agent, request } from 'undici';
import type { Config, ReplicaConfig } from './config/schema.js';
import type { Logger } from './logger.js';
import type { Metrics } from './metrics.js';
import type { Store } from './store/types.js';

export type Health = 'up' | 'suspect' | 'down';

interface ReplicaState {
  config: ReplicaConfig;
  health: Health;
  failures: number;
  successes: number;
  /** The epoch known to this instance; '' until the replica is first declared gone. */
  epoch: string;
  /** Declared gone while the store could not be told: retried at every tick. */
  retirePending: boolean;
  /** The process identity its probes last saw (health.instanceHeader), if any. */
  instance: string | undefined;
  /** Sessions this instance bound to it and saw alive within the idle TTL (least-sessions). */
  sessions: Map<string, number>;
}

export interface FleetOptions {
  config: Pick<Config, 'replicas' | 'balancer' | 'health' | 'sessions'>;
  store: Store;
  metrics: Metrics;
  logger: Logger;
  now?: () => number;
}

export class Fleet {
  readonly #replicas = new Map<string, ReplicaState>();
  readonly #store: Store;
  readonly #metrics: Metrics;
  readonly #logger: Logger;
  readonly #now: () => number;
  readonly #probes: Agent;
  #config: FleetOptions['config'];
  #next = 0;
  #timer: NodeJS.Timeout | undefined;
  #ticking: Promise<void> | undefined;

  constructor(options: FleetOptions) {
    this.#config = options.config;
    this.#store = options.store;
    this.#metrics = options.metrics;
    this.#logger = options.logger;
    this.#now = options.now ?? Date.now;
    const timeout = options.config.health.timeoutMs;
    this.#probes = new Agent({ connect: { timeout }, headersTimeout: timeout, bodyTimeout: timeout, connections: 2 });
    this.#apply(options.config.replicas);
  }

  get(id: string): ReplicaConfig | undefined {
    return this.#replicas.get(id)?.config;
  }

  health(id: string): Health | undefined {
    return this.#replicas.get(id)?.health;
  }

  /** The epoch a session bound now is recorded under. */
  epoch(id: string): string {
    return this.#replicas.get(id)?.epoch ?? '';
  }

  anyUp(): boolean {
    return [...this.#replicas.values()].some((r) => r.health !== 'down');
  }

  snapshot(): { id: string; health: Health }[] {
    return [...this.#replicas.values()].map((r) => ({ id: r.config.id, health: r.health }));
  }

  /**
   * A replica for a new session, skipping those already tried: an `up` one by the balancer, else
   * a `suspect` one (better than refusing while it may answer). None when every replica is down.
   */
  pick(tried: ReadonlySet<string>): ReplicaConfig | undefined {
    const candidates = [...this.#replicas.values()].filter((r) => !tried.has(r.config.id));
    const up = candidates.filter((r) => r.health === 'up');
    const pool = up.length > 0 ? up : candidates.filter((r) => r.health === 'suspect');
    if (pool.length === 0) return undefined;
    if (this.#config.balancer === 'least-sessions') {
      this.#pruneSessions();
      return pool.reduce((best, r) => (r.sessions.size < best.sessions.size ? r : best)).config;
    }
    const chosen = pool[this.#next++ % pool.length];
    return chosen?.config;
  }

  /**
   * The epoch a session bound now is recorded under, read from the store: an instance's cached
   * epoch may be older than another instance's retirement, and a session bound under a retired
   * epoch would be lost at birth. Rejects with a StoreError.
   */
  async bindingEpoch(id: string): Promise<string> {
    await this.#refreshEpochs();
    return this.epoch(id);
  }

  /**
   * Whether the session's owner is gone (R4): left the configuration, or its epoch was retired
   * after the session was bound. The store decides, not this instance's cache: a mismatch is
   * checked against the store's epochs before the session is declared lost. Rejects with a
   * StoreError.
   */
  async ownerGone(session: { owner: string; ownerEpoch: string }): Promise<boolean> {
    const replica = this.#replicas.get(session.owner);
    if (!replica) return true;
    if (replica.epoch === session.ownerEpoch) return false;
    await this.#refreshEpochs();
    return replica.epoch !== session.ownerEpoch;
  }

  sessionSeen(replicaId: string, sessionId: string): void {
    this.#replicas.get(replicaId)?.sessions.set(sessionId, this.#now());
  }

  sessionEnded(replicaId: string, sessionId: string): void {
    this.#replicas.get(replicaId)?.sessions.delete(sessionId);
  }

  /** The replica answered: whatever it did before (or another process at its address), it is there. */
  reportAnswer(id: string): void {
    const replica = this.#replicas.get(id);
    if (replica && replica.health !== 'up') this.#setHealth(replica, 'up', 'answered a request');
  }

  /** Timeout, reset, 5xx: the replica is there but misbehaves. */
  reportSuspect(id: string, why: string): void {
    const replica = this.#replicas.get(id);
    if (replica?.health === 'up') this.#setHealth(replica, 'suspect', why);
  }

  /** Connection refused: nothing listens there, the process that held its sessions is gone. */
  async reportRefused(id: string): Promise<void> {
    const replica = this.#replicas.get(id);
    if (!replica) return;
    replica.successes = 0;
    if (replica.health !== 'down') await this.#declareGone(replica, 'connection refused');
  }

  start(): void {
    if (this.#timer) return;
    void this.tick();
    this.#timer = setInterval(() => void this.tick(), this.#config.health.intervalMs);
    this.#timer.unref();
  }

  /** One round: probe every replica, refresh the epochs, retry pending retirements. */
  tick(): Promise<void> {
    this.#ticking ??= Promise.all([
      ...[...this.#replicas.values()].map((r) => this.#probe(r)),
      this.#refreshEpochs().catch((err: unknown) => this.#logger.warn({ err }, 'cannot refresh replica epochs')),
    ])
      .then(() => undefined)
      .finally(() => {
        this.#ticking = undefined;
      });
    return this.#ticking;
  }

  /** Applies a new replica list: new replicas join, removed ones are forgotten. */
  reconfigure(config: FleetOptions['config']): void {
    this.#config = config;
    this.#apply(config.replicas);
  }

  async close(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#ticking;
    await this.#probes.close();
  }

  #apply(replicas: readonly ReplicaConfig[]): void {
    const ids = new Set(replicas.map((r) => r.id));
    for (const id of this.#replicas.keys()) {
      if (!ids.has(id)) {
        this.#replicas.delete(id);
        this.#metrics.replicaUp.remove(id);
      }
    }
    for (const config of replicas) {
      const existing = this.#replicas.get(config.id);
      if (existing) {
        existing.config = config;
        continue;
      }
      // Optimistic until a probe or a request says otherwise, so that a starting gateway serves.
      const state: ReplicaState = {
        config,
        health: 'up',
        failures: 0,
        successes: 0,
        epoch: '',
        retirePending: false,
        instance: undefined,
        sessions: new Map(),
      };
      this.#replicas.set(config.id, state);
      this.#metrics.replicaUp.set({ replica: config.id }, 1);
    }
  }

  async #probe(replica: ReplicaState): Promise<void> {
    const { path, expectStatus, timeoutMs, unhealthyThreshold, healthyThreshold, instanceHeader } = this.#config.health;
    const target = path ? new URL(path, replica.config.url) : new URL(replica.config.url);
    let ok: boolean;
    let why: string;
    try {
      const response = await request(target, {
        method: 'GET',
        dispatcher: this.#probes,
        signal: AbortSignal.timeout(timeoutMs),
        headers: { accept: 'application/json, text/event-stream' },
      });
      await response.body.dump();
      ok = expectStatus.length === 0 || expectStatus.includes(response.statusCode);
      why = `probe answered ${response.statusCode}`;
      if (instanceHeader) await this.#checkInstance(replica, response.headers[instanceHeader.toLowerCase()]);
    } catch (err) {
      ok = false;
      why = `probe failed: ${(err as { code?: string }).code ?? String(err)}`;
    }
    if (!this.#replicas.has(replica.config.id)) return;
    if (ok) {
      replica.failures = 0;
      replica.successes++;
      if (replica.health === 'suspect' || (replica.health === 'down' && replica.successes >= healthyThreshold)) {
        this.#setHealth(replica, 'up', why);
      }
    } else {
      replica.successes = 0;
      replica.failures++;
      if (replica.health !== 'down' && replica.failures >= unhealthyThreshold) await this.#declareGone(replica, why);
    }
    if (replica.retirePending) await this.#retire(replica);
  }

  /**
   * A replica that restarted between two probes (without a probe or request seeing it refuse)
   * is another process: the sessions of the old one are lost, whatever the new one would say.
   */
  async #checkInstance(replica: ReplicaState, header: string | string[] | undefined): Promise<void> {
    const seen = Array.isArray(header) ? header[0] : header;
    if (seen === undefined) return;
    const before = replica.instance;
    replica.instance = seen;
    if (before === undefined || before === seen) return;
    this.#logger.warn({ replica: replica.config.id }, 'replica restarted (its instance changed): its sessions are lost');
    replica.retirePending = true;
    await this.#retire(replica);
  }

  async #declareGone(replica: ReplicaState, why: string): Promise<void> {
    this.#setHealth(replica, 'down', why);
    replica.retirePending = true;
    await this.#retire(replica);
  }

  /** Retires the replica's epoch in the store, once across the fleet (compare-and-set). */
  async #retire(replica: ReplicaState): Promise<void> {
    const next = randomBytes(9).toString('base64url');
    try {
      replica.epoch = await this.#store.retireReplicaEpoch(replica.config.id, replica.epoch, next);
      replica.retirePending = false;
      this.#logger.warn({ replica: replica.config.id }, 'replica declared gone: its sessions are lost');
    } catch (err) {
      this.#logger.error({ err, replica: replica.config.id }, 'cannot record that the replica is gone; retrying');
    }
  }

  async #refreshEpochs(): Promise<void> {
    const epochs = await this.#store.replicaEpochs();
    for (const replica of this.#replicas.values()) {
      if (!replica.retirePending) replica.epoch = epochs[replica.config.id] ?? '';
    }
  }

  #setHealth(replica: ReplicaState, health: Health, why: string): void {
    if (replica.health === health) return;
    this.#logger.info({ replica: replica.config.id, from: replica.health, to: health, why }, 'replica health changed');
    replica.health = health;
    if (health === 'down') replica.sessions.clear();
    this.#metrics.replicaUp.set({ replica: replica.config.id }, health === 'down' ? 0 : 1);
  }

  #pruneSessions(): void {
    const oldest = this.#now() - this.#config.sessions.idleTtlMs;
    for (const replica of this.#replicas.values()) {
      for (const [id, seen] of replica.sessions) if (seen < oldest) replica.sessions.delete(id);
    }
  }
}
