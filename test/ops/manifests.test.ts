/**
 * The deployment files agree with each other and with the gateway: docker-compose.yml, the HAProxy
 * and Prometheus configurations of the compose demo, the Grafana provisioning, and the Kubernetes
 * manifests parse; every gateway configuration they use passes the gateway's own validation with
 * the environment they give it; ports, probe paths, job names, image names and grace periods line
 * up. No docker engine or cluster needed.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { parse, parseAllDocuments } from 'yaml';
import { parseConfig } from '../../src/config/load.js';
import type { Config } from '../../src/config/schema.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const read = (path: string) => readFileSync(`${ROOT}${path}`, 'utf8');
const VERSION = (JSON.parse(read('package.json')) as { version: string }).version;
const IMAGE = `mcp-resume-gateway:${VERSION}`;
/** What SIGTERM needs beyond shutdown.graceMs: closing the store, exiting, a scheduler's delay. */
const EXIT_MARGIN_MS = 3000;

// Loose shapes: these are other programs' files; a wrong shape fails an assertion, not the compiler.
type Any = any;

const compose = parse(read('docker-compose.yml'), { merge: true }) as Any;
const services = compose.services as Record<string, Any>;
const k8sDocs: Any[] = readdirSync(`${ROOT}deploy/k8s`)
  .filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml')
  .flatMap((f) =>
    parseAllDocuments(read(`deploy/k8s/${f}`)).map((doc) => {
      t.same(doc.errors, [], `deploy/k8s/${f} parses`);
      return { ...(doc.toJS() as Any), file: f };
    }),
  );
const k8s = (kind: string, name?: string): Any => {
  const found = k8sDocs.filter((d) => d.kind === kind && (name === undefined || d.metadata.name === name));
  if (found.length !== 1) throw new Error(`expected one ${kind} ${name ?? ''} in deploy/k8s, found ${found.length}`);
  return found[0];
};

/** Compose's `stop_grace_period` (`15s`, `1m30s`, `500ms`) in milliseconds. */
function duration(text: string): number {
  const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
  let total = 0;
  for (const [, n, unit] of String(text).matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)) total += Number(n) * units[unit!]!;
  return total;
}

const hostPort = (url: string) => {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port || (u.protocol === 'https:' ? 443 : 80)) };
};

/** The container side of compose port mappings ("127.0.0.1:9464:9464" -> 9464). */
const containerPorts = (service: Any): number[] => (service.ports ?? []).map((p: string) => Number(String(p).split(':').at(-1)));

/** The configuration as the gateway loads it, with the environment the deployment gives it. */
function loadWith(text: string, file: string, env: Record<string, string>, t: { fail(message: string): unknown }): Config | undefined {
  try {
    return parseConfig(text, file, env);
  } catch (err) {
    t.fail(`${file} validates: ${(err as Error).message}`);
    return undefined;
  }
}

t.test('the container configuration validates and listens on every interface', async (t) => {
  const file = 'deploy/config/gateway.container.yaml';
  const config = loadWith(read(file), file, {}, t)!;
  t.equal(config.listen.host, '0.0.0.0');
  t.equal(config.admin.host, '0.0.0.0');
  t.equal(config.listen.port, 8080);
  t.equal(config.admin.port, 9464);
  t.equal(config.store.type, 'memory', 'one container on its own: the memory store');
  const redis = loadWith(read(file), file, { MCP_GATEWAY_STORE: 'redis', MCP_GATEWAY_REDIS_URL: 'redis://cache:6380', MCP_GATEWAY_ADMIN_PORT: '9000' }, t)!;
  t.equal(redis.store.type, 'redis', 'MCP_GATEWAY_STORE selects the store');
  t.equal(redis.store.url, 'redis://cache:6380');
  t.equal(redis.admin.port, 9000, 'MCP_GATEWAY_ADMIN_PORT moves the admin port (the HEALTHCHECK reads it too)');
});

t.test('docker-compose.yml: the demo topology', async (t) => {
  for (const name of ['redis', 'replica-1', 'replica-2', 'replica-3', 'gateway-1', 'gateway-2', 'haproxy', 'prometheus', 'grafana']) {
    t.ok(services[name], `service ${name}`);
  }
  const gateways = Object.keys(services).filter((n) => n.startsWith('gateway-'));
  const replicas = Object.keys(services).filter((n) => n.startsWith('replica-'));
  t.equal(gateways.length, 2, 'two gateway instances');

  for (const name of [...gateways, ...replicas]) {
    t.equal(services[name].image, IMAGE, `${name} runs the image of this version`);
  }
  for (const name of gateways) {
    const service = services[name];
    t.equal(service.build, '.', `${name} builds the Dockerfile`);
    const mount = (service.volumes as string[]).map((v) => v.split(':')).find(([, target]) => target === '/app/config/gateway.yaml');
    t.ok(mount, `${name} mounts its configuration at /app/config/gateway.yaml`);
    if (!mount) continue;
    const source = mount[0]!.replace(/^\.\//, '');
    const config = loadWith(read(source), source, service.environment ?? {}, t);
    if (!config) continue;
    t.equal(config.store.type, 'redis', `${name}: the gateways share redis`);
    t.equal(hostPort(config.store.url).host, 'redis', `${name}: store.url is the redis service`);
    t.equal(config.listen.host, '0.0.0.0');
    t.equal(config.admin.host, '0.0.0.0');
    for (const port of containerPorts(service)) t.equal(port, config.admin.port, `${name} publishes its admin port`);
    t.ok(duration(service.stop_grace_period) >= config.shutdown.graceMs + EXIT_MARGIN_MS, `${name}: stop_grace_period ${service.stop_grace_period} > shutdown.graceMs ${config.shutdown.graceMs} + margin`);
    t.equal(service.depends_on?.redis?.condition, 'service_healthy', `${name} waits for redis`);

    // Each configured replica is a compose service running the demo replica with that id and port.
    t.equal(config.replicas.length, replicas.length, 'every replica service is configured');
    for (const replica of config.replicas) {
      const { host, port } = hostPort(replica.url);
      const service = services[host];
      t.ok(service, `${replica.id}: ${host} is a compose service`);
      if (!service) continue;
      const argv = [...(service.entrypoint ?? []), ...(service.command ?? [])];
      t.same(argv.slice(0, 2), ['node', 'demo/dist/replica.js'], `${host} runs the demo replica`);
      const flag = (f: string) => argv[argv.indexOf(f) + 1];
      t.equal(flag('--id'), replica.id, `${host} has id ${replica.id}`);
      t.equal(Number(flag('--port')), port, `${host} listens on ${port}`);
      t.equal(flag('--host'), '0.0.0.0', `${host} listens on every interface`);
    }
  }
});

t.test('haproxy: round-robin over the gateways, readiness on the admin port, no stickiness', async (t) => {
  const cfg = read('deploy/compose/haproxy.cfg');
  const config = parseConfig(read('deploy/compose/gateway.yaml'), 'gateway.yaml', {});
  t.match(cfg, /^\s*balance roundrobin$/m);
  t.notMatch(cfg, /^\s*(cookie|stick|balance source|hash-type)\b/m, 'nothing sticks a client to a gateway');
  t.match(cfg, /option httpchk GET \/readyz/, 'health check on /readyz');
  t.match(cfg, new RegExp(`check port ${config.admin.port}\\b`), 'on the admin port');
  const servers = [...cfg.matchAll(/^\s*server (\S+) ([^:\s]+):(\d+)/gm)].map(([, , host, port]) => ({ host: host!, port: Number(port) }));
  t.same(servers.map((s) => s.host).sort(), Object.keys(services).filter((n) => n.startsWith('gateway-')).sort(), 'every gateway is a server');
  for (const server of servers) t.equal(server.port, config.listen.port, `${server.host}: the MCP port`);
  const bind = Number(/^\s*bind [^:\s]*:(\d+)/m.exec(cfg)?.[1]);
  t.same(containerPorts(services['haproxy']), [bind], 'compose publishes the port haproxy binds');
  t.ok((services['haproxy'].volumes as string[]).includes('./deploy/compose/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro'), 'compose mounts this file');
  for (const timeout of ['client', 'server', 'tunnel']) {
    const value = new RegExp(`timeout ${timeout} (\\d+)(ms|s|m|h)`).exec(cfg);
    t.ok(value && duration(`${value[1]}${value[2]}`) >= 600_000, `timeout ${timeout} leaves SSE streams open (at least 10 minutes)`);
  }
  withTool(t, 'haproxy', 'haproxy -c', (haproxy, t) => {
    // -c: syntax and semantics; the gateways' names do not resolve outside compose (a warning).
    execFileSync(haproxy, ['-c', '-f', `${ROOT}deploy/compose/haproxy.cfg`], { stdio: 'pipe' });
    t.pass('haproxy -c accepts the file');
  });
});

t.test('the traces profile of the compose demo: jaeger receives the gateways\' spans, off unless asked for', async (t) => {
  const jaeger = services['jaeger'];
  t.same(jaeger?.profiles, ['traces'], 'jaeger runs only with --profile traces');
  t.equal(jaeger?.environment?.COLLECTOR_OTLP_ENABLED, 'true', 'and takes OTLP');
  for (const name of Object.keys(services).filter((n) => n.startsWith('gateway-'))) {
    const environment = services[name].environment as Record<string, string>;
    t.equal(environment['OTEL_TRACES_EXPORTER'], '${OTEL_TRACES_EXPORTER:-none}', `${name}: traces off unless OTEL_TRACES_EXPORTER=otlp is set`);
    t.equal(new URL(environment['OTEL_EXPORTER_OTLP_ENDPOINT']!).host, 'jaeger:4318', `${name} exports to jaeger's OTLP/HTTP port`);
  }
});

t.test('prometheus and grafana of the compose demo', async (t) => {
  const prom = parse(read('deploy/prometheus/prometheus.yml')) as Any;
  const config = parseConfig(read('deploy/compose/gateway.yaml'), 'gateway.yaml', {});
  const job = prom.scrape_configs.find((s: Any) => s.job_name === 'mcp-resume-gateway');
  t.ok(job, 'job mcp-resume-gateway');
  t.equal(job.metrics_path ?? '/metrics', '/metrics');
  const gateways = Object.keys(services).filter((n) => n.startsWith('gateway-'));
  t.same([...job.static_configs[0].targets].sort(), gateways.map((g) => `${g}:${config.admin.port}`).sort(), 'scrapes every gateway on its admin port');
  const mounts = (services['prometheus'].volumes as string[]).map((v) => v.split(':'));
  for (const ruleFile of prom.rule_files as string[]) {
    t.ok(mounts.some(([source, target]) => target === ruleFile && existsSync(`${ROOT}${source!.replace(/^\.\//, '')}`)), `${ruleFile} is mounted from the repository`);
  }
  t.ok(mounts.some(([source, target]) => source === './deploy/prometheus/prometheus.yml' && target === '/etc/prometheus/prometheus.yml'));

  const datasources = parse(read('deploy/grafana/provisioning/datasources/prometheus.yml')) as Any;
  t.equal(hostPort(datasources.datasources[0].url).host, 'prometheus', 'grafana reads the prometheus service');
  const provider = (parse(read('deploy/grafana/provisioning/dashboards/mcp-resume-gateway.yml')) as Any).providers[0];
  const grafanaMounts = (services['grafana'].volumes as string[]).map((v) => v.split(':'));
  t.ok(
    grafanaMounts.some(([source, target]) => source === './deploy/grafana/mcp-resume-gateway.json' && target!.startsWith(`${provider.options.path}/`)),
    'the dashboard is mounted where the provider loads dashboards',
  );
  t.ok(grafanaMounts.some(([source, target]) => source === './deploy/grafana/provisioning' && target === '/etc/grafana/provisioning'));

  const dashboard = JSON.parse(read('deploy/grafana/mcp-resume-gateway.json')) as Any;
  t.equal(dashboard.uid, 'mcp-resume-gateway');
  const ids = dashboard.panels.map((p: Any) => p.id);
  t.equal(new Set(ids).size, ids.length, 'panel ids are unique');
  for (const panel of dashboard.panels.filter((p: Any) => p.type !== 'row')) {
    t.equal(panel.datasource?.uid, '${datasource}', `panel "${panel.title}" uses the data source variable`);
    t.ok(panel.targets?.length > 0, `panel "${panel.title}" has queries`);
  }
  t.ok(dashboard.templating.list.some((v: Any) => v.name === 'datasource' && v.type === 'datasource'));

  withTool(t, 'promtool', 'promtool check rules', (promtool, t) => {
    execFileSync(promtool, ['check', 'rules', `${ROOT}deploy/prometheus/alerts.yml`], { stdio: 'pipe' });
    t.pass('promtool check rules accepts alerts.yml');
  });
});

t.test('alert rules', async (t) => {
  const rules = (parse(read('deploy/prometheus/alerts.yml')) as Any).groups.flatMap((g: Any) => g.rules);
  const prom = parse(read('deploy/prometheus/prometheus.yml')) as Any;
  const jobs = new Set(prom.scrape_configs.map((s: Any) => s.job_name));
  for (const rule of rules) {
    t.ok(rule.alert && rule.expr, `${rule.alert}: alert and expr`);
    t.ok(['warning', 'critical'].includes(rule.labels?.severity), `${rule.alert}: severity`);
    t.ok(rule.annotations?.summary && rule.annotations?.description, `${rule.alert}: summary and description`);
    for (const [, job] of String(rule.expr).matchAll(/job="([^"]+)"/g)) t.ok(jobs.has(job), `${rule.alert}: job ${job} is scraped`);
  }
  const names: string[] = rules.map((r: Any) => r.alert);
  t.equal(new Set(names).size, names.length, 'alert names are unique');
  for (const wanted of [/gap/, /owner_gone/, /replica_up/, /store_errors/, /up\{job=/, /status=~"5\.\."/]) {
    t.ok(rules.some((r: Any) => wanted.test(r.expr)), `a rule on ${wanted}`);
  }
});

t.test('kubernetes manifests agree with the configuration, the image and each other', async (t) => {
  const kustomization = parse(read('deploy/k8s/kustomization.yaml')) as Any;
  const listed = new Set<string>(kustomization.resources);
  for (const file of new Set(k8sDocs.map((d) => d.file))) t.ok(listed.has(file), `${file} is in kustomization.yaml`);
  for (const file of listed) t.ok(existsSync(`${ROOT}deploy/k8s/${file}`), `${file} exists`);

  const deployment = k8s('Deployment', 'mcp-resume-gateway');
  const pod = deployment.spec.template.spec;
  const container = pod.containers.find((c: Any) => c.name === 'gateway');
  t.equal(container.image, IMAGE, 'the image compose builds');

  // The configuration: the ConfigMap, where MCP_GATEWAY_CONFIG says, with the pod's environment.
  const env: Record<string, string> = {};
  for (const variable of container.env) {
    if (variable.value !== undefined) env[variable.name] = variable.value;
    else if (variable.valueFrom?.secretKeyRef && !variable.valueFrom.secretKeyRef.optional) env[variable.name] = `redis://secret-value:6379`;
  }
  const configPath: string = env['MCP_GATEWAY_CONFIG']!;
  const mount = container.volumeMounts.find((m: Any) => configPath.startsWith(`${m.mountPath}/`));
  t.ok(mount, 'MCP_GATEWAY_CONFIG is inside a mounted volume');
  const volume = pod.volumes.find((v: Any) => v.name === mount.name);
  const configMap = k8s('ConfigMap', volume.configMap.name);
  const key = configPath.slice(mount.mountPath.length + 1);
  const config = loadWith(configMap.data[key], `configmap.yaml:${key}`, env, t)!;
  t.equal(config.store.type, 'redis', 'the pods share redis');
  t.equal(config.store.url, 'redis://secret-value:6379', 'store.url comes from the Secret');
  t.equal(config.listen.host, '0.0.0.0');
  t.equal(config.admin.host, '0.0.0.0');
  const without = parseConfig(configMap.data[key], 'x', { ...env, MCP_GATEWAY_CURSOR_SECRET: '' });
  t.equal(without.cursor.secret, undefined, 'the optional cursor secret may be absent');

  const port = (name: string) => container.ports.find((p: Any) => p.name === name)?.containerPort;
  t.equal(port('mcp'), config.listen.port, 'containerPort mcp is listen.port');
  t.equal(port('admin'), config.admin.port, 'containerPort admin is admin.port');
  t.same({ path: container.readinessProbe.httpGet.path, port: container.readinessProbe.httpGet.port }, { path: '/readyz', port: 'admin' }, 'readiness: /readyz on the admin port');
  t.same({ path: container.livenessProbe.httpGet.path, port: container.livenessProbe.httpGet.port }, { path: '/healthz', port: 'admin' }, 'liveness: /healthz on the admin port');

  const preStop: string[] = container.lifecycle.preStop.exec.command;
  t.equal(preStop[0], 'sleep');
  const preStopMs = Number(preStop[1]) * 1000;
  t.ok(preStopMs > 0, 'preStop sleeps while the endpoints update');
  t.ok(
    pod.terminationGracePeriodSeconds * 1000 >= preStopMs + config.shutdown.graceMs + EXIT_MARGIN_MS,
    `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} s > preStop ${preStopMs} ms + shutdown.graceMs ${config.shutdown.graceMs} ms + margin`,
  );
  for (const kind of ['requests', 'limits']) {
    t.ok(container.resources[kind]?.cpu && container.resources[kind]?.memory, `resources.${kind}: cpu and memory`);
  }
  t.equal(pod.securityContext.runAsNonRoot, true);
  t.ok(pod.securityContext.runAsUser > 0, 'a non-root uid');
  t.equal(container.securityContext.allowPrivilegeEscalation, false);
  const dockerUser = /^USER\s+(\d+)/m.exec(read('Dockerfile'))?.[1];
  t.equal(String(pod.securityContext.runAsUser), dockerUser, 'the uid of the Dockerfile USER');

  const podLabels = deployment.spec.template.metadata.labels;
  const selects = (selector: Record<string, string>, labels: Record<string, string>) => Object.entries(selector).every(([k, v]) => labels[k] === v);
  t.ok(selects(deployment.spec.selector.matchLabels, podLabels), 'the Deployment selects its pods');

  const service = k8s('Service', 'mcp-resume-gateway');
  t.ok(selects(service.spec.selector, podLabels), 'the Service selects the gateway pods');
  t.same(service.spec.ports.map((p: Any) => p.targetPort), ['mcp'], 'the Service exposes the MCP port only');
  t.notOk(service.spec.sessionAffinity && service.spec.sessionAffinity !== 'None', 'no session affinity needed');

  const admin = k8s('Service', 'mcp-resume-gateway-admin');
  t.ok(selects(admin.spec.selector, podLabels), 'the admin Service selects the gateway pods');
  t.same(admin.spec.ports.map((p: Any) => p.targetPort), ['admin']);
  t.equal(admin.spec.publishNotReadyAddresses, true, 'unready pods are scraped too');

  const monitor = k8s('ServiceMonitor', 'mcp-resume-gateway');
  t.ok(selects(monitor.spec.selector.matchLabels, admin.metadata.labels), 'the ServiceMonitor selects the admin Service');
  t.notOk(selects(monitor.spec.selector.matchLabels, service.metadata.labels), 'and not the client-facing one');
  t.same(monitor.spec.endpoints.map((e: Any) => [e.port, e.path]), [[admin.spec.ports[0].name, '/metrics']], 'scrapes /metrics on the admin port');
  const prom = parse(read('deploy/prometheus/prometheus.yml')) as Any;
  t.equal(admin.metadata.labels[monitor.spec.jobLabel], prom.scrape_configs[0].job_name, 'job name as in compose (the alerts match it)');

  const pdb = k8s('PodDisruptionBudget', 'mcp-resume-gateway');
  t.ok(selects(pdb.spec.selector.matchLabels, podLabels), 'the PodDisruptionBudget selects the gateway pods');
  const hpa = k8s('HorizontalPodAutoscaler', 'mcp-resume-gateway');
  t.same(hpa.spec.scaleTargetRef, { apiVersion: 'apps/v1', kind: 'Deployment', name: deployment.metadata.name });
  t.ok(hpa.spec.metrics.some((m: Any) => m.resource?.name === 'cpu'), 'scales on cpu');
  t.ok(hpa.spec.minReplicas >= 2, 'at least two gateways, so that a drained pod has somewhere to send its clients');
  t.ok(pdb.spec.maxUnavailable === 1 || pdb.spec.minAvailable >= 1);

  // The replicas: pods of the StatefulSet behind its headless Service, with ids as configured.
  const statefulSet = k8s('StatefulSet', 'mcp-replica');
  const headless = k8s('Service', statefulSet.spec.serviceName);
  t.equal(headless.spec.clusterIP, 'None', 'replicas behind a headless Service');
  const replicaContainer = statefulSet.spec.template.spec.containers[0];
  t.equal(replicaContainer.image, IMAGE);
  t.same(replicaContainer.command, ['node', 'demo/dist/replica.js']);
  const replicaPort = replicaContainer.ports.find((p: Any) => p.name === 'mcp').containerPort;
  t.same(
    config.replicas.map((r) => ({ id: r.id, ...hostPort(r.url) })),
    Array.from({ length: statefulSet.spec.replicas }, (_, i) => ({ id: `mcp-replica-${i}`, host: `mcp-replica-${i}.${headless.metadata.name}`, port: replicaPort })),
    'every replica pod is configured, by pod name and stable DNS name',
  );
  t.ok(replicaContainer.args.includes('$(POD_NAME)'), 'the replica id is the pod name');

  const rule = k8s('PrometheusRule', 'mcp-resume-gateway');
  t.same(rule.spec, parse(read('deploy/prometheus/alerts.yml')), 'the PrometheusRule carries alerts.yml (node scripts/ops-check.mjs --write)');

  withTool(t, 'kubectl', 'kubectl kustomize', (kubectl, t) => {
    const built = execFileSync(kubectl, ['kustomize', `${ROOT}deploy/k8s`], { encoding: 'utf8' });
    t.equal(parseAllDocuments(built).length, k8sDocs.length, 'kubectl kustomize builds every resource');
  });
});

/**
 * A check that needs an installed tool, as a subtest of its own: where the tool is missing it is
 * skipped with the reason in tap's output, never passed in silence. A check that throws fails.
 */
function withTool(t: Test, tool: string, title: string, check: (path: string, t: Test) => void): void {
  const path = spawnable(tool);
  t.test(title, { skip: path === undefined ? `${tool} is not installed` : false }, async (t) => check(path!, t));
}

/** The path of a tool when it is installed. */
function spawnable(name: string): string | undefined {
  for (const dir of (process.env['PATH'] ?? '').split(':')) {
    if (dir && existsSync(`${dir}/${name}`)) return `${dir}/${name}`;
  }
  return undefined;
}
