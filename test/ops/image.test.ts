/**
 * The Dockerfile, without a docker engine: its instructions are checked as written (multi-stage,
 * non-root, HEALTHCHECK on /healthz, exec-form ENTRYPOINT, EXPOSE as configured), then its build
 * and start steps are replayed in clean directories: each stage gets its own directory, COPY
 * copies from the build context (the repository's tracked files, as a fresh clone has them) or
 * from an earlier stage, RUN runs its command there. The runtime stage then has to validate its
 * configuration, serve /healthz, pass its own HEALTHCHECK, carry an MCP session to a demo replica
 * (so the production install holds every module dist/ needs), and exit 0 on SIGTERM.
 *
 * The replay runs `npm ci` three times (about 85 s here one after the other, from npm's cache; the
 * runtime stage's two run beside the build stage's install and build, as BuildKit runs stages);
 * MCP_GATEWAY_OPS_IMAGE=0 skips it. Paths inside the image are relative to its WORKDIR.
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import t from 'tap';
import { parse, stringify } from 'yaml';
import { parseConfig } from '../../src/config/load.js';
import { jsonLine, readyLine, spawnProcess, type Proc } from '../helpers/processes.js';
import { bound, waitFor } from '../helpers/wait.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const read = (path: string) => readFileSync(`${ROOT}${path}`, 'utf8');
const execFileAsync = promisify(execFile);
/**
 * The replay as a whole; it took about 70 s on a 2-core machine with a warm npm cache before the
 * demo's own install (about 12 s more) joined the gateway's two.
 */
const REPLAY_BOUND_MS = 900_000;
/** One step (`npm ci` of a stage, mostly): over 5 minutes were seen for the whole replay under a load average of 20. */
const STEP_BOUND_MS = 600_000;
/** Bounds each start and check of the image's programs; a limit on failure, not an expected duration. */
const START_BOUND_MS = bound(15_000);

interface Instruction {
  op: string;
  args: string;
  line: number;
}
interface Stage {
  name: string;
  from: string;
  instructions: Instruction[];
}

/** Instructions per stage, continuation lines joined, comments dropped, ARG defaults applied to FROM. */
function parseDockerfile(text: string): Stage[] {
  const stages: Stage[] = [];
  const args = new Map<string, string>();
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const start = i;
    let line = lines[i]!;
    if (/^\s*(#|$)/.test(line)) continue;
    while (line.endsWith('\\') && i + 1 < lines.length) line = `${line.slice(0, -1)} ${lines[++i]!.trim()}`;
    const [, op, rest] = /^\s*(\S+)\s*(.*)$/.exec(line)!;
    const instruction = { op: op!.toUpperCase(), args: rest!.trim(), line: start + 1 };
    if (instruction.op === 'ARG' && stages.length === 0) {
      const [name, value = ''] = instruction.args.split('=');
      args.set(name!, value);
    } else if (instruction.op === 'FROM') {
      const [image, , name] = instruction.args.replace(/\$\{(\w+)\}/g, (_, v: string) => args.get(v) ?? '').split(/\s+/);
      stages.push({ name: name ?? String(stages.length), from: image!, instructions: [] });
    } else {
      stages.at(-1)?.instructions.push(instruction);
    }
  }
  return stages;
}

// The whole file, replay included, beyond the runner's default per-file timeout.
t.setTimeout(REPLAY_BOUND_MS + 60_000);

const dockerfile = parseDockerfile(read('Dockerfile'));
const runtime = dockerfile.at(-1)!;
const all = (stage: Stage, op: string) => stage.instructions.filter((i) => i.op === op);
const one = (stage: Stage, op: string) => {
  const found = all(stage, op);
  if (found.length !== 1) throw new Error(`expected one ${op} in stage ${stage.name}, found ${found.length}`);
  return found[0]!;
};
/** The flags of RUN and COPY (--mount=..., --from=...) apart from the rest. */
const flags = (args: string) => {
  const words = args.split(/\s+/);
  const options = new Map<string, string>();
  while (words[0]?.startsWith('--')) {
    const [name, value = ''] = words.shift()!.slice(2).split('=');
    options.set(name!, value);
  }
  return { options, rest: words.join(' ') };
};

t.test('the Dockerfile as written', async (t) => {
  t.ok(dockerfile.length >= 2, 'multi-stage');
  for (const stage of dockerfile) t.match(stage.from, /^node:20-(slim|alpine)/, `stage ${stage.name} is FROM node:20 slim or alpine`);
  const build = dockerfile[0]!;
  const buildRuns = all(build, 'RUN').map((r) => flags(r.args).rest);
  t.ok(buildRuns.some((r) => /^npm ci\b/.test(r) && !r.includes('--omit=dev')), 'the build stage installs dev dependencies');
  t.ok(buildRuns.includes('npm run build'), 'and builds');
  const runtimeRuns = all(runtime, 'RUN').map((r) => flags(r.args).rest);
  t.ok(runtimeRuns.some((r) => /^npm ci\b.*--omit=dev/.test(r)), 'the runtime stage installs production dependencies only');
  const copied = all(runtime, 'COPY').map((c) => flags(c.args));
  t.same(
    copied.map((c) => c.rest.split(/\s+/).at(-1)),
    ['./', './demo/', './dist', './demo/dist', './config', './config/gateway.yaml'],
    'the runtime stage holds package files, dist/, the demo package and config/ only',
  );
  t.equal(copied.find((c) => c.rest.endsWith(' ./dist'))?.options.get('from'), build.name, 'dist/ comes from the build stage');
  t.equal(copied.find((c) => c.rest.endsWith(' ./demo/dist'))?.options.get('from'), build.name, 'and so does demo/dist/');
  t.ok(runtimeRuns.some((r) => /^npm ci --prefix demo\b.*--omit=dev/.test(r)), "the demo's own dependencies are installed in demo/");

  const user = one(runtime, 'USER').args;
  t.match(user, /^\d+(:\d+)?$/, 'USER is numeric (Kubernetes runAsNonRoot can verify it)');
  t.not(user.split(':')[0], '0', 'and not root');

  t.same(JSON.parse(one(runtime, 'ENTRYPOINT').args), ['node', 'dist/cli.js'], 'exec-form ENTRYPOINT: node is PID 1 and gets SIGTERM');

  const config = parseConfig(read('deploy/config/gateway.container.yaml'), 'gateway.container.yaml', {});
  const exposed = one(runtime, 'EXPOSE').args.split(/\s+/).map(Number).sort();
  t.same(exposed, [config.listen.port, config.admin.port].sort(), 'EXPOSE: the listen and admin ports of the container configuration');

  const healthcheck = one(runtime, 'HEALTHCHECK').args;
  const command = JSON.parse(healthcheck.slice(healthcheck.indexOf('CMD') + 3)) as string[];
  t.equal(command[0], 'node', 'HEALTHCHECK needs no curl');
  t.match(command.join(' '), /\/healthz/, 'HEALTHCHECK asks /healthz');
  t.match(command.join(' '), new RegExp(`MCP_GATEWAY_ADMIN_PORT\\|\\|${config.admin.port}\\b`), 'on the admin port of the container configuration');

  const ignored = read('.dockerignore').split('\n').filter((l) => l.trim() !== '' && !l.startsWith('#'));
  for (const dir of ['node_modules', 'dist', 'build', '.git', 'demo/node_modules', 'demo/dist']) t.ok(ignored.includes(dir), `.dockerignore leaves out ${dir}`);
  t.ok(ignored.includes('!deploy/config/gateway.container.yaml'), 'but keeps the container configuration');
});

t.test('build and start steps, replayed in clean directories', { skip: process.env['MCP_GATEWAY_OPS_IMAGE'] === '0' && 'MCP_GATEWAY_OPS_IMAGE=0' }, async (t) => {
  const started = Date.now();
  const work = mkdtempSync(join(tmpdir(), 'gw-image-'));
  // Two node_modules trees: removed in the background, so that a loaded machine's slow disk does
  // not count against the runner's timeout.
  t.teardown(() => spawn('rm', ['-rf', work], { detached: true, stdio: 'ignore' }).unref());

  // The build context: what a fresh clone has (tracked files), plus the files this Dockerfile
  // copies that exist here but may not be committed yet.
  const context = join(work, 'context');
  const tracked = execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8' }).split('\0').filter((f) => f !== '');
  const copiedFromContext = dockerfile.flatMap((s) => all(s, 'COPY').map((c) => flags(c.args))).filter((c) => !c.options.has('from')).flatMap((c) => c.rest.split(/\s+/).slice(0, -1));
  for (const file of new Set([...tracked, ...copiedFromContext])) {
    if (!existsSync(join(ROOT, file))) continue;
    mkdirSync(dirname(join(context, file)), { recursive: true });
    cpSync(join(ROOT, file), join(context, file), { recursive: true });
  }

  // npm from its cache where it can; nothing of the caller's npm run (npm test) leaks in.
  const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('npm_') || k === 'npm_config_cache'));
  Object.assign(env, { npm_config_prefer_offline: 'true', npm_config_audit: 'false', npm_config_fund: 'false', npm_config_update_notifier: 'false' });

  // Each stage runs as soon as what it needs is there, as BuildKit runs them: a stage waits for an
  // earlier one only at its COPY --from, so the runtime stage installs its dependencies while the
  // build stage installs and builds.
  const dirs = new Map<string, string>();
  const stages = new Map<string, Promise<boolean>>();
  const timings: string[] = [];
  const replay = async (stage: Stage, dir: string): Promise<boolean> => {
    const stageEnv = { ...env };
    for (const { op, args, line } of stage.instructions) {
      if (op === 'ENV') {
        const [name, ...value] = args.split('=');
        stageEnv[name!] = value.join('=');
      } else if (op === 'COPY') {
        const { options, rest } = flags(args);
        const words = rest.split(/\s+/);
        const dest = join(dir, words.pop()!);
        let from = context;
        const earlier = options.get('from');
        if (earlier !== undefined) {
          const built = stages.get(earlier);
          if (built === undefined) {
            t.fail(`line ${line}: COPY --from=${earlier}: no earlier stage of that name`);
            return false;
          }
          // A stage that failed has said so.
          if (!(await built)) return false;
          from = dirs.get(earlier)!;
        }
        for (const source of words) {
          // Paths in a stage are under its WORKDIR, /app.
          const path = join(from, source.replace(/^\/app\//, ''));
          t.ok(existsSync(path), `line ${line}: COPY ${source} exists`);
          const target = words.length > 1 || dest.endsWith('/') ? join(dest, source.split('/').at(-1)!) : dest;
          mkdirSync(dirname(target), { recursive: true });
          cpSync(path, target, { recursive: true });
        }
      } else if (op === 'RUN') {
        const command = flags(args).rest;
        const begun = Date.now();
        try {
          await execFileAsync('sh', ['-c', command], { cwd: dir, env: stageEnv, timeout: STEP_BOUND_MS, maxBuffer: 64 * 1024 * 1024 });
        } catch (err) {
          const e = err as { stderr?: string; stdout?: string };
          t.fail(`line ${line}: RUN ${command}: ${e.stderr ?? ''}${e.stdout ?? ''}`.slice(0, 4000));
          return false;
        }
        timings.push(`${stage.name}: ${command} ${((Date.now() - begun) / 1000).toFixed(1)} s`);
      }
    }
    return true;
  };
  for (const stage of dockerfile) {
    const dir = join(work, `stage-${stage.name}`);
    mkdirSync(dir);
    dirs.set(stage.name, dir);
    stages.set(stage.name, replay(stage, dir));
  }
  if (!(await Promise.all(stages.values())).every(Boolean)) return;
  const image = dirs.get(runtime.name)!;
  t.notOk(existsSync(join(image, 'src')), 'no sources in the runtime image');
  t.notOk(existsSync(join(image, 'node_modules', 'typescript')), 'no dev dependencies in the runtime image');
  for (const demoOnly of ['@modelcontextprotocol/sdk', 'zod']) {
    t.notOk(existsSync(join(image, 'node_modules', demoOnly)), `${demoOnly} is not among the gateway's dependencies`);
    t.ok(existsSync(join(image, 'demo', 'node_modules', demoOnly)), `${demoOnly} is installed for the demo`);
  }
  const entrypoint = JSON.parse(one(runtime, 'ENTRYPOINT').args) as string[];
  const [program, ...entryArgs] = entrypoint;
  const runEnv: NodeJS.ProcessEnv = { ...env, NODE_ENV: 'production' };
  delete runEnv['MCP_GATEWAY_CONFIG'];

  // check-config with no --config: the image's own config/gateway.yaml, the container configuration.
  const checked = execFileSync(program!, [...entryArgs, 'check-config'], { cwd: image, env: runEnv, encoding: 'utf8', timeout: START_BOUND_MS });
  t.match(checked, /^config\/gateway\.yaml: ok \(3 replicas, store memory\)/, 'the image validates its own configuration');

  // Start it: the image's configuration with loopback ports and one demo replica from the image.
  const replica = spawnProcess('node', ['demo/dist/replica.js', '--id', 'r1', '--port', '0'], { cwd: image, env: runEnv, stdio: ['ignore', 'pipe', 'inherit'], t });
  const replicaUrl = String((await firstLine(replica, 'the demo replica', (l) => l['event'] === 'listening'))['url']);
  const config = parse(readFileSync(join(image, 'config/gateway.yaml'), 'utf8')) as Record<string, unknown>;
  Object.assign(config, {
    listen: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    replicas: [{ id: 'r1', url: replicaUrl }],
    health: { intervalMs: 200 },
  });
  const file = join(work, 'gateway.yaml');
  writeFileSync(file, stringify(config));
  const gateway = spawnProcess(program!, [...entryArgs, '--config', file], { cwd: image, env: runEnv, stdio: ['ignore', 'pipe', 'inherit'], t });
  const listening = await firstLine(gateway, 'the gateway', (l) => l['msg'] === 'gateway listening');
  const adminUrl = String(listening['admin']);
  const mcpUrl = String(listening['mcp']);

  const healthz = await fetch(`${adminUrl}/healthz`);
  t.equal(healthz.status, 200, '/healthz 200');
  await healthz.text();
  await t.resolves(
    waitFor('/readyz 200', START_BOUND_MS, async () => (await fetch(`${adminUrl}/readyz`)).status === 200),
    '/readyz 200 once the replica is probed',
  );

  // The HEALTHCHECK command itself, as docker runs it (CMD exec form, in the WORKDIR).
  const healthcheck = one(runtime, 'HEALTHCHECK').args;
  const [hcProgram, ...hcArgs] = JSON.parse(healthcheck.slice(healthcheck.indexOf('CMD') + 3)) as string[];
  const adminPort = new URL(adminUrl).port;
  execFileSync(hcProgram!, hcArgs, { cwd: image, env: { ...runEnv, MCP_GATEWAY_ADMIN_PORT: adminPort }, timeout: START_BOUND_MS });
  t.pass('the HEALTHCHECK command succeeds');

  const initialize = await fetch(mcpUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'image-test', version: '1' } } }),
  });
  t.equal(initialize.status, 200, 'initialize through the gateway');
  t.ok(initialize.headers.get('mcp-session-id'), 'a session is bound');
  await initialize.text();

  const { code } = await gateway.stop('SIGTERM', START_BOUND_MS);
  t.equal(code, 0, 'SIGTERM: exit 0');
  let failed = false;
  try {
    execFileSync(hcProgram!, hcArgs, { cwd: image, env: { ...runEnv, MCP_GATEWAY_ADMIN_PORT: adminPort }, timeout: START_BOUND_MS, stdio: 'pipe' });
  } catch {
    failed = true;
  }
  t.ok(failed, 'the HEALTHCHECK command fails once the gateway is gone');

  // How long it took is reported, not asserted: the file's timeout bounds it.
  t.comment(`replay took ${((Date.now() - started) / 1000).toFixed(1)} s: ${timings.join('; ')}`);
});

/** The first JSON line on the process's stdout that `match` accepts. */
function firstLine(proc: Proc, what: string, match: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
  return readyLine(
    proc,
    what,
    (text) => {
      const line = jsonLine(text);
      return line !== undefined && match(line) ? line : undefined;
    },
    START_BOUND_MS,
  );
}
