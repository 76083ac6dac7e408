/**
 * A soak (docs/development.md, "The soak"): two gateway processes on one real Redis behind the
 * cutting balancer, demo replicas with and without an event log, and a few hundred sessions, each
 * keeping its GET stream open and making tool calls whose events come on that stream, while
 * faults are drawn at random from a printed seed: every connection cut, an owner replica killed
 * (SIGKILL) and restarted, the store paused (SIGSTOP, then SIGCONT). At the end it checks:
 *   - every event of a call that answered was delivered exactly once, in order, or signalled
 *     (notifications/gateway/stream_reset, or the session's end with 404);
 *   - every call settled once: its result, -32010, or a 404 for a session already gone;
 *   - no 5xx but 503s within a fault (and its grace);
 *   - after the warm-up, the linear-regression slopes of the gateways' heap and resident memory
 *     under the bounds given;
 *   - after the drain (every session deleted), open and held streams and unrecorded events at 0 on
 *     both gateways, and their cached session bindings no more than the sessions whose initialize
 *     was cut before its answer named them.
 * It prints the figures and exits 1 when a check failed.
 *
 *   npm run soak -- --minutes 30 [--sessions 200 --seed N --fault-every-ms 8000]
 */
import { randomInt } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { startBalancer } from '../test/helpers/balancer.js';
import { startGatewayProcess, type GatewayProcess } from '../test/helpers/gateway-process.js';
import { initializeBody, MCP_ACCEPT, PROTOCOL_VERSION, toolCallBody } from '../test/helpers/http.js';
import { wireOpen, wireRequest, type WireEvent, type WireGet, type WireStream } from '../test/helpers/model-wire.js';
import type { Teardown } from '../test/helpers/processes.js';
import { startRedisServer } from '../test/helpers/redis-server.js';
import { spawnReplica, type ReplicaProcess } from '../test/helpers/replicas.js';
import { prng } from '../test/helpers/prng.js';
import { scrapeMetric } from '../test/helpers/scrape.js';
import { runIfMain } from './lib/main.js';

export interface SoakOptions {
  durationMs: number;
  sessions: number;
  seed: number;
  /** Mean time between two faults; each is drawn between half and one and a half of it. */
  faultEveryMs: number;
  /** Samples before this are left out of the slopes (the fleet filling up). */
  warmupMs: number;
  heapSlopeMiBPerMin: number;
  rssSlopeMiBPerMin: number;
  /** Progress lines (the figures are returned either way). */
  log?: (line: string) => void;
}

export interface SoakReport {
  passed: boolean;
  violations: string[];
  figures: Record<string, number | string>;
}

/**
 * Bounds on failure, not expected durations: every wait of a client ends by then (a loaded 2-core
 * machine stalls processes for seconds).
 */
const REQUEST_MS = 60_000;
/** A 503 this long after a fault ended still counts as that fault's (a suspected replica waits for its next probe). */
const FAULT_GRACE_MS = 20_000;
/** Memory of the gateways sampled this often. */
const SAMPLE_MS = 2_000;
/** The drain's gauges must be back to 0 within this (held streams end with their session's DELETE). */
const DRAIN_MS = 90_000;
/** The store's command timeout: a stall of a loaded machine is not a store outage; a pause is longer. */
const STORE_TIMEOUT_MS = 2_000;
const PAUSE_MS = [3_000, 6_000] as const;
const KILLED_MS = [500, 3_000] as const;
/** Time a session waits between two calls. */
const THINK_MS = [500, 3_000] as const;
const RETRY_MS = [200, 1_000] as const;
const MiB = 1024 * 1024;

/** An integer in [lo, hi] drawn from `rng`. */
const between = (rng: ReturnType<typeof prng>, [lo, hi]: readonly [number, number]) => rng.int(lo, hi);

function shuffled<T>(rng: ReturnType<typeof prng>, items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = rng.int(0, i);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** Least-squares slope of y over x. */
export function slope(points: readonly { x: number; y: number }[]): number {
  const n = points.length;
  if (n < 2) return 0;
  const mx = points.reduce((s, p) => s + p.x, 0) / n;
  const my = points.reduce((s, p) => s + p.y, 0) / n;
  let num = 0;
  let den = 0;
  for (const p of points) {
    num += (p.x - mx) * (p.y - my);
    den += (p.x - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

/** The events of one call as its session's GET stream should bring them: seq 1..count. */
interface Expectation {
  call: number;
  count: number;
  next: number;
  /** The call answered: the replica sent every event, so each must arrive or be signalled. */
  answered: boolean;
  signalled: boolean;
}

interface Session {
  id: string;
  alive: boolean;
  cursor: string | undefined;
  cursors: Set<string>;
  expect: Expectation | undefined;
  /** The one before `expect`, when it settled without its result: its late events are not duplicates. */
  previous: Expectation | undefined;
  get: WireStream | undefined;
  /** Resolves once a GET stream of the session is open: its events are sent from then on. */
  opened: Promise<void>;
  open: () => void;
  /** Set when the session's client is done: its GET stream is not opened again. */
  stopped: boolean;
  reader: Promise<void> | undefined;
  /** Called once the reader has taken in what the GET stream brought (events, a signal, its end). */
  readonly waiters: Set<() => void>;
}

function wake(session: Session): void {
  for (const waiter of [...session.waiters]) waiter();
}

/** Resolves at the reader's next wake, or after `ms`. */
function nextWake(session: Session, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      session.waiters.delete(done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    session.waiters.add(done);
  });
}

export async function runSoak(t: Teardown, opts: SoakOptions): Promise<SoakReport> {
  const log = opts.log ?? (() => undefined);
  const rng = prng(opts.seed);
  const violations: string[] = [];
  const violate = (what: string) => {
    if (violations.length < 1000) violations.push(what);
    log(`violation: ${what}`);
  };
  const count = new Map<string, number>();
  const add = (name: string, n = 1) => count.set(name, (count.get(name) ?? 0) + n);

  const redis = await startRedisServer(t);
  const replicas: ReplicaProcess[] = [await spawnReplica(t, { id: 'r1' }), await spawnReplica(t, { id: 'r2', eventStore: false })];
  const settings = {
    store: { type: 'redis', url: redis.url, commandTimeoutMs: STORE_TIMEOUT_MS },
    replicas: replicas.map((r) => ({ id: r.id, url: r.url })),
    health: { intervalMs: 1_000, timeoutMs: 10_000 },
  };
  const gateways: GatewayProcess[] = [await startGatewayProcess(t, settings), await startGatewayProcess(t, settings)];
  const balancer = await startBalancer(t, gateways.map((g) => g.url));
  const url = balancer.url;
  log(`fleet: redis ${redis.url}, replicas ${replicas.map((r) => `${r.id} ${r.url}`).join(', ')}, gateways ${gateways.map((g) => g.url).join(', ')}`);

  const started = performance.now();
  const deadline = started + opts.durationMs;
  const running = () => performance.now() < deadline;

  // Faults, each with its window for the 503s it may cause.
  const windows: { from: number; to: number }[] = [];
  const inFault = (at: number) => windows.some((w) => at >= w.from && at <= w.to + FAULT_GRACE_MS);
  const faults = (async () => {
    // Each kind once in every three, in an order drawn anew: a short run sees all of them.
    let round: ('cut' | 'kill' | 'pause')[] = [];
    for (;;) {
      await delay(between(rng, [opts.faultEveryMs / 2, (opts.faultEveryMs * 3) / 2]));
      if (!running()) return;
      if (round.length === 0) round = [...shuffled(rng, ['cut', 'kill', 'pause'] as const)];
      const kind = round.pop()!;
      const window = { from: performance.now(), to: Infinity };
      windows.push(window);
      add(`fault ${kind}`);
      if (kind === 'cut') {
        balancer.cut();
      } else if (kind === 'kill') {
        const replica = rng.pick(replicas);
        log(`fault: kill ${replica.id}`);
        await replica.kill('SIGKILL');
        await delay(between(rng, KILLED_MS));
        await replica.restart();
      } else {
        log('fault: store paused');
        redis.pause();
        await delay(between(rng, PAUSE_MS));
        redis.resume();
      }
      window.to = performance.now();
    }
  })();

  const headers = (session?: Session): Record<string, string> => ({
    'content-type': 'application/json',
    accept: MCP_ACCEPT,
    'mcp-protocol-version': PROTOCOL_VERSION,
    ...(session && { 'mcp-session-id': session.id }),
  });

  /** Counts a status; a 5xx is a violation unless it is a 503 within a fault. */
  const status = (what: string, code: number) => {
    add(`status ${code}`);
    if (code >= 500 && !(code === 503 && inFault(performance.now()))) violate(`${what} answered ${code}`);
  };

  /** A request whose connection failed: a cut, a killed owner; a hang is a violation. */
  const failed = (what: string, err: unknown) => {
    const message = err instanceof Error ? err.message : String(err);
    if (message.includes('not answered within') || message.includes('took longer than')) violate(`${what}: ${message}`);
    else add('connections failed');
  };

  /** Orphans: initializes whose answer never named their session (its binding stays cached). */
  let orphans = 0;
  const all = new Set<Session>();

  async function initialize(): Promise<Session | undefined> {
    add('initializes');
    let answer: WireGet;
    try {
      answer = await wireOpen(url, { method: 'POST', headers: headers(), body: initializeBody(), timeoutMs: REQUEST_MS });
    } catch (err) {
      orphans++;
      failed('initialize', err);
      return undefined;
    }
    const code = answer.kind === 'stream' ? answer.status : answer.response.status;
    status('initialize', code);
    const id = (answer.kind === 'stream' ? answer.headers : answer.response.headers)['mcp-session-id'];
    if (answer.kind === 'stream') answer.stream.close();
    if (code !== 200 || typeof id !== 'string') return undefined;
    let open = () => undefined as void;
    const opened = new Promise<void>((resolve) => (open = resolve));
    const session: Session = { id, alive: true, cursor: undefined, cursors: new Set(), expect: undefined, previous: undefined, get: undefined, opened, open, stopped: false, reader: undefined, waiters: new Set() };
    all.add(session);
    try {
      const ack = await wireRequest(url, { method: 'POST', headers: headers(session), body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), timeoutMs: REQUEST_MS });
      status('notifications/initialized', ack.status);
      if (ack.status === 404) session.alive = false;
    } catch (err) {
      failed('notifications/initialized', err);
    }
    return session;
  }

  /** What a GET stream brings: the events of the session's current call, in order, once each. */
  function onGetEvent(session: Session, event: WireEvent): void {
    if (event.id !== undefined) {
      if (session.cursors.has(event.id)) violate(`session ${session.id}: cursor ${event.id} delivered twice`);
      session.cursors.add(event.id);
      session.cursor = event.id;
    }
    let message: { method?: string; params?: { logger?: string; data?: { seq?: number } } };
    try {
      message = JSON.parse(event.data ?? '') as typeof message;
    } catch {
      return;
    }
    if (message.method === 'notifications/gateway/stream_reset') {
      add('stream resets');
      for (const e of [session.expect, session.previous]) if (e) e.signalled = true;
      return;
    }
    if (message.method !== 'notifications/message' || message.params?.logger !== 'emit') return;
    const seq = message.params.data?.seq;
    add('events delivered');
    const fits = (e: Expectation | undefined) => e !== undefined && e.next === seq && seq <= e.count;
    const e = fits(session.expect) ? session.expect : fits(session.previous) && !session.previous!.answered ? session.previous : undefined;
    if (e === undefined) {
      // After a signal the events before it may have been skipped: the next one counts again.
      const current = session.expect;
      if (current?.signalled && typeof seq === 'number' && seq > current.next && seq <= current.count) {
        current.next = seq + 1;
        return;
      }
      violate(`session ${session.id}: event seq ${seq} of no call expecting it (call ${current?.call}, next ${current?.next}): a duplicate or out of order`);
      return;
    }
    e.next++;
  }

  /** Keeps the session's GET stream open, resuming from its last cursor whenever it ends. */
  async function keepGet(session: Session): Promise<void> {
    let everOpen = false;
    // Past the end of the run a stream is opened again only for the events of a call under way.
    while (session.alive && !session.stopped && (everOpen || running())) {
      const h: Record<string, string> = { accept: 'text/event-stream', 'mcp-session-id': session.id, 'mcp-protocol-version': PROTOCOL_VERSION };
      if (session.cursor !== undefined) h['last-event-id'] = session.cursor;
      let answer: WireGet;
      try {
        answer = await wireOpen(url, { method: 'GET', headers: h, timeoutMs: REQUEST_MS });
      } catch (err) {
        failed('GET', err);
        await delay(between(rng, RETRY_MS));
        continue;
      }
      if (answer.kind === 'answer') {
        status('GET', answer.response.status);
        if (answer.response.status === 404) {
          session.alive = false;
          for (const e of [session.expect, session.previous]) if (e) e.signalled = true;
        } else if (answer.response.status === 204) {
          // The cursor of a stream the gateway ended on purpose: settled; the next GET is a plain one.
          session.cursor = undefined;
        } else await delay(between(rng, RETRY_MS));
        continue;
      }
      status('GET', answer.status);
      add(`GET ${answer.headers['mcp-resumption'] ?? 'plain'}`);
      const stream = answer.stream;
      if (session.stopped) {
        stream.close();
        break;
      }
      session.get = stream;
      everOpen = true;
      session.open();
      let seen = 0;
      while (!stream.ended || seen < stream.events.length) {
        await stream.until(() => stream.ended || stream.events.length > seen, REQUEST_MS);
        while (seen < stream.events.length) onGetEvent(session, stream.events[seen++]!);
        wake(session);
      }
      session.get = undefined;
    }
    wake(session);
  }

  let calls = 0;
  const traces = new Map<string, string>();
  /** One tools/call that emits on the GET stream; settles with its result, -32010 or a 404. */
  async function call(session: Session): Promise<void> {
    const id = ++calls;
    const expect: Expectation = { call: id, count: between(rng, [1, 4]), next: 1, answered: false, signalled: false };
    if (session.expect && !session.expect.answered) session.previous = session.expect;
    else session.previous = undefined;
    session.expect = expect;
    add('calls');
    traces.set(session.id, `post call ${id}`);
    const body = toolCallBody('emit', { count: expect.count, intervalMs: between(rng, [0, 10]) }, id);
    let settled: string | undefined;
    let postCursor: string | undefined;
    const read = (events: readonly WireEvent[]) => {
      for (const event of events) {
        if (event.id !== undefined) postCursor = event.id;
        let message: { id?: number; result?: unknown; error?: { code?: number } };
        try {
          message = JSON.parse(event.data ?? '') as typeof message;
        } catch {
          continue;
        }
        if (message.id !== id || settled !== undefined) continue;
        if (message.result !== undefined) settled = 'result';
        else if (message.error?.code === -32010) settled = '-32010';
        else violate(`call ${id}: error ${JSON.stringify(message.error)}`);
      }
    };
    const follow = async (answer: WireGet, what: string): Promise<boolean> => {
      if (answer.kind === 'answer') {
        status(what, answer.response.status);
        if (answer.response.status === 404) {
          settled = '404';
          session.alive = false;
        }
        return answer.response.status !== 503 && answer.response.status !== 409;
      }
      status(what, answer.status);
      const stream = answer.stream;
      const over = await stream.until(() => stream.ended || (read(stream.events.splice(0)), settled !== undefined), REQUEST_MS);
      read(stream.events.splice(0));
      if (!over) violate(`call ${id}: ${what} stream neither answered nor ended within ${REQUEST_MS} ms`);
      stream.close();
      return true;
    };
    try {
      await follow(await wireOpen(url, { method: 'POST', headers: headers(session), body, timeoutMs: REQUEST_MS }), 'tools/call');
    } catch (err) {
      failed('tools/call', err);
    }
    traces.set(session.id, `resume call ${id}`);
    // A POST stream that ended before the response: resumed from its last cursor, as a client does.
    for (let attempt = 0; settled === undefined && postCursor !== undefined && attempt < 20 && session.alive; attempt++) {
      const h = { accept: 'text/event-stream', 'mcp-session-id': session.id, 'mcp-protocol-version': PROTOCOL_VERSION, 'last-event-id': postCursor };
      add('POST streams resumed');
      try {
        if (!(await follow(await wireOpen(url, { method: 'GET', headers: h, timeoutMs: REQUEST_MS }), 'POST stream resumption'))) await delay(between(rng, RETRY_MS));
      } catch (err) {
        failed('POST stream resumption', err);
        await delay(between(rng, RETRY_MS));
      }
    }
    if (settled === undefined) {
      // Cut before any event named a position: the client cannot know the outcome, nor ask.
      add(postCursor === undefined ? 'calls cut before their first event' : 'calls unsettled');
      if (postCursor !== undefined) violate(`call ${id}: not settled after its POST stream was resumed`);
      return;
    }
    add(`calls settled ${settled}`);
    if (settled !== 'result') return;
    expect.answered = true;
    add('events emitted', expect.count);
    const done = () => expect.next > expect.count || expect.signalled || !session.alive;
    traces.set(session.id, `events of call ${id}`);
    const until = performance.now() + REQUEST_MS;
    while (!done() && performance.now() < until) {
      await nextWake(session, Math.max(1, until - performance.now()));
    }
    if (expect.next > expect.count) return;
    if (expect.signalled || !session.alive) add('events signalled', expect.count - expect.next + 1);
    else violate(`session ${session.id}: call ${id}: events ${expect.next}..${expect.count} neither delivered nor signalled within ${REQUEST_MS} ms`);
  }

  const phases = new Map<number, string>();
  async function client(index: number): Promise<void> {
    // Spread the start so that initializes are not a storm of their own.
    await delay(index * 20);
    while (running()) {
      phases.set(index, 'initialize');
      const session = await initialize();
      if (session === undefined) {
        await delay(between(rng, RETRY_MS));
        continue;
      }
      session.reader = keepGet(session);
      // A replica drops what it sends to a GET stream that is not open yet.
      await Promise.race([session.opened, session.reader]);
      phases.set(index, 'opening');
      while (session.alive && running()) {
        phases.set(index, `call ${session.id}`);
        await call(session);
        phases.set(index, 'think');
        await delay(between(rng, THINK_MS));
      }
      if (!session.alive) add('sessions lost');
      session.stopped = true;
      session.get?.close();
      phases.set(index, 'reader');
      await session.reader;
    }
    phases.delete(index);
  }

  // Memory of the gateway processes, sampled until the drain.
  const samples = gateways.map(() => ({ heap: [] as { x: number; y: number }[], rss: [] as { x: number; y: number }[] }));
  const sampling = (async () => {
    while (running()) {
      const at = (performance.now() - started) / 60_000;
      await Promise.all(
        gateways.map(async (g, i) => {
          try {
            samples[i]!.heap.push({ x: at, y: (await scrapeMetric(g.adminUrl, 'nodejs_heap_size_used_bytes')) / MiB });
            samples[i]!.rss.push({ x: at, y: (await scrapeMetric(g.adminUrl, 'process_resident_memory_bytes')) / MiB });
          } catch {
            add('memory samples missed');
          }
        }),
      );
      await delay(SAMPLE_MS);
    }
  })();

  log(`soak: ${opts.sessions} sessions for ${Math.round(opts.durationMs / 1000)} s, seed ${opts.seed}`);
  const debug = setTimeout(() => log(`late: ${JSON.stringify([...phases].map(([i, p]) => `${i} ${p} ${traces.get(p.slice(5)) ?? ''}`))}`), opts.durationMs + 10_000);
  await Promise.all(Array.from({ length: opts.sessions }, (_, i) => client(i)));
  clearTimeout(debug);
  log(`clients done ${Math.round((performance.now() - deadline) / 1000)} s after the end of the run`);
  await faults;
  await sampling;
  const ranMs = performance.now() - started;

  // The drain: every stream closed, every session deleted.
  log('drain');
  const live = [...all].filter((s) => s.alive);
  await Promise.all(
    live.map(async (s) => {
      for (let attempt = 0; attempt < 20; attempt++) {
        try {
          const r = await wireRequest(url, { method: 'DELETE', headers: headers(s), timeoutMs: REQUEST_MS });
          status('DELETE', r.status);
          if (r.status !== 503) return;
        } catch (err) {
          failed('DELETE', err);
        }
        await delay(between(rng, RETRY_MS));
      }
      violate(`session ${s.id}: DELETE not answered`);
    }),
  );
  const gauges = async () => {
    const read = async (name: string) => (await Promise.all(gateways.map((g) => scrapeMetric(g.adminUrl, name)))).reduce((a, b) => a + b, 0);
    return {
      open: await read('mcp_gateway_sse_streams_open'),
      held: await read('mcp_gateway_held_streams'),
      unrecorded: await read('mcp_gateway_unrecorded_events'),
      bindings: await read('mcp_gateway_binding_cache_entries'),
    };
  };
  const drainStarted = performance.now();
  let after = await gauges();
  const drained = () => after.open === 0 && after.held === 0 && after.unrecorded === 0 && after.bindings <= orphans;
  while (!drained() && performance.now() - drainStarted < DRAIN_MS) {
    await delay(500);
    after = await gauges();
  }
  if (!drained()) violate(`after the drain: ${JSON.stringify(after)} (bindings may be at most ${orphans}, the orphaned initializes)`);

  // Slopes after the warm-up, MiB a minute, of each gateway.
  const warm = opts.warmupMs / 60_000;
  const slopes = samples.map((s) => ({
    heap: slope(s.heap.filter((p) => p.x >= warm)),
    rss: slope(s.rss.filter((p) => p.x >= warm)),
    points: s.heap.filter((p) => p.x >= warm).length,
  }));
  slopes.forEach((s, i) => {
    if (s.points < 5) violate(`gateway ${i + 1}: ${s.points} memory samples after the warm-up, too few for a slope (run longer)`);
    if (s.heap > opts.heapSlopeMiBPerMin) violate(`gateway ${i + 1}: heap grows ${s.heap.toFixed(2)} MiB/min (bound ${opts.heapSlopeMiBPerMin})`);
    if (s.rss > opts.rssSlopeMiBPerMin) violate(`gateway ${i + 1}: RSS grows ${s.rss.toFixed(2)} MiB/min (bound ${opts.rssSlopeMiBPerMin})`);
  });

  const figures: Record<string, number | string> = {
    seed: opts.seed,
    'duration s': Math.round(ranMs / 1000),
    sessions: opts.sessions,
    ...Object.fromEntries([...count.entries()].sort(([a], [b]) => a.localeCompare(b))),
    'orphaned initializes': orphans,
    'heap slope MiB/min': slopes.map((s) => s.heap.toFixed(2)).join(' / '),
    'rss slope MiB/min': slopes.map((s) => s.rss.toFixed(2)).join(' / '),
    'heap last MiB': samples.map((s) => (s.heap.at(-1)?.y ?? 0).toFixed(1)).join(' / '),
    'rss last MiB': samples.map((s) => (s.rss.at(-1)?.y ?? 0).toFixed(1)).join(' / '),
    'drain s': Math.round((performance.now() - drainStarted) / 1000),
    violations: violations.length,
  };
  return { passed: violations.length === 0, violations, figures };
}

/** Runs `fn` with a teardown that runs what was registered, last first, once `fn` is done. */
async function withTeardown<T>(fn: (t: Teardown) => Promise<T>): Promise<T> {
  const fns: (() => unknown)[] = [];
  try {
    return await fn({ teardown: (f) => fns.push(f) });
  } finally {
    for (const f of fns.reverse()) await f();
  }
}

runIfMain(import.meta.url, async () => {
  const { values } = parseArgs({
    options: {
      minutes: { type: 'string', default: '1' },
      sessions: { type: 'string', default: '200' },
      seed: { type: 'string' },
      'fault-every-ms': { type: 'string', default: '8000' },
      'warmup-ms': { type: 'string' },
      'heap-slope': { type: 'string', default: '1' },
      'rss-slope': { type: 'string', default: '2' },
    },
    strict: true,
  });
  const number = (name: keyof typeof values, min: number): number => {
    const value = Number(values[name]);
    if (!Number.isFinite(value) || value < min) throw new Error(`--${name} must be a number, at least ${min} (got ${values[name]})`);
    return value;
  };
  const durationMs = number('minutes', 0.1) * 60_000;
  const opts: SoakOptions = {
    durationMs,
    sessions: Math.floor(number('sessions', 1)),
    seed: values.seed === undefined ? randomInt(0, 2 ** 31) : Math.floor(number('seed', 0)),
    faultEveryMs: number('fault-every-ms', 100),
    warmupMs: values['warmup-ms'] === undefined ? Math.max(20_000, durationMs / 4) : number('warmup-ms', 0),
    heapSlopeMiBPerMin: number('heap-slope', 0),
    rssSlopeMiBPerMin: number('rss-slope', 0),
    log: (line) => process.stderr.write(`${line}\n`),
  };
  const report = await withTeardown((t) => runSoak(t, opts));
  for (const [name, value] of Object.entries(report.figures)) process.stdout.write(`${name.padEnd(40)} ${value}\n`);
  for (const v of report.violations.slice(0, 50)) process.stdout.write(`violation: ${v}\n`);
  if (!report.passed) throw new Error(`soak failed: ${report.violations.length} violations`);
  process.stdout.write('soak passed\n');
});
