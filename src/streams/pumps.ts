/**
 * The journaled streams this instance pumps: reads from their replica, records and journals
 * (CONTRACT.md §8). By incarnation, so that a client coming back to this instance attaches to its
 * stream in memory (J3); and the held ones among them, with no client (J2), each bounded by its
 * hold and all by resumption.journal.maxHeld.
 *
 * A held POST stream ends once every awaited response has passed (pipe.ts). A held GET stream is
 * let go after resumption.journal.holdMs, or holdMs after the last lease of a client attached
 * through another instance (touchTail), whichever is later; at once when a newer GET of its
 * session supersedes it (E4), or a new GET of the session asks it to go (releaseHeldGet, after the
 * replica's 409: held-get.ts); the oldest first when more than maxHeld are held; and the oldest
 * held GET of a replica at its stream budget when another GET of it needs the room
 * (upstream/budget.ts). A stream with a client attached is never let go so.
 */
import type { Config } from '../config/schema.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import type { IncarnationKind, IncarnationRecord, Store } from '../store/types.js';
import type { HoldOptions, SsePipe } from './pipe.js';

export interface Pump {
  readonly sessionId: string;
  readonly incarnation: string;
  readonly kind: IncarnationKind;
  /** The replica whose stream it reads. */
  readonly replica: string;
  readonly pipe: SsePipe;
}

type Key = Omit<Pump, 'pipe' | 'replica'>;

interface Hold {
  timer?: NodeJS.Timeout;
  unwatch?: () => void;
  /** Being looked at to make room in its replica's stream budget (makeRoom). */
  claimed?: true;
}

export interface PumpsDeps {
  config: () => Config;
  store: Store;
  metrics: Metrics;
  logger: Logger;
  /** This gateway instance, as a pump's lease names it. */
  instanceId: string;
  /**
   * Traces on: the trace context (traceparent) of the span a new stream runs under, kept on its
   * record when it is held, so that the span of its continuation through another instance links
   * to it. Unset: traces off, nothing more is written.
   */
  holderSpan?: (() => string | undefined) | undefined;
}

export class Pumps {
  readonly #deps: PumpsDeps;
  readonly #pumps = new Map<string, Pump>();
  /** Held pumps, oldest first (a Map keeps insertion order). */
  readonly #held = new Map<Pump, Hold>();

  constructor(deps: PumpsDeps) {
    this.#deps = deps;
  }

  /** The pump of an incarnation on this instance, while its stream runs. */
  get(incarnation: string): Pump | undefined {
    return this.#pumps.get(incarnation);
  }

  /**
   * The lease is this instance's and no pump of the stream runs here: its replica's stream has
   * ended (the lease's release may not have landed yet).
   */
  endedHere(record: Pick<IncarnationRecord, 'id' | 'pump'>): boolean {
    return record.pump === this.#deps.instanceId && !this.#pumps.has(record.id);
  }

  get heldCount(): number {
    return this.#held.size;
  }

  /** What the pipe of a new pump reports to this registry; called under the request that opens the stream. */
  holdOptions(key: Key): HoldOptions {
    const holderSpan = this.#deps.holderSpan?.();
    return {
      untilAnswered: key.kind === 'post',
      onHeld: () => {
        const pump = this.#pumps.get(key.incarnation);
        if (!pump) return;
        this.#tellHeld(pump, pump.pipe.delivered, holderSpan);
        this.#onHeld(pump);
      },
      onAttached: () => {
        const pump = this.#pumps.get(key.incarnation);
        if (!pump) return;
        this.#tellHeld(pump, undefined, holderSpan);
        this.#unhold(pump);
      },
    };
  }

  /** Registers a pump until its stream ends. */
  add(pump: Pump): void {
    this.#pumps.set(pump.incarnation, pump);
    void pump.pipe.done.then(() => {
      this.#unhold(pump);
      if (this.#pumps.get(pump.incarnation) === pump) this.#pumps.delete(pump.incarnation);
    });
  }

  /**
   * A held GET stream is taken over by the session's next plain GET, through any instance
   * (held-get.ts): the store says it is held, and from which position its next client starts.
   * A lost write only costs that GET the owner's answer (a 409 while this stream is open). A held
   * POST stream is told only with traces on, for its holder's span: nothing else reads it.
   */
  #tellHeld(pump: Pump, clientSeq: number | undefined, holderSpan: string | undefined): void {
    if (pump.kind !== 'get' && holderSpan === undefined) return;
    this.#deps.store.setHeld(pump.sessionId, pump.incarnation, this.#deps.instanceId, clientSeq, holderSpan).catch(() => undefined);
  }

  #onHeld(pump: Pump): void {
    const hold: Hold = {};
    this.#held.set(pump, hold);
    this.#deps.metrics.heldStreams.inc();
    if (pump.kind === 'get') {
      this.#arm(pump, hold, this.#deps.config().resumption.journal.holdMs);
      // Superseded by a newer GET, closed, or asked to go for a new GET of the session (which
      // then supersedes it): the replica answers the new GET 409 while this one is open.
      hold.unwatch = this.#deps.store.watchJournal(pump.sessionId, pump.incarnation, (note) => {
        if (note.kind !== 'head') this.#release(pump, 'superseded');
      });
      void this.#releaseIfSuperseded(pump, hold);
    }
    const max = this.#deps.config().resumption.journal.maxHeld;
    for (const oldest of this.#held.keys()) {
      if (this.#held.size <= max) break;
      this.#release(oldest, 'cap');
    }
  }

  /**
   * A newer GET may have superseded this stream while its client was still attached (a replica
   * that serves more than one GET stream per session opened it), before anything listened for the
   * note: a stream held only now learns of it from the store, and goes, since no client can
   * continue a superseded stream and the replica's stream would stay open for nothing.
   */
  async #releaseIfSuperseded(pump: Pump, hold: Hold): Promise<void> {
    let current: string | undefined;
    try {
      const view = await this.#deps.store.readIncarnation(pump.sessionId, pump.incarnation, pump.pipe.delivered);
      if (view === null) return;
      current = view.currentGet;
    } catch {
      // The store does not answer: the notes and the hold period still bound this stream.
      return;
    }
    if (this.#held.get(pump) !== hold) return;
    if (current !== undefined && current !== pump.incarnation) this.#release(pump, 'superseded');
  }

  /**
   * A GET to `replica` needs room in its stream budget: the oldest held GET stream of the replica
   * with no client attached, here or tailing through another instance, is let go (a hold expiry of
   * reason `budget`; its journal stays, so a client coming back resumes from it). False when there
   * is none.
   */
  async makeRoom(replica: string): Promise<boolean> {
    for (const [pump, hold] of this.#held) {
      if (pump.kind !== 'get' || pump.replica !== replica || hold.claimed) continue;
      hold.claimed = true;
      const tailed = await this.#tailed(pump);
      delete hold.claimed;
      if (tailed || this.#held.get(pump) !== hold) continue;
      this.#release(pump, 'budget');
      return true;
    }
    return false;
  }

  /** Whether a client tails the stream through another instance now (its lease runs). */
  async #tailed(pump: Pump): Promise<boolean> {
    try {
      const view = await this.#deps.store.readIncarnation(pump.sessionId, pump.incarnation, pump.pipe.delivered);
      return view !== null && view.record.tailUntil > Date.now();
    } catch {
      // The store does not answer: no client can tail this stream now.
      return false;
    }
  }

  #unhold(pump: Pump): void {
    const hold = this.#held.get(pump);
    if (hold === undefined) return;
    this.#held.delete(pump);
    clearTimeout(hold.timer);
    hold.unwatch?.();
    this.#deps.metrics.heldStreams.dec();
  }

  #release(pump: Pump, reason: 'timeout' | 'cap' | 'superseded' | 'budget'): void {
    if (!this.#held.has(pump)) return;
    this.#unhold(pump);
    this.#deps.metrics.holdExpiries.inc({ reason });
    pump.pipe.release(reason === 'timeout' ? 'hold_expired' : 'hold_released');
  }

  #arm(pump: Pump, hold: Hold, ms: number): void {
    hold.timer = setTimeout(() => void this.#expire(pump, hold), ms);
    hold.timer.unref();
  }

  /** The hold period passed: over, unless a client attached elsewhere since (its lease restarts it). */
  async #expire(pump: Pump, hold: Hold): Promise<void> {
    const { holdMs } = this.#deps.config().resumption.journal;
    let until = 0;
    try {
      const view = await this.#deps.store.readIncarnation(pump.sessionId, pump.incarnation, pump.pipe.delivered);
      if (view && view.record.tailUntil > 0) until = view.record.tailUntil + holdMs;
    } catch {
      // The store does not answer: no client can tail this stream now, so nothing extends the hold.
    }
    if (this.#held.get(pump) !== hold) return;
    const left = until - Date.now();
    if (left > 0) this.#arm(pump, hold, left);
    else this.#release(pump, 'timeout');
  }
}
