/**
 * Named fast-check properties, defined once beside the unit tests of what they check
 * (`*.properties.ts`) and run two ways: briefly in the suite (`checkProperties`, each with its own
 * `numRuns` and its kept counterexamples first), and for as long as asked by `npm run fuzz`
 * (test/fuzz/run.ts, with fresh seeds).
 */
import fc from 'fast-check';
import type { Test } from 'tap';

export interface NamedProperty {
  readonly name: string;
  /** Runs in the suite. */
  readonly numRuns: number;
  /** One run of fast-check: the kept counterexamples, then `numRuns` generated values. */
  check(params?: fc.Parameters<unknown>): fc.RunDetails<unknown>;
}

/**
 * A property over one arbitrary (fc.tuple or fc.record for several). The predicate fails by
 * throwing, as node:assert does: fast-check shrinks only a thrown failure. `examples`: the
 * counterexamples it found once, each run before anything generated.
 */
export function property<T>(
  name: string,
  arbitrary: fc.Arbitrary<T>,
  predicate: (value: T) => void,
  options: { numRuns: number; examples?: readonly T[] },
): NamedProperty {
  const prop = fc.property(arbitrary, (value) => {
    predicate(value);
  });
  const examples = (options.examples ?? []).map((e): [T] => [e]);
  return {
    name,
    numRuns: options.numRuns,
    check: (params = {}) => fc.check(prop, { numRuns: options.numRuns, examples, ...params }) as fc.RunDetails<unknown>,
  };
}

/** Each property as a test of its own, failing with fast-check's report (seed, path, the shrunk counterexample). */
export function checkProperties(t: Test, properties: readonly NamedProperty[]): void {
  for (const p of properties) {
    t.test(`property: ${p.name}`, async (t) => {
      const details = p.check();
      if (details.failed) t.fail(report(details));
      else t.pass(`${details.numRuns} runs`);
    });
  }
}

/** fast-check's report of a failed run (seed, path, the shrunk counterexample) with the failure itself. */
export function report(details: fc.RunDetails<unknown>): string {
  const error = details.errorInstance;
  return `${fc.defaultReportMessage(details) ?? 'failed'}\n${error instanceof Error ? error.message : String(error)}`;
}
