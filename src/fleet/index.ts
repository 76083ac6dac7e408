/**
 * The replica fleet: which replicas take new sessions (health.ts, fed by probe.ts and by what
 * requests see), which one a new session goes to (balancer.ts), and each replica's fleet-wide
 * epoch (epochs.ts). The Fleet composes them and does the I/O, logging and metrics around them.
 */
import type { Config, ReplicaConfig } from '../config/schema.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import type { Store } from '../store/types.js';
import { Balancer, SessionTally } from './balancer.js';
import { cachedEpoch, EpochCache, type CachedEpoch } from './epochs.js';
import { INITIAL_HEALTH, nextHealth, type Health, type HealthState, type Observation, type Thresholds } from './health.js';
import { Prober } from './probe.js';

export type { Health } from './health.js';

interface ReplicaState {
  config: ReplicaConfig;
  health: HealthState;
  epoch: CachedEpoch;
  /** The process identity its probes last saw (health.instanceHeader), if any. */
  instance: string | undefined;
  sessions: SessionTally;
}

/** confirmAlive: a probe cut under it is tried this often, this far apart (250 ms in all). */
const CONFIRM_ATTEMPTS = 5;
const CONFIRM_BACKOFF_MS = 50;

export interface FleetOptions {
  config: Pick<Config, 'replicas' | 'balancer' | 'health' | 'sessions'>;
  store: Store;
  metrics: Metrics;
  logger: Logger;
  now?: () => number;
}

export class Fleet {
  readonly #replicas = new Map<string, ReplicaState>();
  readonly #epochs: EpochCache;
  readonly #balancer = new Balancer();
  readonly #prober: Prober;
  readonly #metrics: Metrics;
  readonly #logger: Logger;
  readonly #now: () => number;
  #config: FleetOptions['config'];
  #timer: NodeJS.Timeout | undefined;
  #ticking: Promise<void> | undefined;

  constructor(options: FleetOptions) {
    this.#config = options.config;
    this.#epochs = new EpochCache(options.store, options.logger);
    this.#metrics = options.metrics;
    this.#logger = options.logger;
    this.#now = options.now ?? Date.now;
    this.#prober = new Prober(options.config.health.timeoutMs);
    this.#apply(options.config.replicas);
  }

  get(id: string): ReplicaConfig | undefined {
    return this.#replicas.get(id)?.config;
  }

  health(id: string): Health | undefined {
    return this.#replicas.get(id)?.health.status;
  }

  /** The epoch a session bound now is recorded under. */
  epoch(id: string): string {
    return this.#replicas.get(id)?.epoch.epoch ?? '';
  }

  anyUp(): boolean {
    return [...this.#replicas.values()].some((r) => r.health.status !== 'down');
  }

  /** A replica for a new session, skipping those already tried (see balancer.ts). */
  pick(tried: ReadonlySet<string>): ReplicaConfig | undefined {
    const policy = this.#config.balancer;
    const oldest = this.#now() - this.#config.sessions.idleTtlMs;
    const candidates = [...this.#replicas.values()]
      .filter((r) => !tried.has(r.config.id))
      .map((r) => ({
        config: r.config,
        status: r.health.status,
        sessions: policy === 'least-sessions' ? r.sessions.count(oldest) : 0,
      }));
    return this.#balancer.pick(candidates, policy)?.config;
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
    if (replica.epoch.epoch === session.ownerEpoch) return false;
    await this.#refreshEpochs();
    return replica.epoch.epoch !== session.ownerEpoch;
  }

  /** The store told of a retirement (through any instance): sessions bound before it are lost here too. */
  epochRetired(replicaId: string, epoch: string): void {
    const replica = this.#replicas.get(replicaId);
    if (replica) this.#epochs.learn(replica.epoch, epoch);
  }

  sessionSeen(replicaId: string, sessionId: string): void {
    this.#replicas.get(replicaId)?.sessions.seen(sessionId, this.#now());
  }

  sessionEnded(replicaId: string, sessionId: string): void {
    this.#replicas.get(replicaId)?.sessions.ended(sessionId);
  }

  reportAnswer(id: string): void {
    const replica = this.#replicas.get(id);
    if (replica) this.#observe(replica, { kind: 'answered' }, 'answered a request');
  }

  /** Timeout, reset, 5xx. */
  reportSuspect(id: string, why: string): void {
    const replica = this.#replicas.get(id);
    if (replica) this.#observe(replica, { kind: 'misbehaved' }, why);
  }

  async reportRefused(id: string): Promise<void> {
    const replica = this.#replicas.get(id);
    if (replica && this.#observe(replica, { kind: 'refused' }, 'connection refused')) await this.#epochs.retire(replica.epoch);
  }

  /**
   * A stream of this replica ended as a dying process's would (R4, J4): one probe tells at once
   * whether anything still listens, so that the client's resumption, which follows at once, finds
   * a dead owner gone rather than a stream that seems to live. A cut probe is tried again
   * briefly: a killed process's connections may close before its listening socket does.
   */
  async confirmAlive(id: string): Promise<void> {
    const replica = this.#replicas.get(id);
    if (!replica) return;
    for (let attempt = 1; ; attempt++) {
      const result = await this.#prober.probe(replica.config, this.#config.health);
      if (result.refused) return this.reportRefused(id);
      if (!result.reset || attempt >= CONFIRM_ATTEMPTS) return;
      await new Promise((resolve) => setTimeout(resolve, CONFIRM_BACKOFF_MS));
    }
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
    const interval = this.#config.health.intervalMs;
    this.#config = config;
    this.#apply(config.replicas);
    // A new probe interval takes effect at once, not after the old one's next tick.
    if (this.#timer && config.health.intervalMs !== interval) {
      clearInterval(this.#timer);
      this.#timer = setInterval(() => void this.tick(), config.health.intervalMs);
      this.#timer.unref();
    }
  }

  async close(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#ticking;
    await this.#prober.close();
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
      this.#replicas.set(config.id, {
        config,
        health: INITIAL_HEALTH,
        epoch: cachedEpoch(config.id),
        instance: undefined,
        sessions: new SessionTally(),
      });
      this.#metrics.replicaUp.set({ replica: config.id }, 1);
    }
  }

  async #probe(replica: ReplicaState): Promise<void> {
    const health = this.#config.health;
    const result = await this.#prober.probe(replica.config, health);
    if (result.instance !== undefined) await this.#checkInstance(replica, result.instance);
    if (!this.#replicas.has(replica.config.id)) return;
    if (result.inconclusive) {
      // CONTRACT.md §7: a replica is not held to this gateway's own lateness.
      this.#logger.warn({ replica: replica.config.id, why: result.why }, 'probe inconclusive');
    } else if (this.#observe(replica, { kind: 'probe', ok: result.ok }, result.why, health)) {
      await this.#epochs.retire(replica.epoch);
    }
    await this.#epochs.retryPending(replica.epoch);
  }

  /**
   * A replica that restarted between two probes (without a probe or request seeing it refuse)
   * is another process: the sessions of the old one are lost, whatever the new one would say.
   */
  async #checkInstance(replica: ReplicaState, seen: string): Promise<void> {
    const before = replica.instance;
    replica.instance = seen;
    if (before === undefined || before === seen) return;
    this.#logger.warn({ replica: replica.config.id }, 'replica restarted (its instance changed): its sessions are lost');
    await this.#epochs.retire(replica.epoch);
  }

  #refreshEpochs(): Promise<void> {
    return this.#epochs.refresh([...this.#replicas.values()].map((r) => r.epoch));
  }

  /** Applies one observation; true when it took the replica down (its epoch is then to be retired). */
  #observe(replica: ReplicaState, observation: Observation, why: string, thresholds: Thresholds = this.#config.health): boolean {
    const from = replica.health.status;
    replica.health = nextHealth(replica.health, observation, thresholds);
    const to = replica.health.status;
    if (from === to) return false;
    // Coming back is good news; going suspect or down is what an operator looks for.
    this.#logger[to === 'up' ? 'info' : 'warn']({ replica: replica.config.id, from, to, why }, 'replica health changed');
    if (to === 'down') replica.sessions.clear();
    this.#metrics.replicaUp.set({ replica: replica.config.id }, to === 'down' ? 0 : 1);
    return to === 'down';
  }
}
