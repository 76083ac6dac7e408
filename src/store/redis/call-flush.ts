/**
 * The calls of one script made in one turn of the event loop, sent as one call of its many-call
 * twin (scripts/many.ts): the records of many streams, and the journal reads of many tails, in one
 * round trip (docs/performance.md, "The records of many streams in one round trip"). A paced event
 * arrives alone, so each of its batches was its own script call: its own command built and parsed,
 * its own socket write and read on both sides, and its own EVALSHA in Redis. Calls are now
 * collected and sent when the loop turn ends (setImmediate: at once when the loop is idle), or as
 * soon as MAX_CALLS wait.
 *
 * E5 holds: each caller gets its own answer, and a batch's events leave only once it came. A call
 * the script refused fails alone; a round trip that failed (no reply within its deadline, a lost
 * connection) fails every call in it, as each would have failed alone. Calls are sent in the order
 * they were made, so one stream's pipelined batches stay in order within a round trip.
 *
 * On a Cluster, a script's keys must be in one slot: calls are grouped by their slot, one round
 * trip per group, so sessions that share a slot still share one.
 */
import calculateSlot from 'cluster-key-slot';
import { manyCallsArgs } from './scripts/many.js';

/** One call, ready to send: its keys (the first names its slot) and the single script's arguments. */
export interface PreparedCall<A> {
  readonly keys: readonly string[];
  readonly args: readonly (string | number | Buffer)[];
  /** The script's answer to this call, or the round trip's failure; the first settle counts. */
  settle(answer: A | Error): void;
}

/** Sends one group of calls that share a slot, settling each. */
export type SendCalls<A> = (group: readonly PreparedCall<A>[]) => Promise<void>;

/**
 * A script blocks Redis while it runs: a bound on what one round trip holds keeps any script short
 * (a busy stream's batch holds up to its own bound of events already). 64 paced events' batches
 * take Redis about a millisecond.
 */
const MAX_CALLS = 64;

export class CallFlush<A> {
  readonly #send: SendCalls<A>;
  readonly #cluster: boolean;
  #waiting: PreparedCall<A>[] = [];
  #scheduled = false;

  constructor(send: SendCalls<A>, cluster: boolean) {
    this.#send = send;
    this.#cluster = cluster;
  }

  add(call: PreparedCall<A>): void {
    this.#waiting.push(call);
    if (this.#waiting.length >= MAX_CALLS) this.#flush();
    else if (!this.#scheduled) {
      this.#scheduled = true;
      setImmediate(() => {
        this.#scheduled = false;
        this.#flush();
      });
    }
  }

  #flush(): void {
    const waiting = this.#waiting;
    if (waiting.length === 0) return;
    this.#waiting = [];
    for (const group of this.#cluster ? bySlot(waiting) : [waiting]) {
      this.#send(group).catch((err: unknown) => {
        const failure = err instanceof Error ? err : new Error(String(err));
        for (const call of group) call.settle(failure);
      });
    }
  }
}

/** Calls grouped by the slot of their keys (every key of a session shares its hash tag), in order. */
function bySlot<A>(calls: readonly PreparedCall<A>[]): PreparedCall<A>[][] {
  const groups = new Map<number, PreparedCall<A>[]>();
  for (const call of calls) {
    const slot = calculateSlot(call.keys[0]!);
    const group = groups.get(slot);
    if (group) group.push(call);
    else groups.set(slot, [call]);
  }
  return [...groups.values()];
}

/** One call through `flush`: resolves with the script's answer to it, or rejects with the round trip's failure. */
export function sendVia<A>(flush: CallFlush<A>, keys: readonly string[], args: readonly (string | number | Buffer)[]): Promise<A> {
  return new Promise<A>((resolve, reject) => {
    let settled = false;
    flush.add({
      keys,
      args,
      settle(answer: A | Error): void {
        if (settled) return;
        settled = true;
        if (answer instanceof Error) reject(answer);
        else resolve(answer);
      },
    });
  });
}

/**
 * Sends one group of calls: the single script for one, its many-call twin for more, settling each
 * with its own answer. A twin that Redis stopped at one call (a key of another type, say: a script
 * is not rolled back) is followed by each call alone, so that only that one fails; a write that
 * landed before the stop is answered 'ok' again (a batch that landed is idempotent).
 */
export async function sendGroup<A>(
  group: readonly PreparedCall<A>[],
  single: (call: PreparedCall<A>) => Promise<unknown>,
  many: (args: (string | number | Buffer)[]) => Promise<unknown>,
  as: (answer: unknown) => A,
): Promise<void> {
  const alone = (call: PreparedCall<A>) => single(call).then((answer) => call.settle(as(answer)));
  if (group.length === 1) return alone(group[0]!);
  let answers: unknown;
  try {
    answers = await many(manyCallsArgs(group));
  } catch (err) {
    if ((err as Error).name !== 'ReplyError') throw err;
    await Promise.all(group.map((call) => alone(call).catch((failure: Error) => call.settle(failure))));
    return;
  }
  if (!Array.isArray(answers) || answers.length !== group.length) throw new Error(`malformed reply to ${group.length} calls: ${JSON.stringify(answers)}`);
  group.forEach((call, i) => call.settle(as(answers[i])));
}
