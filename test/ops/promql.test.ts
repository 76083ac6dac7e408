/**
 * The Grafana dashboard and the alert rules ask Prometheus only for what the gateway exports: every
 * `mcp_gateway_*`, `process_*` and `nodejs_*` name in their PromQL is a series a real gateway's
 * /metrics has, every label they select or group by is one of those series' labels, and every
 * `outcome` / `reason` value is one the gateway counts (CONTRACT.md §6). A renamed metric breaks
 * this test, not a dashboard nobody looks at until an incident.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { parse } from 'yaml';
import { startReplica } from '../../demo/src/replica.js';
import { startGateway } from '../helpers/gateway.js';
import { post, rawSession } from '../helpers/http.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const read = (path: string) => readFileSync(`${ROOT}${path}`, 'utf8');

const NAME = /\b(?:mcp_gateway|process|nodejs)_[a-zA-Z0-9_]*/g;
/** Labels Prometheus adds at scrape (job, instance) or a histogram has (le). */
const SCRAPE_LABELS = new Set(['job', 'instance', 'le']);
/** CONTRACT.md §5 and §6. */
const OUTCOMES = new Set(['continued', 'new_stream', 'rejected', 'stripped']);
const REASONS = new Set(['none', 'post_request', 'session_unknown', 'foreign_cursor', 'session_mismatch', 'unknown_stream', 'superseded', 'owner_gone', 'gap']);

interface Query {
  where: string;
  expr: string;
}

function dashboardQueries(): Query[] {
  const dashboard = JSON.parse(read('deploy/grafana/mcp-resume-gateway.json')) as {
    panels: { title: string; targets?: { expr: string }[] }[];
    templating: { list: { name: string; definition?: string }[] };
  };
  const queries: Query[] = [];
  for (const panel of dashboard.panels) {
    for (const target of panel.targets ?? []) queries.push({ where: `dashboard panel "${panel.title}"`, expr: target.expr });
  }
  for (const variable of dashboard.templating.list) {
    if (variable.definition) queries.push({ where: `dashboard variable $${variable.name}`, expr: variable.definition });
  }
  return queries;
}

function alertQueries(): Query[] {
  const file = parse(read('deploy/prometheus/alerts.yml')) as { groups: { rules: { alert: string; expr: string }[] }[] };
  return file.groups.flatMap((g) => g.rules.map((r) => ({ where: `alert ${r.alert}`, expr: r.expr })));
}

/** Label names in `{...}` matchers and `by (...)` / `without (...)` clauses. */
function labelsUsed(expr: string): string[] {
  const labels: string[] = [];
  for (const [, body] of expr.matchAll(/\{([^}]*)\}/g)) {
    for (const [, label] of (body ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)/g)) labels.push(label!);
  }
  for (const [, list] of expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)) {
    labels.push(...(list ?? '').split(',').map((l) => l.trim()).filter((l) => l !== ''));
  }
  // label_values(metric, label) in dashboard variables.
  for (const [, label] of expr.matchAll(/label_values\([^,]*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)/g)) labels.push(label!);
  return labels;
}

/** Values matched for `label` in `{label="a"}` or `{label=~"a|b"}`. */
function valuesMatched(expr: string, label: string): string[] {
  const values: string[] = [];
  for (const [, value] of expr.matchAll(new RegExp(`\\b${label}\\s*(?:=~|=|!=|!~)\\s*"([^"]*)"`, 'g'))) values.push(...value!.split('|'));
  return values;
}

t.test('dashboard and alerts query only series the gateway exports', async (t) => {
  const replica = await startReplica({ id: 'r1' });
  t.teardown(() => replica.close());
  const gw = await startGateway(t, { replicas: [{ id: 'r1', url: replica.url }] });

  // Traffic, so that labelled series exist: a session, a tool call, a resumption, a stripped POST.
  const sessionId = await rawSession(gw.url);
  const call = await post(gw.url, JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'whoami', arguments: {} } }), { 'mcp-session-id': sessionId });
  t.equal(call.status, 200, 'tools/call through the gateway');
  await call.text();
  const resume = await fetch(gw.url, { headers: { accept: 'text/event-stream', 'mcp-session-id': sessionId, 'last-event-id': 'not-a-cursor' } });
  t.equal(resume.headers.get('mcp-resumption-reason'), 'foreign_cursor', 'a resumption was counted');
  await resume.body?.cancel();
  const stripped = await post(gw.url, JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/list' }), { 'mcp-session-id': sessionId, 'last-event-id': 'x' });
  await stripped.text();

  const text = await (await fetch(`${gw.adminUrl}/metrics`)).text();
  // Names that a query may use: each family (HELP/TYPE lines exist without samples), a histogram's
  // _bucket/_sum/_count, and every sample name.
  const exported = new Set<string>();
  const labelsOf = new Map<string, Set<string>>();
  const family = new Map<string, string>();
  for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    exported.add(name!);
    family.set(name!, name!);
    if (type === 'histogram' || type === 'summary') {
      for (const suffix of ['_bucket', '_sum', '_count']) {
        exported.add(`${name}${suffix}`);
        family.set(`${name}${suffix}`, name!);
      }
    }
    const metric = gw.registry.getSingleMetric(name!) as unknown as { labelNames?: readonly string[] } | undefined;
    labelsOf.set(name!, new Set(metric?.labelNames ?? []));
  }
  for (const [, name, labels] of text.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? /gm)) {
    exported.add(name!);
    const owner = family.get(name!) ?? name!;
    const set = labelsOf.get(owner) ?? new Set<string>();
    for (const [, label] of (labels ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) set.add(label!);
    labelsOf.set(owner, set);
  }
  t.ok(exported.has('mcp_gateway_resumptions_total') && exported.has('process_cpu_seconds_total'), 'the gateway exports its metrics and the process metrics');

  const queries = [...dashboardQueries(), ...alertQueries()];
  t.ok(queries.length >= 20, `${queries.length} queries found`);
  const used = new Set<string>();
  for (const { where, expr } of queries) {
    const names = [...new Set(expr.match(NAME) ?? [])];
    t.ok(names.length > 0 || /\bup\{/.test(expr), `${where} queries a metric`);
    const allowed = new Set(SCRAPE_LABELS);
    for (const name of names) {
      used.add(family.get(name) ?? name);
      t.ok(exported.has(name), `${where}: ${name} is exported`);
      for (const label of labelsOf.get(family.get(name) ?? name) ?? []) allowed.add(label);
    }
    for (const label of labelsUsed(expr)) t.ok(allowed.has(label), `${where}: label ${label} belongs to ${names.join(', ') || 'up'}`);
    if (expr.includes('mcp_gateway_resumptions_total')) {
      for (const value of valuesMatched(expr, 'outcome')) t.ok(OUTCOMES.has(value), `${where}: outcome "${value}" is counted`);
      for (const value of valuesMatched(expr, 'reason')) t.ok(REASONS.has(value), `${where}: reason "${value}" is counted`);
    }
  }

  // The brief of the dashboard: every metric of CONTRACT.md §6 has a panel or a rule.
  for (const name of [
    'mcp_gateway_resumptions_total',
    'mcp_gateway_requests_total',
    'mcp_gateway_upstream_duration_seconds',
    'mcp_gateway_sse_streams_open',
    'mcp_gateway_sse_events_total',
    'mcp_gateway_replica_up',
    'mcp_gateway_store_duration_seconds',
    'mcp_gateway_store_errors_total',
  ]) {
    t.ok(used.has(name), `${name} is on the dashboard or in a rule`);
  }
});
