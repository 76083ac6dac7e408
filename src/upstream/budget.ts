/**
 * The SSE stream budget of each replica (CONTRACT.md §7: open streams never starve a replica's
 * other traffic). Each GET to a replica holds one connection for as long as its stream lasts, and
 * GETs have a pool of their own (upstream/index.ts), so POST, DELETE and the probes never wait
 * behind them. At most upstream.maxStreams GETs of a replica are in flight at once; one over it
 * first takes the place of the oldest held stream no client is attached to (streams/pumps.ts lets
 * it go: a hold expiry of reason `budget`, its journal kept), and otherwise is refused at once
 * (503 GW_STREAM_BUDGET with Retry-After, counted). Nothing is ever queued behind the budget.
 */

/** A GET over its replica's stream budget, with no held stream to give way: never sent. */
export class StreamBudgetExceeded extends Error {
  readonly code = 'GW_STREAM_BUDGET';

  constructor(
    readonly replica: string,
    readonly budget: number,
  ) {
    super(`replica ${replica} has ${budget} SSE streams open, its budget (upstream.maxStreams)`);
    this.name = 'StreamBudgetExceeded';
  }
}

/** Lets a held stream of the replica go to make room (true), or finds none to let go (false). */
export type MakeRoom = (replica: string) => Promise<boolean>;

export interface BudgetEvents {
  /** The number of open streams of a replica changed. */
  changed(replica: string, open: number): void;
  /** A GET was refused for want of room. */
  exceeded(replica: string): void;
}

/**
 * Eviction frees its slot once the held stream's replica body has closed (a tick or so later): a
 * GET that asked for room waits this long at most for it, then asks again.
 */
const ROOM_WAIT_MS = 1000;
/** Room asked for at most this often by one GET: held streams let go meanwhile were taken by others. */
const ROOM_ATTEMPTS = 3;

export class StreamBudgets {
  readonly #open = new Map<string, number>();
  readonly #waiting = new Map<string, (() => void)[]>();
  #makeRoom: MakeRoom = async () => false;

  constructor(
    private max: number,
    private readonly events: BudgetEvents,
  ) {}

  get budget(): number {
    return this.max;
  }

  /** A reload: the new budget counts the streams open now; none is ended for it. */
  resize(max: number): void {
    this.max = max;
  }

  /** Who lets held streams go (the pumps, wired once both exist). */
  onMakeRoom(makeRoom: MakeRoom): void {
    this.#makeRoom = makeRoom;
  }

  open(replica: string): number {
    return this.#open.get(replica) ?? 0;
  }

  /** The replicas at or over their budget now, with their open streams. */
  full(): [replica: string, open: number][] {
    return [...this.#open].filter(([, open]) => open >= this.max);
  }

  /**
   * A place for one stream of `replica`; the returned function gives it back (once, whatever
   * calls it). Throws StreamBudgetExceeded when none can be had at once.
   */
  async acquire(replica: string): Promise<() => void> {
    for (let attempt = 1; this.open(replica) >= this.max; attempt++) {
      if (attempt > ROOM_ATTEMPTS) throw this.#exceeded(replica);
      const freed = this.#nextRelease(replica);
      if (!(await this.#makeRoom(replica))) {
        freed.cancel();
        throw this.#exceeded(replica);
      }
      await freed.done;
    }
    this.#set(replica, this.open(replica) + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.#set(replica, this.open(replica) - 1);
      for (const wake of this.#waiting.get(replica)?.splice(0) ?? []) wake();
    };
  }

  #exceeded(replica: string): StreamBudgetExceeded {
    this.events.exceeded(replica);
    return new StreamBudgetExceeded(replica, this.max);
  }

  #set(replica: string, open: number): void {
    if (open === 0) this.#open.delete(replica);
    else this.#open.set(replica, open);
    this.events.changed(replica, open);
  }

  /** Resolves at the next stream of `replica` given back, or after ROOM_WAIT_MS. */
  #nextRelease(replica: string): { done: Promise<void>; cancel: () => void } {
    let wake!: () => void;
    const done = new Promise<void>((resolve) => (wake = resolve));
    const timer = setTimeout(wake, ROOM_WAIT_MS);
    timer.unref();
    const waiters = this.#waiting.get(replica) ?? [];
    waiters.push(wake);
    this.#waiting.set(replica, waiters);
    const cancel = () => {
      clearTimeout(timer);
      const list = this.#waiting.get(replica);
      const at = list?.indexOf(wake) ?? -1;
      if (at >= 0) list!.splice(at, 1);
      if (list?.length === 0) this.#waiting.delete(replica);
    };
    return { done: done.then(cancel), cancel };
  }
}
