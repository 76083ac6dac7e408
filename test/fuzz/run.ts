/**
 * Long runs of the properties of the byte-level parts (the `*.properties.ts` beside their unit
 * tests, which the suite runs briefly):
 *
 *   npm run fuzz -- --minutes N           every property in turn, with fresh seeds, N minutes in all (default 1)
 *   options: --only TEXT                  only the properties whose name contains TEXT
 *            --seed S --path P            replay one failure that a run printed (with --only to name its property)
 *
 * Prints each failure as it is found (fast-check's report: seed, path and the shrunk
 * counterexample, which belongs in the property's `examples` once fixed), then the runs and
 * failures of every property. Exits 1 when anything failed.
 */
import { parseArgs } from 'node:util';
import { loadProperties } from '../config/load.properties.js';
import { codecProperties } from '../cursor/codec.properties.js';
import { classifyProperties } from '../eras/classify.properties.js';
import { report, type NamedProperty } from '../helpers/property.js';
import { parserProperties } from '../sse/parser.properties.js';
import { rewriterProperties } from '../sse/rewriter.properties.js';

const ALL: readonly NamedProperty[] = [...parserProperties, ...rewriterProperties, ...codecProperties, ...classifyProperties, ...loadProperties];

const { values } = parseArgs({
  options: { minutes: { type: 'string', default: '1' }, only: { type: 'string' }, seed: { type: 'string' }, path: { type: 'string' } },
});
const minutes = Number(values.minutes);
if (!(minutes > 0)) {
  console.error(`--minutes: expected a positive number, got ${values.minutes}`);
  process.exit(2);
}
const chosen = ALL.filter((p) => values.only === undefined || p.name.includes(values.only));
if (chosen.length === 0) {
  console.error(`--only: no property's name contains ${JSON.stringify(values.only)}; they are:\n${ALL.map((p) => `  ${p.name}`).join('\n')}`);
  process.exit(2);
}

if (values.seed !== undefined) {
  // A replay: the failing run again, each chosen property once.
  let failed = false;
  for (const p of chosen) {
    const details = p.check({ seed: Number(values.seed), ...(values.path ? { path: values.path } : {}), numRuns: 1 });
    failed ||= details.failed;
    console.log(`${p.name}: ${details.failed ? report(details) : 'passes'}`);
  }
  process.exit(failed ? 1 : 0);
}

interface Tally {
  runs: number;
  failure: string | undefined;
}
const tallies = new Map<NamedProperty, Tally>(chosen.map((p) => [p, { runs: 0, failure: undefined }]));
const deadline = Date.now() + minutes * 60_000;
console.log(`fuzzing ${chosen.length} properties for ${minutes} minute(s)`);

// Round after round, each property a batch of its suite's runs with a seed of its own, until the
// time is up; a property that failed is not run again (its report says how to replay it).
let rounds = 0;
while (Date.now() < deadline) {
  const live = chosen.filter((p) => tallies.get(p)!.failure === undefined);
  if (live.length === 0) break;
  for (const p of live) {
    if (Date.now() >= deadline) break;
    const seed = Math.floor(Math.random() * 2 ** 31);
    const details = p.check({ seed, examples: [] });
    const tally = tallies.get(p)!;
    tally.runs += details.numRuns;
    if (details.failed) {
      tally.failure = report(details);
      console.log(`\nFAILED: ${p.name}\n${tally.failure}\nreplay: npm run fuzz -- --only ${JSON.stringify(p.name)} --seed ${details.seed} --path ${details.counterexamplePath ?? ''}\n`);
    }
  }
  rounds++;
}

const failed = [...tallies.values()].filter((t) => t.failure !== undefined).length;
console.log(`\n${rounds} round(s)`);
for (const [p, t] of tallies) console.log(`${String(t.runs).padStart(9)} runs  ${t.failure === undefined ? 'ok    ' : 'FAILED'}  ${p.name}`);
console.log(`${failed} of ${chosen.length} properties failed`);
process.exit(failed > 0 ? 1 : 0);
