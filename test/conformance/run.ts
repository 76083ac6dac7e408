/**
 * The conformance suite (@modelcontextprotocol/conformance, its `server` command) as a child
 * process, and the conformance fixture servers (server-main.ts) as replicas.
 */
import { mkdtemp, readdir, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { jsonLine, outputOf, readyLine, spawnProcess, type Teardown } from '../helpers/processes.js';

const PACKAGE = fileURLToPath(new URL('../../../node_modules/@modelcontextprotocol/conformance/', import.meta.url));
const CLI = join(PACKAGE, 'dist/index.js');
/** Lets the CLI run on Node 20 (node20/hooks.ts). */
const REGISTER = fileURLToPath(new URL('./node20/register.js', import.meta.url));
const SERVER_JS = fileURLToPath(new URL('./server-main.js', import.meta.url));

export type Era = '2025' | '2026';

export async function spawnConformanceServer(t: Teardown, era: Era, opts: { id: string; port?: number; peers?: string[] }): Promise<string> {
  const args = [SERVER_JS, '--era', era, '--id', opts.id, '--port', String(opts.port ?? 0)];
  for (const peer of opts.peers ?? []) args.push('--peer', peer);
  const proc = spawnProcess(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], t });
  const url = await readyLine(proc, `conformance server ${opts.id}`, (line) => {
    const entry = jsonLine(line);
    return entry?.['event'] === 'listening' ? String(entry['url']) : undefined;
  });
  proc.child.stdout?.resume();
  return url;
}

/** The server scenarios a revision requires (scored) and those it runs without scoring. */
export async function requirements(revision: string): Promise<{ scored: string[]; notScored: string[] }> {
  const doc = parse(await readFile(join(PACKAGE, 'requirements', `${revision}.yaml`), 'utf8')) as {
    server: string[];
    not_scored: { scenario: string; leg: string }[];
  };
  return { scored: doc.server, notScored: doc.not_scored.filter((entry) => entry.leg === 'server').map((entry) => entry.scenario) };
}

export type Status = 'SUCCESS' | 'FAILURE' | 'WARNING' | 'SKIPPED' | 'INFO';
/** scenario → check id → status (a check id that repeats collapses to its most severe status). */
export type Results = Map<string, Map<string, Status>>;

const SEVERITY: Status[] = ['INFO', 'SUCCESS', 'SKIPPED', 'WARNING', 'FAILURE'];

/**
 * Runs every server scenario `revision` requires or runs unscored (or only `scenario`), at that
 * revision's wire, against `url`, and reads the checks each scenario saved. Exit code 1 only says
 * that some check failed.
 */
export async function runConformance(t: Teardown, url: string, revision: string, scenario?: string): Promise<Results> {
  const dir = await mkdtemp(join(tmpdir(), 'conformance-'));
  const which = scenario === undefined ? ['--requirements', revision] : ['--scenario', scenario, '--spec-version', revision];
  const proc = spawnProcess(process.execPath, ['--import', REGISTER, CLI, 'server', '--url', url, ...which, '-o', dir], {
    stdio: ['ignore', 'pipe', 'pipe'],
    t,
  });
  const out = await outputOf(proc.child);
  if (out.code !== 0 && out.code !== 1) throw new Error(`the conformance CLI exited with ${out.code ?? out.signal}: ${out.stderr.slice(-2000)}`);
  const results: Results = new Map();
  for (const entry of await readdir(dir)) {
    const scenario = /^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$/.exec(entry)?.[1];
    if (scenario === undefined) continue;
    const checks = JSON.parse(await readFile(join(dir, entry, 'checks.json'), 'utf8')) as { id: string; status: Status }[];
    const byId = new Map<string, Status>();
    for (const check of checks) {
      const before = byId.get(check.id);
      if (before === undefined || SEVERITY.indexOf(check.status) > SEVERITY.indexOf(before)) byId.set(check.id, check.status);
    }
    results.set(scenario, byId);
  }
  return results;
}

export function failed(checks: Map<string, Status>): boolean {
  return [...checks.values()].includes('FAILURE');
}

/** "S/N scenarios, C/M checks pass": scenarios without a failed check, checks that succeeded. */
export function tally(results: Results, scenarios: string[]): string {
  const present = scenarios.filter((s) => results.has(s));
  const passing = present.filter((s) => !failed(results.get(s)!)).length;
  const checks = present.flatMap((s) => [...results.get(s)!.values()]);
  return `${passing}/${scenarios.length} scenarios, ${checks.filter((c) => c === 'SUCCESS').length}/${checks.length} checks`;
}
