/**
 * Waiting in tests without sleeping as synchronisation, and time bounds that hold on a slow,
 * shared machine (CI runs on one core, beside other work).
 */
import { setTimeout as delay } from 'node:timers/promises';
import type { Store } from '../../src/store/types.js';

/**
 * What a loaded machine may add to any bound: a stall of the event loop, a process scheduled late.
 * Bounds in tests are a configured timeout plus this, never a bare "under N ms"; speed is measured
 * in bench/, not asserted here.
 */
export const SLACK_MS = 5_000;

/** The upper bound for something the configuration says takes at most `configuredMs`. */
export function bound(configuredMs: number): number {
  return configuredMs + SLACK_MS;
}

/**
 * health.timeoutMs for tests whose replicas must not be declared gone by a slow probe (one failed
 * probe is enough where unhealthyThreshold is 1): far above a stall of a loaded machine, where
 * the default (1 s) is not. A killed replica refuses its probe at once, so this slows down
 * nothing the tests wait for.
 */
export const PROBE_TIMEOUT_MS = 10_000;

/** How often waitFor looks again: often enough not to slow a test down, rarely enough not to load it. */
export const POLL_INTERVAL_MS = 20;

/**
 * Polls `check` until it returns true; throws after `deadlineMs`, saying what it waited for and
 * the last error `check` threw (a check that throws counts as not yet).
 */
export async function waitFor(what: string, deadlineMs: number, check: () => Promise<boolean> | boolean): Promise<void> {
  const deadline = performance.now() + deadlineMs;
  let last: unknown;
  for (;;) {
    try {
      if (await check()) return;
    } catch (err) {
      last = err;
    }
    if (performance.now() >= deadline) break;
    await delay(POLL_INTERVAL_MS);
  }
  throw new Error(`${what}: not within ${deadlineMs} ms${last === undefined ? '' : ` (last error: ${String(last)})`}`);
}

/** Bounds a store's (re)connection to a server that is up: a limit on failure, not an expected duration. */
export const STORE_CONNECT_DEADLINE_MS = bound(5_000);

/**
 * Resolves once `store` answers, as the gateway does before it takes requests: a store just created,
 * or whose server just restarted, refuses commands until its connection is ready (no offline
 * queue), and on a loaded machine that can take longer than the one command timeout a first
 * command waits for it.
 */
export async function storeAnswers(store: Pick<Store, 'ping'>, what = 'the store answers'): Promise<void> {
  await waitFor(what, STORE_CONNECT_DEADLINE_MS, async () => (await store.ping(), true));
}
