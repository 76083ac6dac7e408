/**
 * The session bindings this instance routes by (R2, R3), cached so that a request of a known
 * session needs no store round trip. The store stays the authority (R3): a cached binding outlives
 * the store's record by one health tick (health.intervalMs) at most.
 *
 * - A session that ends, through any instance, and an owner's epoch that is retired leave the
 *   cache at once: the store tells every instance (Store.watchBindings), and this instance forgets
 *   what it ends itself before it answers.
 * - Notes can be missed, and a store can lose its data without a word. So a binding routes only
 *   while the store confirmed it within the last health tick: every half tick, one batched read
 *   confirms the bindings routed by since their last confirmation, and one that went unconfirmed
 *   (unused, or the store did not answer) is read again before it routes.
 * - The store's connection dropping, or its notes, drops the whole cache at once; a new store
 *   generation (it came back empty, a failover to an empty replica) drops it within the half tick.
 * - The idle TTL slides in the store at most once per quarter of it, in those batched reads.
 *
 * Resumptions read the store themselves (resumption/resume.ts): they are rare and must be exact.
 */
import { randomBytes } from 'node:crypto';
import type { Config } from '../config/schema.js';
import type { Fleet } from '../fleet/index.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import type { BindingNote, SessionRecord, Store } from '../store/types.js';

export interface BindingsDeps {
  config: () => Config;
  store: Store;
  fleet: Fleet;
  metrics: Metrics;
  logger: Logger;
}

interface Entry {
  readonly record: SessionRecord;
  /** When the read that last found it active was sent (performance.now()). */
  confirmedAt: number;
  /** When the read that last extended its idle TTL in the store was sent. */
  touchedAt: number;
  /** When it last routed a request. */
  usedAt: number;
}

/** The idle TTL is extended once this fraction of it has passed since it last was. */
const TOUCH_FRACTION = 1 / 4;
/**
 * A binding whose TTL was last extended this fraction of it ago is read again before it routes: the
 * store's record may be close to expiring (only with an idle TTL of a few health ticks).
 */
const TOUCH_LIMIT = 1 / 2;
/** Most sessions read in one store operation of a confirmation round. */
const ROUND_BATCH = 1000;

export class BindingCache {
  readonly #deps: BindingsDeps;
  /** Least recently used first. */
  readonly #entries = new Map<string, Entry>();
  readonly #results;
  /** Whether notes reach this instance: nothing is cached while they may be missed. */
  #flowing = false;
  /** Bumped whenever a binding may have changed: a read sent before a bump caches nothing. */
  #changes = 0;
  #generation: string | undefined;
  #timer: NodeJS.Timeout | undefined;
  #round: Promise<void> | undefined;
  #unwatch: (() => void) | undefined;

  constructor(deps: BindingsDeps) {
    this.#deps = deps;
    const counter = deps.metrics.bindingCache;
    this.#results = {
      hit: counter.labels('hit'),
      miss: counter.labels('miss'),
      invalidated: counter.labels('invalidated'),
      evicted: counter.labels('evicted'),
      dropped: counter.labels('dropped'),
    };
  }

  /** Listens to the store's notes and confirms cached bindings every half health tick. */
  start(): void {
    if (this.#unwatch) return;
    this.#unwatch = this.#deps.store.watchBindings({
      changed: (note) => this.#changed(note),
      flowing: (on) => {
        this.#dropAll();
        this.#flowing = on;
      },
      reset: () => this.#dropAll(),
    });
    this.#schedule();
  }

  async close(): Promise<void> {
    this.#unwatch?.();
    this.#unwatch = undefined;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#round;
    this.#dropAll();
  }

  /**
   * The session's record: a cached active binding, or what the store holds (extending an active
   * session's idle TTL when it is due). Rejects with a StoreError.
   */
  async lookup(sessionId: string): Promise<SessionRecord | null> {
    const config = this.#deps.config();
    const caching = config.store.bindingCache.maxEntries > 0;
    const entry = caching ? this.#entries.get(sessionId) : undefined;
    const now = performance.now();
    if (entry !== undefined && this.#fresh(entry, now, config)) {
      entry.usedAt = now;
      this.#entries.delete(sessionId);
      this.#entries.set(sessionId, entry);
      this.#results.hit.inc();
      return entry.record;
    }
    if (caching) this.#results.miss.inc();
    const { idleTtlMs } = config.sessions;
    const changes = this.#changes;
    // A binding only unconfirmed for a while is read as it stands, unless its TTL is due anyway.
    const touch = entry === undefined || now - entry.touchedAt >= idleTtlMs * TOUCH_FRACTION;
    const record = touch
      ? await this.#deps.store.touchSession(sessionId, idleTtlMs)
      : ((await this.#deps.store.refreshSessions([{ sessionId, touch }], idleTtlMs))[0] ?? null);
    if (caching) this.#remember(sessionId, record, changes, { sentAt: now, touchedAt: touch ? now : entry!.touchedAt });
    return record;
  }

  /** This instance ended the session (DELETE, or lost): it never routes from the cache again. */
  forget(sessionId: string): void {
    this.#changes++;
    this.#invalidate(sessionId);
  }

  /** Whether `entry` may route now: confirmed within the last health tick, its TTL not near its end. */
  #fresh(entry: Entry, now: number, config: Config): boolean {
    return now - entry.confirmedAt < config.health.intervalMs && now - entry.touchedAt < config.sessions.idleTtlMs * TOUCH_LIMIT;
  }

  #remember(sessionId: string, record: SessionRecord | null, changes: number, times: { sentAt: number; touchedAt: number }): void {
    if (record === null || record.state !== 'active' || !this.#flowing || changes !== this.#changes) {
      this.#invalidate(sessionId);
      return;
    }
    this.#entries.delete(sessionId);
    this.#entries.set(sessionId, { record, confirmedAt: times.sentAt, touchedAt: times.touchedAt, usedAt: times.sentAt });
    const max = this.#deps.config().store.bindingCache.maxEntries;
    for (const oldest of this.#entries.keys()) {
      if (this.#entries.size <= max) break;
      this.#entries.delete(oldest);
      this.#results.evicted.inc();
    }
    this.#deps.metrics.bindingCacheEntries.set(this.#entries.size);
  }

  #changed(note: BindingNote): void {
    this.#changes++;
    if (note.kind === 'ended') {
      this.#invalidate(note.sessionId);
      return;
    }
    // The fleet learns the new epoch first, so that a session read from the store next is found lost.
    this.#deps.fleet.epochRetired(note.replicaId, note.epoch);
    for (const [sessionId, entry] of this.#entries) {
      if (entry.record.owner === note.replicaId && entry.record.ownerEpoch !== note.epoch) this.#invalidate(sessionId);
    }
  }

  #invalidate(sessionId: string): void {
    if (!this.#entries.delete(sessionId)) return;
    this.#results.invalidated.inc();
    this.#deps.metrics.bindingCacheEntries.set(this.#entries.size);
  }

  #dropAll(): void {
    this.#changes++;
    if (this.#entries.size === 0) return;
    this.#results.dropped.inc(this.#entries.size);
    this.#entries.clear();
    this.#deps.metrics.bindingCacheEntries.set(0);
  }

  #schedule(): void {
    if (!this.#unwatch) return;
    // Re-armed after each round, with the interval in force then (it reloads on SIGHUP).
    this.#timer = setTimeout(() => {
      this.#round = this.#confirm().finally(() => {
        this.#round = undefined;
        this.#schedule();
      });
    }, this.#deps.config().health.intervalMs / 2);
    this.#timer.unref();
  }

  /**
   * One round: the store's generation, and every binding routed by since its last confirmation,
   * read in batches (extending the TTL of those due). A failure leaves them unconfirmed: they go
   * back to the store before they route once a health tick has passed. Store failures are counted
   * in the store metrics; /readyz reports the outage.
   */
  async #confirm(): Promise<void> {
    const config = this.#deps.config();
    const { idleTtlMs } = config.sessions;
    const sentAt = performance.now();
    const due: [string, Entry, boolean][] = [];
    for (const [sessionId, entry] of this.#entries) {
      if (entry.usedAt > entry.confirmedAt) due.push([sessionId, entry, sentAt - entry.touchedAt >= idleTtlMs * TOUCH_FRACTION]);
      // Unused and unconfirmed: it would be read again before routing anyway.
      else if (!this.#fresh(entry, sentAt, config)) this.#entries.delete(sessionId);
    }
    this.#deps.metrics.bindingCacheEntries.set(this.#entries.size);
    const batches: Promise<void>[] = [this.#checkGeneration().catch(() => undefined)];
    for (let i = 0; i < due.length; i += ROUND_BATCH) {
      const batch = due.slice(i, i + ROUND_BATCH);
      const reads = batch.map(([sessionId, , touch]) => ({ sessionId, touch }));
      const read = this.#deps.store.refreshSessions(reads, idleTtlMs).then((records) => {
        batch.forEach(([sessionId, entry, touched], j) => this.#confirmed(sessionId, entry, records[j] ?? null, sentAt, touched));
      });
      batches.push(read.catch(() => undefined));
    }
    await Promise.all(batches);
  }

  #confirmed(sessionId: string, entry: Entry, record: SessionRecord | null, sentAt: number, touched: boolean): void {
    // Dropped or replaced while the read was out: the newer state stands.
    if (this.#entries.get(sessionId) !== entry) return;
    const same = record !== null && record.state === 'active' && record.owner === entry.record.owner && record.ownerEpoch === entry.record.ownerEpoch;
    if (!same) {
      this.#invalidate(sessionId);
      return;
    }
    entry.confirmedAt = sentAt;
    if (touched) entry.touchedAt = sentAt;
  }

  /** A store that lost its data agrees on a new generation: nothing read from it before holds. */
  async #checkGeneration(): Promise<void> {
    // A fresh candidate each time: after a loss, this instance's own earlier one must not win again.
    const generation = await this.#deps.store.agreeGeneration(randomBytes(12).toString('base64url'));
    const before = this.#generation;
    this.#generation = generation;
    if (before === undefined || before === generation) return;
    this.#deps.logger.warn({ dropped: this.#entries.size }, 'the store lost its data (a new generation): cached bindings dropped');
    this.#dropAll();
  }
}
