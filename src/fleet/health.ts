/**
 * A replica's health as a pure transition: from its state and one observation (a probe's result,
 * or what a request saw) to its next state. I/O, logging and the epoch retirement that follows a
 * replica going down happen around it, in the Fleet.
 *
 * `up` takes new sessions. `suspect` misbehaved (timeout, reset, 5xx): requests for its sessions
 * get 503 until it answers again. `down` refused connections or failed `unhealthyThreshold`
 * probes in a row: it is gone, and coming back takes `healthyThreshold` good probes in a row (or
 * one answer to a request).
 */

export type Health = 'up' | 'suspect' | 'down';

export interface HealthState {
  readonly status: Health;
  /** Failed probes in a row. */
  readonly failures: number;
  /** Good probes in a row. */
  readonly successes: number;
}

export type Observation =
  /** A health probe, good (the replica answered as expected) or not. */
  | { readonly kind: 'probe'; readonly ok: boolean }
  /** A request got an answer: whatever the replica did before (or another process at its address), it is there. */
  | { readonly kind: 'answered' }
  /** A request timed out, was reset or got a 5xx: the replica is there but misbehaves. */
  | { readonly kind: 'misbehaved' }
  /** A connection was refused: nothing listens there, the process that held its sessions is gone. */
  | { readonly kind: 'refused' };

export interface Thresholds {
  readonly unhealthyThreshold: number;
  readonly healthyThreshold: number;
}

/** Optimistic until a probe or a request says otherwise, so that a starting gateway serves. */
export const INITIAL_HEALTH: HealthState = { status: 'up', failures: 0, successes: 0 };

export function nextHealth(state: HealthState, observation: Observation, thresholds: Thresholds): HealthState {
  switch (observation.kind) {
    case 'answered':
      return state.status === 'up' ? state : { ...state, status: 'up' };
    case 'misbehaved':
      return state.status === 'up' ? { ...state, status: 'suspect' } : state;
    case 'refused':
      return { ...state, status: 'down', successes: 0 };
    case 'probe':
      return observation.ok ? probeSucceeded(state, thresholds) : probeFailed(state, thresholds);
  }
}

function probeSucceeded(state: HealthState, { healthyThreshold }: Thresholds): HealthState {
  const successes = state.successes + 1;
  const back = state.status === 'suspect' || (state.status === 'down' && successes >= healthyThreshold);
  return { status: back ? 'up' : state.status, failures: 0, successes };
}

function probeFailed(state: HealthState, { unhealthyThreshold }: Thresholds): HealthState {
  const failures = state.failures + 1;
  const gone = state.status !== 'down' && failures >= unhealthyThreshold;
  return { status: gone ? 'down' : state.status, failures, successes: 0 };
}
