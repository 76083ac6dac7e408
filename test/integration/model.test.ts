/**
 * The randomized model-based test of CONTRACT.md §4 and §5: random sequences of opening GET
 * streams, emitting events, cutting connections, reconnecting through either gateway instance,
 * killing and restarting replicas, trimming their event logs and reusing stale or foreign cursors,
 * run against the real thing (two gateway instances on one real Redis, three demo replicas as
 * child processes, the cutting round-robin balancer), with every SSE byte read at the HTTP level so
 * that the model alone decides when a client reconnects and with which Last-Event-ID.
 *
 * After every step the model checks what each client received against what it knows was emitted:
 *   - every reconnect is an exact continuation (`Mcp-Resumption: continued`: exactly the events
 *     after the cursor, in order, replayed ones under their first cursor), an explicit new stream
 *     (`new-stream`, the stream_reset notification first, a reason the model allows for that
 *     cursor), 204 for the cursor that ends a stream the gateway ended on purpose, or 404 where the
 *     session is gone, and nothing else (no other 5xx, no hang: every wait is bounded);
 *   - no cursor ever stands for two different events, and none is delivered twice on one stream;
 *   - on an open stream, every event emitted is delivered, in order: no event is skipped without a
 *     signal, none is invented or repeated;
 *   - where the owner can prove the continuation (session alive, cursor current, log not trimmed)
 *     the gateway continues rather than signals.
 *
 * POST streams too: a tool call answered with its own SSE stream is cut after some of its events
 * (perhaps with its owner killed first, or the owner's log trimmed after), then resumed with a GET
 * carrying the last cursor received: exactly the rest of its events and its response, or the
 * signal, -32010 for the call and the end of the stream, never a silent loss.
 *
 * Each run walks one fleet, drawn from the seed (MODEL_JOURNAL and MODEL_LOGS set it instead): the
 * journal (§8) on, with a small window, or off; replicas that keep an event log, none
 * (--no-event-store, the SDK's default server), or some of each. The expectations follow:
 *   - journal on: a stream whose client went away is held and journaled (J2), so a cursor of the
 *     session's current GET stream continues from the journal whatever the owner's log holds (J3:
 *     the events after it once, in order, under their first cursors), unless as many events as
 *     the window holds or more followed it (J5: gap); a gone owner's GET stream is owner_gone (or,
 *     before the gateway knows, the journal's events and then the signal in the stream); a cut
 *     call is held until its response passed, and its journaled response is delivered even after
 *     its owner was killed (J4), after the signal when its cursor fell below the window;
 *   - journal off: the owner's log decides (§4, §5); a replica without one gives its events no id,
 *     so they carry no cursor (E1) and only a signal's position can be resumed, as a new stream.
 *
 * Priming events (J1): a continuation, from the journal or the owner, begins with one for the
 * cursor it continues after, which becomes the client's place, so that a client that received
 * nothing after it resumes from it; with the journal, a plain GET and a call's POST stream begin
 * with one at their first position, and a call may be cut before its first event and resumed
 * from it (all its events and its response, each once). No other stream is primed.
 *
 * The walk is fast-check's model-based runner (fc.commands, fc.asyncModelRun): each step is a
 * command with a precondition on the model's state and its own random choices, so that a failing
 * walk shrinks to a short one that still fails. Reproducible by seed: every run draws a new seed
 * unless MODEL_SEED sets one; it is printed in the test name and in a comment at the start, and
 * decides the walk. MODEL_STEPS says how many steps are drawn at least (200 or more in CI;
 * those whose precondition does not hold when their turn comes are skipped). A failure prints the
 * shrunk walk and how to replay it: the whole walk from MODEL_SEED, or straight the shrunk one with
 * MODEL_PATH and MODEL_REPLAY as well. Shrinking runs the walks again on the real thing, so it
 * stops after MODEL_SHRINK_MS (default 300 s) with the shortest failing walk found so far.
 * Outcomes that depend on timing (409 retries, where a fresh stream attaches) can differ between
 * runs; the steps drawn depend only on the seed.
 */
import { randomInt } from 'node:crypto';
import fc from 'fast-check';
import t from 'tap';
import type { Test } from 'tap';
import { startBalancer, type Balancer } from '../helpers/balancer.js';
import { metricValue, startGateway, type RunningGateway } from '../helpers/gateway.js';
import { initializeBody, MCP_ACCEPT, PROTOCOL_VERSION, SESSION_NOT_FOUND, toolCallBody } from '../helpers/http.js';
import { parseSseBody, wireGet, wireOpen, wireRequest, type WireEvent, type WireGet, type WireResponse, type WireStream } from '../helpers/model-wire.js';
import { startRedisServer } from '../helpers/redis-server.js';
import { spawnReplica, type ReplicaProcess } from '../helpers/replicas.js';
import { prng } from '../helpers/prng.js';
import { bound, waitFor } from '../helpers/wait.js';

/** A new walk on every run, so that runs together cover more than one; any of them can be replayed. */
const SEED = process.env['MODEL_SEED'] === undefined ? randomInt(0, 2 ** 31) : Number(process.env['MODEL_SEED']) | 0;
/** fast-check's path to a shrunk walk and the commands' replay path, both printed with a failure. */
const PATH = process.env['MODEL_PATH'];
const REPLAY = process.env['MODEL_REPLAY'];
const STEPS = Number(process.env['MODEL_STEPS'] ?? 240);
/** How long shrinking a failing walk may go on (each try runs a walk again on the real thing). */
const SHRINK_MS = Number(process.env['MODEL_SHRINK_MS'] ?? 300_000);
/** The walk itself: every wait in it is bounded, this only stops a walk that would never end. */
const WALK_MS = bound(STEPS * 4_000);
const CLIENTS = 3;
const REPLICAS = 3;
/** A debugging aid only: actions to leave out (comma-separated names, e.g. "kill,restart"). */
const SKIP = new Set((process.env['MODEL_SKIP'] ?? '').split(',').filter(Boolean));

/** Bounds on every wait. Reached only when something is wrong (a hang is a failure too). */
const REQUEST_MS = bound(10_000);
/** Events that must arrive on an open stream arrive within this. */
const EVENTS_MS = bound(5_000);
/** A stream that must end (its replica died, it was cut) ends within this. */
const END_MS = bound(5_000);
/**
 * After a new-stream signal, the gateway opens the fresh upstream GET on its own (retrying 409s
 * for up to ~0.6 s): probes of increasing size are emitted until one arrives, each awaited this long.
 */
const PROBE_MS = 250;
/** Probes for about 4 s, plus what a loaded machine may add. */
const PROBES = Math.ceil(bound(4_000) / PROBE_MS);
/** 409 from a replica that has not yet noticed the old stream's close (R5: it must, promptly). */
const CONFLICT_RETRIES = 80;
const CONFLICT_BACKOFF_MS = 25;
/** With the journal: the gateway retried the 409 of a held stream already. */
const HELD_CONFLICT_RETRIES = 3;
/** 503 + Retry-After is legitimate while a replica is suspected; retried this often. */
const UNAVAILABLE_RETRIES = 5;
/**
 * A tool call on a POST stream: CALL_EVENTS events CALL_INTERVAL_MS apart, then the response. It is
 * cut after at most CALL_KEEP_MAX events, so that the owner is still at work when the cut reaches
 * the gateway (the response, at least 2 intervals later, is never forwarded before the cut).
 */
const CALL_EVENTS = 6;
const CALL_INTERVAL_MS = 100;
const CALL_KEEP_MAX = 2;

/**
 * The fleet a walk runs against: the journal (CONTRACT.md §8) on or off, and which replicas keep
 * an event log (the demo's default) or none (--no-event-store, as the SDK's default server). Drawn
 * from the seed, so that MODEL_SEED replays it too; MODEL_JOURNAL (off, or the window: on with that
 * resumption.journal.maxEvents) and MODEL_LOGS (one character per replica, 1: a log, 0: none) set
 * it instead.
 */
interface FleetConfig {
  journal: boolean;
  /**
   * resumption.journal.maxEvents: small, so that a cursor with this many events or more after it
   * in its stream falls below the journal's window (J5: a gap).
   */
  window: number;
  /** Per replica: it keeps an event log. */
  logs: boolean[];
}

function fleetConfig(seed: number): FleetConfig {
  const rng = prng(seed ^ 0x5bd1e995);
  const journal = rng.chance(0.5);
  const window = rng.int(3, 10);
  const kind = rng.pick(['log', 'none', 'mixed', 'mixed'] as const);
  let logs = Array.from({ length: REPLICAS }, () => kind === 'log');
  if (kind === 'mixed') {
    // At least one of each.
    const withLog = rng.int(1, REPLICAS - 1);
    logs = Array.from({ length: REPLICAS }, (_, i) => i < withLog);
    for (let i = logs.length - 1; i > 0; i--) {
      const j = rng.int(0, i);
      [logs[i], logs[j]] = [logs[j]!, logs[i]!];
    }
  }
  const journalEnv = process.env['MODEL_JOURNAL'];
  const logsEnv = process.env['MODEL_LOGS'];
  if (journalEnv !== undefined && journalEnv !== 'off' && !/^[1-9]\d*$/.test(journalEnv)) throw new Error(`MODEL_JOURNAL=${journalEnv}: off, or the journal's window (a positive integer)`);
  if (logsEnv !== undefined && !new RegExp(`^[01]{${REPLICAS}}$`).test(logsEnv)) throw new Error(`MODEL_LOGS=${logsEnv}: ${REPLICAS} characters, 1 (a log) or 0 (none)`);
  return {
    journal: journalEnv === undefined ? journal : journalEnv !== 'off',
    window: journalEnv === undefined || journalEnv === 'off' ? window : Number(journalEnv),
    logs: logsEnv === undefined ? logs : [...logsEnv].map((c) => c === '1'),
  };
}

function describeFleet(fleet: FleetConfig): string {
  const replicas = fleet.logs.map((log, i) => `r${i + 1} ${log ? 'log' : 'no log'}`).join(', ');
  return `journal ${fleet.journal ? `on (window ${fleet.window})` : 'off'}; ${replicas}`;
}

/** Shaped as a cursor, but no gateway of this fleet issued it. */
const FOREIGN_CURSOR = `1.${'A'.repeat(16)}.1.${'A'.repeat(11)}.${'A'.repeat(22)}`;

const CURSOR_ALPHABET = /^[A-Za-z0-9._~-]{1,128}$/;
const REASONS = ['foreign_cursor', 'session_mismatch', 'unknown_stream', 'superseded', 'owner_gone', 'gap'] as const;
type Reason = (typeof REASONS)[number];

class Violation extends Error {
  override name = 'Violation';
}

type Rng = ReturnType<typeof prng>;

interface ReplicaModel {
  id: string;
  proc: ReplicaProcess;
  up: boolean;
  /** Bumped when the process is killed: sessions of an older generation are lost. */
  generation: number;
  /** Bumped by every trim (keep=0): events of an older trim epoch are no longer in its log. */
  trims: number;
  /** It keeps an event log (the demo's default); false: --no-event-store, its events carry no ids. */
  log: boolean;
  /** Starting again (restart): up once it listens. */
  restarting?: Promise<void>;
}

interface LogEvent {
  seq: number;
  /** The owner's trim epoch when the event was stored. */
  trims: number;
}

interface Session {
  id: string;
  label: string;
  replica: ReplicaModel;
  generation: number;
  /** Every event emitted on the session's standalone GET stream, as the owner's log holds them. */
  log: LogEvent[];
  /** The GET incarnation that the store holds as current (E4), as far as the model knows. */
  currentGet: Incarnation | undefined;
}

interface Incarnation {
  no: number;
  session: Session;
  /**
   * The log position of its first event: where a plain GET began, or where the fresh stream after
   * a signal began (unknown until its first event arrived). Journaled from there on while it is the
   * session's GET stream, held or not (J2).
   */
  first: number | undefined;
  /** Position in the session's log → the cursor it was delivered under (E3). */
  cursors: Map<number, string>;
}

interface CursorInfo {
  cursor: string;
  session: Session;
  inc: Incarnation;
  /** A priming event (J1): a position the gateway made itself, before its stream's first event. */
  kind: 'event' | 'signal' | 'priming';
  /**
   * Position in the session's log; -1 for the signal, a position the gateway made itself; for a
   * priming event, the position of the event before the one it precedes (what follows it is #index+1 on).
   */
  index: number;
  data: string;
  stream: StreamModel;
}

interface Route {
  name: string;
  url: string;
  /** Through the balancer, pinned to this gateway. */
  pin?: number;
}

type Phase =
  /** Waiting for the stream_reset notification. */
  | 'signal'
  /** Every event must be log[next], in order. */
  | 'exact'
  /** After a signal: a fresh stream whose start in the log is not known yet. */
  | 'tail'
  /** After a signal for a session that is gone: nothing may follow, the stream must end. */
  | 'dead';

interface StreamModel {
  no: number;
  client: Client;
  conn: WireStream;
  route: Route;
  inc: Incarnation | undefined;
  phase: Phase;
  next: number;
  /** Tail phase: the log length when the reconnect was sent; nothing before it may arrive. */
  from: number;
  buffer: { event: WireEvent; seq: number }[];
  processed: number;
  seen: Set<string>;
  signal: { reason: Reason; lastEventId: string } | undefined;
  /**
   * A continuation from the journal of a session whose owner is gone may, after the journaled
   * events, say so in the stream (the headers said continued): the reasons allowed, and the
   * Last-Event-ID it continued from.
   */
  resets?: { reasons: Set<Reason>; lastEventId: string };
  /** A continuation: the Last-Event-ID it was opened with ('' for a take-over, which has none). */
  resumedFrom?: string;
  lastCursor: string | undefined;
  /**
   * A plain GET with the journal: the session's GET incarnation it may have taken over (held with
   * no client, streams/held-get.ts), and the log length when it was sent, where a fresh stream
   * would begin instead.
   */
  takeover?: { inc: Incarnation | undefined; freshFrom: number };
  /** Ended by the balancer's cut. */
  cut: boolean;
  /** Its end, when it came from the other side, is counted in the stats. */
  endCounted?: boolean;
  /** Priming events of conn.primed checked so far. */
  primings: number;
  /** A plain GET's priming event (J1), placed once where its stream begins is known (resolveTail). */
  priming?: string;
}

interface Client {
  name: string;
  session: Session;
  stream: StreamModel | undefined;
  lastCursor: string | undefined;
  /** lastCursor came with a priming event (J1): nothing with a cursor arrived after it. */
  lastPrimed: boolean;
  history: string[];
  /** The gateway answered 404 for the session: it is gone. */
  notFound: boolean;
}

interface Stats {
  steps: number;
  actions: Record<string, number>;
  actionMs: Record<string, number>;
  continued: number;
  complete: number;
  newStream: Record<string, number>;
  notFound: number;
  conflicts: number;
  unavailable: number;
  unavailableInitialize: number;
  /** Plain GETs answered 409 with the journal: the session's GET stream, just left by its client, not yet held (plainGet). */
  heldConflicts: number;
  eventsEmitted: number;
  eventsDelivered: number;
  replayed: number;
  probesLost: number;
  settles: number;
  settlesEndedAtOnce: number;
  spontaneousEnds: number;
  /** POST streams: resumed and continued, resumed and failed with -32010, answered before the cut. */
  calls: { continued: number; failed: number; answeredBeforeCut: number; answeredAfterGap: number; unresumable: number; followedAfterGap: number };
  /**
   * Resumptions from a priming event's cursor (J1): a GET stream's whose client received nothing
   * with a cursor after a continuation's priming event, a stale one of a plain GET's priming
   * event, and a call cut before its first event; and the plain GETs' priming cursors placed.
   */
  primings: { resumed: number; stale: number; calls: number; placed: number };
}

interface Prediction {
  /** 200 Mcp-Resumption: continued is required (the owner, or the journal, can prove the continuation). */
  mustContinue: boolean;
  /** Continued is allowed as well as what `reasons` say (every event after the cursor is checked still). */
  mayContinue: boolean;
  /** A continuation's first event: the log position after the cursor. */
  from: number;
  /**
   * A continuation from the journal of a session whose owner is gone: after the journaled events
   * it may say so in the stream, with one of these reasons, and ends.
   */
  resets?: Set<Reason>;
  /** New-stream reasons that are allowed. */
  reasons: Set<Reason>;
  notFound: boolean;
  complete: boolean;
  why: string;
}

const emitPayload = (data: string | undefined): { seq: number; replica: string } | undefined => {
  try {
    const message = JSON.parse(data ?? '') as {
      jsonrpc?: string;
      method?: string;
      params?: { level?: string; logger?: string; data?: { seq?: unknown; replica?: unknown } };
    };
    const payload = message.params?.data;
    if (message.jsonrpc !== '2.0' || message.method !== 'notifications/message' || message.params?.logger !== 'emit') return undefined;
    if (typeof payload?.seq !== 'number' || typeof payload.replica !== 'string') return undefined;
    return { seq: payload.seq, replica: payload.replica };
  } catch {
    return undefined;
  }
};

class Model {
  readonly stats: Stats = {
    steps: 0,
    actions: {},
    actionMs: {},
    continued: 0,
    complete: 0,
    newStream: {},
    notFound: 0,
    conflicts: 0,
    unavailable: 0,
    unavailableInitialize: 0,
    heldConflicts: 0,
    eventsEmitted: 0,
    eventsDelivered: 0,
    replayed: 0,
    probesLost: 0,
    settles: 0,
    settlesEndedAtOnce: 0,
    spontaneousEnds: 0,
    calls: { continued: 0, failed: 0, answeredBeforeCut: 0, answeredAfterGap: 0, unresumable: 0, followedAfterGap: 0 },
    primings: { resumed: 0, stale: 0, calls: 0, placed: 0 },
  };
  readonly clients: Client[] = [];
  readonly cursors = new Map<string, CursorInfo>();
  /** Every cursor delivered on a POST stream. */
  readonly callCursors = new Set<string>();
  readonly trace: string[] = [];
  /** A replica that did not start again: the walk fails at its next step. */
  restartFailed: string | undefined;
  readonly routes: Route[];
  #step = 0;
  #incarnations = 0;
  #streams = 0;
  #sessions = 0;
  #rpc = 100;

  constructor(
    /** Every random choice within a step; each step sets its own (see act). */
    public rng: Rng,
    readonly replicas: ReplicaModel[],
    readonly gateways: RunningGateway[],
    readonly balancer: Balancer,
    readonly fleet: FleetConfig,
  ) {
    this.routes = [
      { name: 'gw0', url: gateways[0]!.url },
      { name: 'gw1', url: gateways[1]!.url },
      { name: 'lb>gw0', url: balancer.url, pin: 0 },
      { name: 'lb>gw1', url: balancer.url, pin: 1 },
    ];
  }

  // ----- bookkeeping and failure reports -----

  note(line: string): void {
    this.trace.push(`#${this.#step} ${line}`);
    if (this.trace.length > 60) this.trace.shift();
  }

  fail(what: string): never {
    const lines = [
      `${what}`,
      `at step ${this.#step}; last actions:`,
      ...this.trace.map((l) => `  ${l}`),
    ];
    throw new Violation(lines.join('\n'));
  }

  isLost(session: Session): boolean {
    return session.replica.generation !== session.generation;
  }

  /**
   * The session's events carry no cursor: its owner keeps no log, so they carry no id, and without
   * the journal the gateway gives none (E1). Only a signal's position has one.
   */
  idless(session: Session): boolean {
    return !this.fleet.journal && !session.replica.log;
  }

  route(): Route {
    return this.rng.pick(this.routes);
  }

  target(route: Route): string {
    if (route.pin !== undefined) this.balancer.pin(route.pin);
    return route.url;
  }

  headers(session: Session, extra: Record<string, string> = {}): Record<string, string> {
    return { 'mcp-session-id': session.id, 'mcp-protocol-version': PROTOCOL_VERSION, ...extra };
  }

  // ----- raw MCP requests -----

  async post(route: Route, body: string, headers: Record<string, string>): Promise<WireResponse> {
    return wireRequest(this.target(route), {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: MCP_ACCEPT, ...headers },
      body,
      timeoutMs: REQUEST_MS,
    });
  }

  /** The JSON-RPC response with `id` in a POST answer (JSON or SSE). */
  rpcResult(response: WireResponse, id: number): { result?: { content?: { text?: string }[]; structuredContent?: { replica?: string } }; error?: unknown } {
    const type = String(response.headers['content-type'] ?? '');
    const messages = type.startsWith('text/event-stream')
      ? parseSseBody(response.body).map((e) => e.data ?? '')
      : [response.body];
    for (const text of messages) {
      try {
        const message = JSON.parse(text) as { id?: unknown };
        if (message.id === id) return message as ReturnType<Model['rpcResult']>;
      } catch {
        // not JSON: not the response
      }
    }
    return this.fail(`no JSON-RPC response with id ${id} in ${response.status} ${JSON.stringify(response.body.slice(0, 300))}`);
  }

  expectNotFound(response: WireResponse, session: Session, what: string): void {
    if (!this.isLost(session)) {
      this.fail(`${what}: 404 for session ${session.label}, whose owner ${session.replica.id} was never killed since the session began (a live session declared lost)`);
    }
    // R3's body when the gateway answers; the owner's own 404 (a restarted replica) passes as it is (R7).
    let code: unknown;
    try {
      code = (JSON.parse(response.body) as { error?: { code?: unknown } }).error?.code;
    } catch {
      code = undefined;
    }
    if (response.body !== SESSION_NOT_FOUND && code !== -32001) this.fail(`${what}: 404 with body ${JSON.stringify(response.body)}, not Session not found`);
  }

  expectNoServerError(response: { status: number; headers: WireResponse['headers'] }, what: string): void {
    if (response.status >= 500 && !(response.status === 503 && response.headers['retry-after'] !== undefined)) {
      this.fail(`${what}: ${response.status} (only 503 with Retry-After is allowed, while a replica is suspected)`);
    }
  }

  // ----- sessions -----

  async newSession(): Promise<Session> {
    const route = this.route();
    let init = await this.post(route, initializeBody(1), {});
    // Right after restarts an instance may not have seen any replica come back yet (probes): it
    // says so with 503 and Retry-After, and a client retries as told.
    for (let attempt = 1; init.status === 503 && attempt < UNAVAILABLE_RETRIES; attempt++) {
      this.expectNoServerError(init, 'initialize');
      this.stats.unavailableInitialize++;
      this.note(`initialize via ${route.name}: 503 ${init.body.slice(0, 120)}`);
      await new Promise((resolve) => setTimeout(resolve, 1000 * Number(init.headers['retry-after'])));
      init = await this.post(route, initializeBody(1), {});
    }
    this.expectNoServerError(init, 'initialize');
    const id = init.headers['mcp-session-id'];
    if (init.status !== 200 || typeof id !== 'string') this.fail(`initialize via ${route.name} answered ${init.status} ${init.body.slice(0, 200)}`);
    const initialized = await this.post(route, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), this.headers({ id } as Session));
    if (initialized.status !== 202) this.fail(`notifications/initialized answered ${initialized.status}`);
    const rpc = ++this.#rpc;
    const whoRoute = this.route();
    const who = await this.post(whoRoute, toolCallBody('whoami', {}, rpc), this.headers({ id } as Session));
    if (who.status !== 200) {
      const holder = await this.holderOf(id);
      this.fail(
        `whoami on a session just created via ${route.name} answered ${who.status} via ${whoRoute.name}: ${who.body.slice(0, 200)}; ` +
          `asked directly, ${holder ? `${holder} holds the session (a live session declared lost)` : 'no replica holds it'}`,
      );
    }
    const owner = this.rpcResult(who, rpc).result?.structuredContent?.replica;
    const replica = this.replicas.find((r) => r.id === owner);
    if (!replica) this.fail(`whoami answered ${String(owner)}`);
    if (!replica.up && replica.restarting === undefined) this.fail(`a new session was bound to ${replica.id}, which is not running`);
    const session: Session = { id, label: `s${++this.#sessions}@${replica.id}`, replica, generation: replica.generation, log: [], currentGet: undefined };
    this.note(`new session ${session.label} via ${route.name}`);
    return session;
  }

  /** Which running replica holds `sessionId`, asked directly (no gateway in between). */
  async holderOf(sessionId: string): Promise<string | undefined> {
    for (const replica of this.replicas.filter((r) => r.up)) {
      const rpc = ++this.#rpc;
      const response = await wireRequest(replica.proc.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: MCP_ACCEPT, 'mcp-session-id': sessionId, 'mcp-protocol-version': PROTOCOL_VERSION },
        body: toolCallBody('whoami', {}, rpc),
        timeoutMs: REQUEST_MS,
      }).catch(() => undefined);
      if (response?.status === 200) return replica.id;
    }
    return undefined;
  }

  async addClient(name: string): Promise<Client> {
    const client: Client = { name, session: await this.newSession(), stream: undefined, lastCursor: undefined, lastPrimed: false, history: [], notFound: false };
    this.clients.push(client);
    return client;
  }

  async renew(client: Client): Promise<void> {
    this.closeStream(client);
    client.session = await this.newSession();
    client.stream = undefined;
    client.lastCursor = undefined;
    client.lastPrimed = false;
    client.history = [];
    client.notFound = false;
    this.note(`${client.name} now on ${client.session.label}`);
  }

  // ----- streams -----

  newIncarnation(session: Session): Incarnation {
    return { no: ++this.#incarnations, session, first: undefined, cursors: new Map() };
  }

  newStreamModel(client: Client, conn: WireStream, route: Route, phase: Phase, inc: Incarnation | undefined, next: number): StreamModel {
    return {
      no: ++this.#streams,
      client,
      conn,
      route,
      inc,
      phase,
      next,
      from: next,
      buffer: [],
      processed: 0,
      seen: new Set(),
      signal: undefined,
      lastCursor: undefined,
      cut: false,
      primings: 0,
    };
  }

  /** The client goes away: what already arrived is read first, then the connection is dropped. */
  closeStream(client: Client): void {
    const stream = client.stream;
    if (!stream) return;
    this.drain(client);
    stream.conn.close();
  }

  /** Checks every event that arrived and has not been checked yet, priming events in their place among them. */
  drain(client: Client): void {
    const stream = client.stream;
    if (!stream) return;
    while (stream.processed < stream.conn.events.length) {
      this.primings(client, stream);
      const event = stream.conn.events[stream.processed++]!;
      this.accept(client, stream, event);
    }
    this.primings(client, stream);
    if (stream.conn.ended && !stream.conn.closedByUs && !stream.cut && !stream.endCounted) {
      stream.endCounted = true;
      this.stats.spontaneousEnds++;
    }
  }

  accept(client: Client, stream: StreamModel, event: WireEvent): void {
    const session = client.session;
    const where = `${client.name} stream #${stream.no} (${stream.route.name}, ${stream.phase})`;
    const reset = streamReset(event);
    // A signal carries a cursor always; a replica's event only where the journal or the owner's log
    // gives it one (E1).
    const cursor = event.id;
    if (this.idless(session) && reset === undefined && stream.phase !== 'signal') {
      if (cursor !== undefined) this.fail(`${where}: event ${JSON.stringify(event)} carries an id, although its replica keeps no log and the journal is off (E1)`);
    } else {
      if (cursor === undefined || cursor === '') this.fail(`${where}: an event without a cursor: ${JSON.stringify(event)}`);
      if (!CURSOR_ALPHABET.test(cursor)) this.fail(`${where}: cursor ${JSON.stringify(cursor)} is not opaque ASCII of at most 128 characters (E2)`);
      if (stream.seen.has(cursor)) this.fail(`${where}: cursor ${cursor} delivered twice on one stream`);
      stream.seen.add(cursor);
      if (this.callCursors.has(cursor)) this.fail(`${where}: cursor ${cursor} was issued before on a POST stream`);
    }
    const known = cursor === undefined ? undefined : this.cursors.get(cursor);

    // The signal: the first event of a new stream, or (with the journal) the event after a
    // continuation's journaled events, when what follows them cannot be continued (owner gone).
    const inStream = stream.phase === 'exact' && reset !== undefined && stream.resets !== undefined;
    if (stream.phase === 'signal' || inStream) {
      const expected = inStream ? { reason: reset!.reason as Reason, lastEventId: stream.resets!.lastEventId } : stream.signal!;
      if (inStream) {
        if (!stream.resets!.reasons.has(expected.reason)) this.fail(`${where}: a stream_reset ${String(reset!.reason)} after the journal's events (expected ${[...stream.resets!.reasons].join('|')})`);
        stream.signal = expected;
        this.stats.newStream[expected.reason] = (this.stats.newStream[expected.reason] ?? 0) + 1;
        this.note(`${where}: stream_reset ${expected.reason} after #${stream.next - 1}`);
      }
      if (reset === undefined || reset.resumed !== false || reset.reason !== expected.reason || reset.lastEventId !== expected.lastEventId.slice(0, 128)) {
        this.fail(`${where}: the first event of a new stream (${expected.reason}) is not its stream_reset notification: ${event.data}`);
      }
      if (known) this.fail(`${where}: the signal reuses cursor ${cursor}, already issued for another event`);
      const inc = this.newIncarnation(session);
      stream.inc = inc;
      this.cursors.set(cursor!, { cursor: cursor!, session, inc, kind: 'signal', index: -1, data: event.data ?? '', stream });
      stream.lastCursor = cursor;
      client.lastCursor = cursor;
      client.lastPrimed = false;
      client.history.push(cursor!);
      if (inStream && !this.isLost(session)) this.fail(`${where}: a stream_reset after the journal's events of a session whose owner runs (its stream is held: J2)`);
      stream.phase = this.isLost(session) ? 'dead' : 'tail';
      return;
    }
    if (stream.phase === 'dead') this.fail(`${where}: an event after the signal of a session that is gone: ${event.data}`);

    const payload = emitPayload(event.data);
    if (!payload) this.fail(`${where}: not an emit notification: ${JSON.stringify(event)}`);
    if (event.event !== 'message') this.fail(`${where}: event type ${String(event.event)} instead of the replica's "message" (E1)`);
    if (payload.replica !== session.replica.id) this.fail(`${where}: an event from ${payload.replica} on a session owned by ${session.replica.id}`);
    this.stats.eventsDelivered++;

    if (stream.phase === 'tail') {
      if (known) this.fail(`${where}: an event of a fresh stream carries cursor ${cursor}, issued before for ${known.session.label} #${known.index}`);
      stream.buffer.push({ event, seq: payload.seq });
      if (stream.buffer.length > session.log.length - stream.from) {
        this.fail(`${where}: ${stream.buffer.length} events after the signal, but only ${session.log.length - stream.from} were emitted since the reconnect`);
      }
      if (cursor !== undefined) {
        stream.lastCursor = cursor;
        client.lastCursor = cursor;
        client.lastPrimed = false;
        client.history.push(cursor);
      }
      return;
    }

    // exact
    const index = stream.next;
    const inc = stream.inc!;
    const expected = session.log[index];
    if (!expected) {
      this.fail(`${where}: event seq ${payload.seq} under ${String(cursor)} after all ${session.log.length} emitted events were delivered (a duplicate or an invented event)`);
    }
    if (expected.seq !== payload.seq) {
      const got = session.log.findIndex((e, i) => i > index && e.seq === payload.seq);
      this.fail(
        `${where}: expected log event #${index} (seq ${expected.seq}) next, got seq ${payload.seq} under ${String(cursor)}` +
          (got > index ? ` (an event was skipped without a signal, or reordered)` : ''),
      );
    }
    stream.next++;
    if (cursor === undefined) return;
    this.place(where, cursor, { cursor, session, inc, kind: 'event', index, data: event.data ?? '', stream });
    stream.lastCursor = cursor;
    client.lastCursor = cursor;
    client.lastPrimed = false;
    client.history.push(cursor);
  }

  /** Checks the priming events that arrived before the stream's next unchecked event. */
  primings(client: Client, stream: StreamModel): void {
    const { primed } = stream.conn;
    while (stream.primings < primed.length && primed[stream.primings]!.after <= stream.processed) {
      const priming = primed[stream.primings++]!;
      this.acceptPriming(client, stream, priming.id!, stream.primings === 1 && priming.after === 0);
    }
  }

  /**
   * J1: a continuation begins with a priming event for the position it continues after (the
   * cursor it was given: the codec is deterministic), which becomes the client's place; a plain GET
   * with the journal with its own, placed once where its stream begins is known. No other stream
   * is primed: a signal's (its first event, the signal, carries a cursor), a plain GET's without
   * the journal. The replicas prime no stream of their own at this protocol version (2025-06-18).
   */
  acceptPriming(client: Client, stream: StreamModel, cursor: string, first: boolean): void {
    const where = `${client.name} stream #${stream.no} (${stream.route.name}, ${stream.phase})`;
    if (!CURSOR_ALPHABET.test(cursor)) this.fail(`${where}: priming cursor ${JSON.stringify(cursor)} is not opaque ASCII of at most 128 characters (E2)`);
    if (this.callCursors.has(cursor)) this.fail(`${where}: priming cursor ${cursor} was issued before on a POST stream`);
    const continuation = stream.phase === 'exact' && stream.resumedFrom !== undefined && stream.resumedFrom !== '';
    const plainGet = stream.phase === 'tail' && stream.takeover !== undefined && stream.signal === undefined;
    if (!continuation && !plainGet) this.fail(`${where}: a priming event ${cursor} on a stream the gateway does not prime (a signal's, or one not journaled)`);
    if (!first) this.fail(`${where}: a priming event ${cursor} that is not the stream's first`);
    if (plainGet) {
      stream.priming = cursor;
      return;
    }
    if (cursor !== stream.resumedFrom) this.fail(`${where}: the continuation's priming event ${cursor} is not the cursor it continues after, ${stream.resumedFrom}`);
    stream.lastCursor = cursor;
    client.lastCursor = cursor;
    client.lastPrimed = true;
  }

  /**
   * A plain GET's priming event, its stream begun at log #start: the position before it, in the
   * stream's incarnation. A known cursor (a take-over goes on after the client's last) must stand
   * for that position already; a take-over's past events the client that left never read is one
   * the model does not know, and stays so.
   */
  placePriming(where: string, client: Client, stream: StreamModel, cursor: string, start: number): void {
    const inc = stream.inc!;
    const known = this.cursors.get(cursor);
    if (known) {
      const at = known.kind === 'signal' ? known.inc.first : known.index + 1;
      if (known.inc !== inc || at !== start) {
        this.fail(`${where}: the priming cursor ${cursor} stood for the position before log #${String(at)} of inc ${known.inc.no}, and now before #${start} of inc ${inc.no}`);
      }
      return;
    }
    if (inc === stream.takeover?.inc) return;
    this.cursors.set(cursor, { cursor, session: client.session, inc, kind: 'priming', index: start - 1, data: '', stream });
    client.history.push(cursor);
    this.stats.primings.placed++;
  }

  /** Records that `info.cursor` stands for log event info.index of info.inc; checks E3 both ways. */
  place(where: string, cursor: string, info: CursorInfo): void {
    const known = this.cursors.get(cursor);
    if (known) {
      if (known.session !== info.session || known.inc !== info.inc || known.index !== info.index || known.data !== info.data) {
        this.fail(
          `${where}: cursor ${cursor} stood for ${known.session.label} inc ${known.inc.no} #${known.index} ${known.data}, ` +
            `now for ${info.session.label} inc ${info.inc.no} #${info.index} ${info.data}`,
        );
      }
      this.stats.replayed++;
      known.stream = info.stream;
      return;
    }
    const first = info.inc.cursors.get(info.index);
    if (first !== undefined && first !== cursor) {
      this.fail(`${where}: log event #${info.index} of ${info.session.label} was delivered under ${first}, and now replayed under ${cursor} (E3)`);
    }
    info.inc.cursors.set(info.index, cursor);
    this.cursors.set(cursor, info);
  }

  /**
   * Tail phase, once the last event emitted has arrived: the events since the signal must be the
   * newest ones of the log, contiguous, none from before the reconnect.
   */
  resolveTail(client: Client, stream: StreamModel): void {
    const { log } = client.session;
    const m = stream.buffer.length;
    const start = log.length - m;
    const where = `${client.name} stream #${stream.no} (${stream.route.name}, fresh after ${stream.signal?.reason})`;
    if (start < stream.from) this.fail(`${where}: ${m} events delivered, only ${log.length - stream.from} emitted since the reconnect`);
    stream.buffer.forEach((b, j) => {
      if (log[start + j]!.seq !== b.seq) {
        this.fail(
          `${where}: the events after the signal (seqs ${stream.buffer.map((x) => x.seq).join(',')}) are not a gapless run ` +
            `ending at the newest emitted (seqs ${log.slice(stream.from).map((e) => e.seq).join(',')})`,
        );
      }
    });
    stream.phase = 'exact';
    stream.next = start;
    const named = stream.buffer.find((b) => b.event.id !== undefined)?.event.id;
    const held = stream.takeover?.inc;
    const heldIds = new Set([...(held?.cursors.values() ?? [])].map(cursorIncarnation));
    if (held && named !== undefined && heldIds.has(cursorIncarnation(named))) {
      // Taken over: the same incarnation goes on, nothing superseded.
      stream.inc = held;
    } else {
      if (stream.takeover && start < stream.takeover.freshFrom && heldIds.size > 0) {
        this.fail(`${where}: a fresh stream (not the held one) begins at log #${start}, before the GET was sent (#${stream.takeover.freshFrom})`);
      }
      // The fresh stream runs: it superseded the session's GET stream (E4).
      stream.inc!.first = start;
      stream.resumedFrom = undefined;
    }
    client.session.currentGet = stream.inc;
    if (stream.takeover) {
      // J1: a plain GET with the journal begins with a priming event, a take-over too.
      if (stream.priming === undefined) this.fail(`${where}: a journaled GET stream that did not begin with a priming event (J1)`);
      this.placePriming(where, client, stream, stream.priming, start);
    }
    // The cursors were checked as new in accept(); now they get their places.
    const lastCursor = stream.lastCursor;
    for (const b of stream.buffer) {
      if (b.event.id !== undefined) {
        this.place(where, b.event.id, { cursor: b.event.id, session: client.session, inc: stream.inc!, kind: 'event', index: stream.next, data: b.event.data ?? '', stream });
      }
      stream.next++;
    }
    stream.lastCursor = lastCursor;
    stream.buffer = [];
    this.stats.probesLost += start - stream.from;
  }

  /**
   * An open stream in the exact phase must deliver everything emitted: waits until it has (or
   * the stream ended), then checks.
   */
  async checkpoint(client: Client): Promise<void> {
    const stream = client.stream;
    if (!stream) return;
    this.drain(client);
    if (stream.conn.ended || stream.phase !== 'exact') return;
    const log = client.session.log;
    await stream.conn.until(() => stream.conn.events.length - stream.processed >= log.length - stream.next, EVENTS_MS);
    this.drain(client);
    if (stream.phase === 'exact' && stream.next < log.length && !stream.conn.ended) {
      this.fail(
        `${client.name} stream #${stream.no} (${stream.route.name}) is open but delivered only up to log event #${stream.next - 1} ` +
          `of ${log.length} within ${EVENTS_MS} ms: events missing without a signal`,
      );
    }
  }

  // ----- actions -----

  async emit(client: Client, count: number, label = 'emit', options: { intervalMs?: number; route?: Route } = {}): Promise<boolean> {
    const session = client.session;
    const route = options.route ?? this.route();
    const rpc = ++this.#rpc;
    // In the log before the call: its events may reach the client before its response does.
    const trims = session.replica.trims;
    for (let seq = 1; seq <= count; seq++) session.log.push({ seq, trims });
    const response = await this.post(route, toolCallBody('emit', { count, intervalMs: options.intervalMs ?? 1 }, rpc), this.headers(session));
    this.note(`${label} ${count} on ${client.name}/${session.label} via ${route.name}: ${response.status}`);
    if (response.status === 404) {
      session.log.length -= count;
      this.expectNotFound(response, session, `${label} on ${client.name}`);
      this.stats.notFound++;
      client.notFound = true;
      return false;
    }
    // A 503 would leave it unknown whether the tool ran: nothing in this model makes a replica suspect.
    if (response.status !== 200) this.fail(`${label} on ${client.name}/${session.label} via ${route.name} answered ${response.status} ${response.body.slice(0, 300)}`);
    if (this.isLost(session)) this.fail(`${label} on ${client.name}/${session.label}: 200 although the owner was killed`);
    const text = this.rpcResult(response, rpc).result?.content?.[0]?.text;
    if (text !== `emitted ${count} on get stream`) this.fail(`emit answered ${JSON.stringify(text)}`);
    this.stats.eventsEmitted += count;
    return true;
  }

  /** A GET without Last-Event-ID (E4: supersedes), retried while the owner still holds the old one. */
  async plainGet(client: Client): Promise<void> {
    const previous = client.stream;
    this.closeStream(client);
    client.stream = undefined;
    const session = client.session;
    const route = this.route();
    for (let attempt = 1; ; attempt++) {
      const from = session.log.length;
      const opened = await wireGet(this.target(route), this.headers(session, { accept: 'text/event-stream' }), REQUEST_MS);
      if (opened.kind === 'stream') {
        if (this.isLost(session)) this.fail(`plain GET on ${session.label}: a stream although its owner was killed`);
        const held = this.fleet.journal && previous?.phase === 'exact' && previous.inc !== undefined && previous.inc === session.currentGet ? previous : undefined;
        if (this.fleet.journal && opened.headers['mcp-resumption'] === 'new-stream') {
          // A take-over that cannot go on from where the client that left stopped (the journal's
          // window moved past it): decided as a resumption from there, so signalled, with no
          // Last-Event-ID to echo, then a fresh stream. The held stream may be one the model does
          // not follow: the gateway's own fresh GET after a call's resumption was signalled.
          const reason = opened.headers['mcp-resumption-reason'];
          const what = `plain GET ${client.name}/${session.label} via ${route.name}, taking ${held ? `held inc ${held.inc!.no} over from #${held.next}` : 'a held GET stream over'}`;
          if (reason !== 'gap') {
            opened.stream.close();
            this.fail(`${what}: new-stream ${String(reason)} (only a moved window, a gap, stops a take-over)`);
          }
          this.note(`${what}: new-stream ${reason}`);
          this.stats.newStream[reason] = (this.stats.newStream[reason] ?? 0) + 1;
          const stream = this.newStreamModel(client, opened.stream, route, 'signal', undefined, from);
          stream.signal = { reason, lastEventId: '' };
          client.stream = stream;
          await stream.conn.until(() => stream.conn.events.length > 0, EVENTS_MS);
          this.drain(client);
          if (stream.phase === 'signal') this.fail(`${what}: no stream_reset notification within ${EVENTS_MS} ms${stream.conn.ended ? ' (the stream ended)' : ''}`);
          await this.settle(client, stream);
          return;
        }
        if (opened.headers['mcp-resumption'] !== undefined) this.fail(`a plain GET answered with Mcp-Resumption: ${String(opened.headers['mcp-resumption'])}`);
        if (this.fleet.journal) {
          // The session's GET stream, held with no client, is taken over (streams/held-get.ts): it
          // goes on as the same incarnation from after the last event the gateway wrote to the
          // client that left (at or after what that client read); otherwise the stream is fresh
          // from now. Which one is told by the incarnation its cursors name (resolveTail), and
          // where it begins by probes, as after a signal.
          const stream = this.newStreamModel(client, opened.stream, route, 'tail', this.newIncarnation(session), held ? held.next : from);
          stream.takeover = { inc: held?.inc, freshFrom: from };
          // A take-over is a continuation from the journal with no Last-Event-ID to echo.
          if (held) stream.resumedFrom = '';
          client.stream = stream;
          this.note(`plain GET ${client.name}/${session.label} via ${route.name}: stream #${stream.no}, held inc ${held?.inc?.no ?? 'none'} from #${stream.from}, else fresh at #${from}`);
          await this.settle(client, stream);
          return;
        }
        const inc = this.newIncarnation(session);
        inc.first = from;
        session.currentGet = inc;
        client.stream = this.newStreamModel(client, opened.stream, route, 'exact', inc, from);
        this.note(`plain GET ${client.name}/${session.label} via ${route.name}: stream #${client.stream.no} inc ${inc.no} at #${from}`);
        return;
      }
      const { response } = opened;
      this.expectNoServerError(response, 'plain GET');
      // With the journal, the gateway itself retries the owner's 409 while the held stream goes.
      if (response.status === 409 && attempt < (this.fleet.journal ? HELD_CONFLICT_RETRIES : CONFLICT_RETRIES)) {
        this.stats.conflicts++;
        await new Promise((resolve) => setTimeout(resolve, CONFLICT_BACKOFF_MS));
        continue;
      }
      if (response.status === 503 && attempt < UNAVAILABLE_RETRIES) {
        this.stats.unavailable++;
        await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
        continue;
      }
      this.note(`plain GET ${client.name}/${session.label} via ${route.name}: ${response.status}`);
      if (response.status === 409 && this.fleet.journal) {
        // A plain GET right after its client left the session's GET stream, before that stream's
        // gateway saw it go (held, J2) within the GET's retries: the owner answers it 409, and
        // nothing is superseded. Once held, the old stream is let go for the session's next GET,
        // so a later GET would be served; the walk's client gives the session up.
        this.stats.heldConflicts++;
        await this.renew(client);
        return;
      }
      if (response.status === 404) {
        this.expectNotFound(response, session, `plain GET on ${client.name}`);
        this.stats.notFound++;
        client.notFound = true;
        return;
      }
      this.fail(`plain GET on ${client.name}/${session.label} via ${route.name} answered ${response.status} ${response.body.slice(0, 300)}` + (response.status === 409 ? ` after ${attempt} tries: the owner still holds a stream the client left long ago (R5)` : ''));
    }
  }

  predict(client: Client, cursor: string, forged: boolean): Prediction {
    const session = client.session;
    const lost = this.isLost(session);
    const p: Prediction = { mustContinue: false, mayContinue: false, from: 0, reasons: new Set(), notFound: false, complete: false, why: '' };
    const info = this.cursors.get(cursor);
    // A session whose owner was killed gets 404 at checks 2 and 3 once the gateway knows; until
    // it finds out (its next request to the owner), the signal, and then the stream ends.
    if (forged || !info) {
      p.notFound = lost;
      p.reasons.add('foreign_cursor');
      p.why = 'forged cursor';
      return p;
    }
    if (info.session !== session) {
      p.notFound = lost;
      p.reasons.add('session_mismatch');
      p.why = `cursor of ${info.session.label}`;
      return p;
    }
    const lastOfItsStream = info.stream.lastCursor === cursor;
    if (info.kind === 'signal' && lastOfItsStream) {
      // The gateway may have ended that stream on purpose right after its signal: it is settled
      // (404 where the session is gone and the gateway knows it; before it knows, nothing follows).
      p.complete = true;
      if (lost) p.notFound = true;
      const ended = info.stream.conn.ended && !info.stream.conn.closedByUs && !info.stream.cut;
      if (ended && !lost) {
        p.why = 'signal that ended its stream';
        return p;
      }
    }
    if (info.inc !== session.currentGet) {
      p.reasons.add('superseded');
      p.why += `inc ${info.inc.no} superseded by ${session.currentGet?.no}`;
      return p;
    }
    if (this.fleet.journal) return this.predictFromJournal(p, session, info);
    if (lost) {
      p.reasons.add('owner_gone');
      // A gateway that has not yet seen the owner go finds no owner id for a signal position (gap),
      // and then fails to open the fresh stream.
      if (info.kind !== 'event') p.reasons.add('gap');
      p.why += 'owner killed';
      return p;
    }
    if (info.kind !== 'event') {
      // No upstream id at a position the gateway made itself (a priming event: only with the journal).
      p.reasons.add('gap');
      p.why += `position of a ${info.kind}`;
      return p;
    }
    const event = session.log[info.index]!;
    if (event.trims < session.replica.trims) {
      p.reasons.add('gap');
      p.why += `log trimmed after event #${info.index}`;
      return p;
    }
    p.mustContinue = true;
    p.from = info.index + 1;
    p.why += `event #${info.index} of the current incarnation`;
    return p;
  }

  /**
   * With the journal (§8), for a cursor of the session's current GET stream: that stream was
   * journaled from its first event on, and held while no client read it (J2), so the journal holds
   * every event after the cursor, signal or not, whatever the owner's log holds (J3), unless the
   * window moved past the cursor (J5: gap) or the owner is gone (J4: owner_gone).
   */
  predictFromJournal(p: Prediction, session: Session, info: CursorInfo): Prediction {
    const first = info.kind === 'signal' ? info.inc.first : info.index + 1;
    if (first === undefined) this.fail(`the session's GET stream inc ${info.inc.no} never began`);
    p.from = first;
    const after = session.log.length - first;
    if (this.isLost(session)) {
      // Check 6 once the gateway knows. Until then, the journal's events after the cursor, and
      // then (or at once, with none) what cannot continue: owner_gone, or a gap (no log to take
      // over from, or no upstream id at a signal's position), the stream ending.
      p.reasons.add('owner_gone');
      p.reasons.add('gap');
      p.mayContinue = true;
      p.resets = new Set(['owner_gone', 'gap']);
      p.why += `owner killed, ${after} journaled after the cursor`;
      return p;
    }
    if (after >= this.fleet.window) {
      // Below the window. Continued is allowed only because the pump may not yet have recorded the
      // last events when the decision read the head; every event after the cursor is checked then.
      p.reasons.add('gap');
      p.mayContinue = true;
      p.why += `${after} events after the cursor, window ${this.fleet.window}`;
      return p;
    }
    p.mustContinue = true;
    p.why += `${info.kind === 'event' ? `event #${info.index}` : info.kind} of the current incarnation, ${after} after it in the journal`;
    return p;
  }

  /** A GET with Last-Event-ID, its answer classified against the model's prediction. */
  async resume(client: Client, cursor: string, how: string, forged = false): Promise<void> {
    this.closeStream(client);
    client.stream = undefined;
    // J1: the client's place is a priming event's cursor (nothing with a cursor came after it).
    if (client.lastPrimed && cursor === client.lastCursor) this.stats.primings.resumed++;
    else if (how === 'stale' && this.cursors.get(cursor)?.kind === 'priming') this.stats.primings.stale++;
    const session = client.session;
    const route = this.route();
    const prediction = this.predict(client, cursor, forged);
    const from = session.log.length;
    let opened: WireGet;
    for (let attempt = 1; ; attempt++) {
      opened = await wireGet(this.target(route), this.headers(session, { accept: 'text/event-stream', 'last-event-id': cursor }), REQUEST_MS);
      if (opened.kind === 'answer' && opened.response.status === 503 && attempt < UNAVAILABLE_RETRIES) {
        this.expectNoServerError(opened.response, 'resumption');
        this.stats.unavailable++;
        await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
        continue;
      }
      break;
    }
    const what = `${how} ${client.name}/${session.label} via ${route.name} (expected ${this.describe(prediction)}: ${prediction.why})`;
    if (opened.kind === 'answer') {
      const { response } = opened;
      this.note(`${what}: ${response.status}`);
      this.expectNoServerError(response, what);
      if (response.status === 404) {
        if (!prediction.notFound) this.fail(`${what}: 404 ${response.body}`);
        this.expectNotFound(response, session, what);
        this.stats.notFound++;
        client.notFound = true;
        return;
      }
      if (response.status === 204) {
        if (!prediction.complete) this.fail(`${what}: 204 (nothing follows) for a cursor after which events may follow: a silent loss`);
        if (response.headers['mcp-resumption'] !== 'continued') this.fail(`${what}: 204 with Mcp-Resumption ${String(response.headers['mcp-resumption'])}`);
        this.stats.complete++;
        return;
      }
      this.fail(`${what}: ${response.status} ${String(response.headers['content-type'])} ${response.body.slice(0, 300)}`);
    }

    const resumption = opened.headers['mcp-resumption'];
    const reason = opened.headers['mcp-resumption-reason'];
    if (resumption === 'continued') {
      if (reason !== undefined) this.fail(`${what}: continued with Mcp-Resumption-Reason ${String(reason)}`);
      const info = this.cursors.get(cursor);
      if (!(prediction.mustContinue || prediction.mayContinue) || !info) {
        opened.stream.close();
        this.fail(`${what}: continued`);
      }
      const stream = this.newStreamModel(client, opened.stream, route, 'exact', info.inc, prediction.from);
      stream.resumedFrom = cursor;
      if (prediction.resets) stream.resets = { reasons: prediction.resets, lastEventId: cursor };
      client.stream = stream;
      this.note(`${what}: continued from #${prediction.from} on stream #${stream.no} (${session.log.length - prediction.from} to replay)`);
      this.stats.continued++;
      // J1: first of all the priming event for the client's position (acceptPriming checks it).
      await stream.conn.until(() => stream.conn.primed.length > 0 || stream.conn.events.length > 0 || stream.conn.ended, EVENTS_MS);
      if (stream.conn.primed[0]?.after !== 0) this.fail(`${what}: continued, and the stream did not begin with a priming event (J1)`);
      await this.checkpoint(client);
      if (this.isLost(session)) {
        // Every journaled event went (checkpoint): the stream of a session whose owner is gone ends
        // there, perhaps after saying so.
        if (!(await stream.conn.until(() => stream.conn.ended, END_MS))) this.fail(`${what}: continued, and did not end after the journal's events although the owner is gone`);
        this.drain(client);
      }
      return;
    }
    if (resumption !== 'new-stream' || typeof reason !== 'string') {
      opened.stream.close();
      this.fail(`${what}: a 200 stream with Mcp-Resumption ${String(resumption)} and reason ${String(reason)}`);
    }
    this.note(`${what}: new-stream ${reason}`);
    if (!prediction.reasons.has(reason as Reason)) {
      opened.stream.close();
      this.fail(`${what}: new-stream ${reason}` + (prediction.mustContinue ? ' where the owner could replay everything (an unneeded signal)' : ''));
    }
    this.stats.newStream[reason] = (this.stats.newStream[reason] ?? 0) + 1;
    const stream = this.newStreamModel(client, opened.stream, route, 'signal', undefined, from);
    stream.signal = { reason: reason as Reason, lastEventId: cursor };
    client.stream = stream;
    await stream.conn.until(() => stream.conn.events.length > 0, EVENTS_MS);
    this.drain(client);
    if (stream.phase === 'signal') this.fail(`${what}: no stream_reset notification within ${EVENTS_MS} ms${stream.conn.ended ? ' (the stream ended)' : ''}`);
    if (stream.phase === 'dead') {
      if (!(await stream.conn.until(() => stream.conn.ended, END_MS))) this.fail(`${what}: the signal stream of a session that is gone did not end`);
      this.drain(client);
      return;
    }
    // The session's GET stream is the fresh one once it runs (resolveTail); a signal stream that
    // ends without one superseded nothing.
    await this.settle(client, stream);
  }

  /**
   * After a signal on a live session the stream goes on as a fresh GET from the owner, opened by
   * the gateway after the signal was sent. Probes of increasing size are emitted until one arrives
   * (the first to arrive, and everything after it, must arrive complete and in order), or the
   * stream ends (the gateway gave up on a fresh stream: allowed).
   */
  async settle(client: Client, stream: StreamModel): Promise<void> {
    this.stats.settles++;
    for (let k = 1; k <= PROBES; k++) {
      this.drain(client);
      if (stream.conn.ended) {
        if (stream.buffer.length > 0) this.fail(`${client.name} stream #${stream.no}: ended while probe events were still arriving`);
        if (k === 1) this.stats.settlesEndedAtOnce++;
        this.note(`settle ${client.name} stream #${stream.no}: ended after the signal`);
        return;
      }
      if (!(await this.emit(client, k, 'probe'))) return;
      const probe = k;
      await stream.conn.until(() => {
        const last = stream.conn.events[stream.conn.events.length - 1];
        return stream.conn.ended || (stream.conn.events.length > stream.processed && emitPayload(last?.data)?.seq === probe);
      }, PROBE_MS);
      this.drain(client);
      if (stream.phase !== 'tail') this.fail(`${client.name} stream #${stream.no}: left the tail phase unexpectedly (${stream.phase})`);
      const last = stream.buffer[stream.buffer.length - 1];
      if (last?.seq === probe) {
        const start = client.session.log.length - stream.buffer.length;
        this.resolveTail(client, stream);
        this.note(`settle ${client.name} stream #${stream.no}: live from log #${start} after ${k} probe(s), ${start - stream.from} probe events lost`);
        await this.checkpoint(client);
        return;
      }
    }
    this.fail(`${client.name} stream #${stream.no} (fresh after ${stream.signal?.reason}): open, but none of ${PROBES} probes emitted over ${PROBES * PROBE_MS} ms arrived`);
  }

  /**
   * The connection breaks while events are being emitted: some reached the client, some were
   * written by the owner (and perhaps recorded by the gateway) into a connection that is gone.
   * The emit goes straight to a gateway, so that a balancer cut does not break the call itself.
   */
  async emitCut(client: Client): Promise<void> {
    const stream = client.stream!;
    let count = this.rng.int(6, 10);
    let after = this.rng.int(0, 3);
    // As for emit: a continuation that may tail the journal gets a burst smaller than the window,
    // or the pump may pass it between two reads (a gap, J5), which the model does not expect of an
    // open stream (MODEL_SEED=102 MODEL_JOURNAL=4 MODEL_LOGS=000, shrunk to 4 steps).
    if (this.fleet.journal && stream.resumedFrom !== undefined) {
      count = Math.min(count, this.fleet.window - 1);
      after = Math.min(after, count - 1);
    }
    const byBalancer = stream.route.pin !== undefined && this.rng.chance(0.5);
    const direct = this.rng.pick(this.routes.filter((r) => r.pin === undefined));
    const seen = stream.conn.events.length;
    const emitting = this.emit(client, count, 'emit (cut midway)', { intervalMs: 3, route: direct });
    await stream.conn.until(() => stream.conn.ended || stream.conn.events.length > seen + after, EVENTS_MS);
    if (byBalancer) {
      for (const c of this.clients) if (c.stream && !c.stream.conn.ended && c.stream.route.pin !== undefined) c.stream.cut = true;
      this.balancer.cut();
    } else {
      stream.conn.close();
    }
    this.note(`${client.name} stream #${stream.no} ${byBalancer ? 'cut at the balancer' : 'dropped'} after ${stream.conn.events.length - seen} of ${count} events`);
    await emitting;
    for (const c of this.clients) {
      const s = c.stream;
      if (s?.cut && !(await s.conn.until(() => s.conn.ended, END_MS))) this.fail(`${c.name} stream #${s.no} survived the balancer's cut`);
      this.drain(c);
    }
  }

  async kill(replica: ReplicaModel): Promise<void> {
    for (const client of this.clients) this.drain(client);
    await replica.proc.kill('SIGKILL');
    replica.up = false;
    replica.generation++;
    this.note(`killed ${replica.id}`);
    // R5: when the replica's stream breaks, the client's stream ends promptly. A continuation from
    // the journal (J3) may say first that it cannot go on: its pump is gone.
    for (const client of this.clients) {
      const stream = client.stream;
      if (!stream || client.session.replica !== replica) continue;
      // Also for a stream that has ended already (while another stream's end was awaited): what it
      // received before its end is read below.
      if (this.fleet.journal && stream.resumedFrom !== undefined) stream.resets = { reasons: new Set(['owner_gone', 'gap']), lastEventId: stream.resumedFrom };
      if (!stream.conn.ended && !(await stream.conn.until(() => stream.conn.ended, END_MS))) {
        this.fail(`${client.name} stream #${stream.no} (${stream.route.name}) did not end within ${END_MS} ms after its replica ${replica.id} was killed`);
      }
      this.drain(client);
    }
  }

  /**
   * Starts the replica again. The walk goes on while the process starts (seconds on a loaded
   * machine): it counts as up from the moment it said it listens, before any probe can find it.
   */
  restart(replica: ReplicaModel): void {
    this.note(`restarting ${replica.id}`);
    replica.restarting = replica.proc.restart().then(
      () => {
        replica.up = true;
        replica.restarting = undefined;
        this.note(`${replica.id} runs again`);
      },
      (err: unknown) => {
        replica.restarting = undefined;
        this.restartFailed ??= `restart of ${replica.id}: ${err instanceof Error ? err.message : String(err)}`;
      },
    );
  }

  async trim(replica: ReplicaModel): Promise<void> {
    const url = new URL('/_demo/trim?keep=0', replica.proc.url);
    const response = await wireRequest(url.href, { method: 'POST', timeoutMs: REQUEST_MS });
    if (response.status !== 200) this.fail(`trim on ${replica.id} answered ${response.status}`);
    replica.trims++;
    this.note(`trimmed ${replica.id}`);
  }

  async cutAll(): Promise<void> {
    const affected = this.clients.filter((c) => c.stream && !c.stream.conn.ended && c.stream.route.pin !== undefined);
    for (const client of this.clients) this.drain(client);
    for (const client of affected) client.stream!.cut = true;
    this.balancer.cut();
    this.note(`balancer cut (${affected.map((c) => c.name).join(',') || 'no streams'})`);
    for (const client of affected) {
      const stream = client.stream!;
      if (!(await stream.conn.until(() => stream.conn.ended, END_MS))) this.fail(`${client.name} stream #${stream.no} survived the balancer's cut`);
      this.drain(client);
    }
  }

  describe(p: Prediction): string {
    const options: string[] = [];
    if (p.mustContinue) options.push('continued');
    if (p.reasons.size > 0) options.push(`new-stream ${[...p.reasons].join('|')}`);
    if (p.complete) options.push('204');
    if (p.notFound) options.push('404');
    return options.join(' or ');
  }

  // ----- POST streams -----

  /**
   * A tool call answered with its own SSE stream, cut after some of its events: by the client, at
   * the balancer, or by killing its owner mid-call; the owner's log perhaps trimmed after the cut;
   * with the journal, perhaps resumed only once its response was journaled (and its owner perhaps
   * killed then: J4). The client resumes with a GET carrying the last cursor it received, and gets
   * exactly the rest of the call's events and its response (continued), or the signal and then
   * -32010 for the call (owner_gone, gap) or its journaled response (J4 after a gap), and the end
   * of the stream: never a wait for a response that will not come. Where the call's events carry
   * no cursor (no log, no journal), there is nothing to resume from.
   */
  async call(client: Client): Promise<void> {
    const session = client.session;
    const { rng } = this;
    const route = this.route();
    const { journal } = this.fleet;
    // With the journal, perhaps cut before its first event: only its priming event came (J1).
    const keep = rng.int(journal ? 0 : 1, CALL_KEEP_MAX);
    const roll = rng.next();
    const spare = this.replicas.filter((r) => r.up).length >= 2;
    const fault: CallFault | undefined =
      roll < 0.2 && spare
        ? 'kill'
        : roll < 0.4 && session.replica.log
          ? 'trim'
          : journal && roll >= 0.4 && roll < 0.55
            ? 'answered'
            : journal && roll >= 0.55 && roll < 0.7 && spare
              ? 'killAnswered'
              : undefined;
    const byBalancer = route.pin !== undefined && rng.chance(0.5);
    const rpc = ++this.#rpc;
    const what = `call ${client.name}/${session.label} via ${route.name}`;
    const opened = await wireOpen(this.target(route), {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: MCP_ACCEPT, ...this.headers(session) },
      body: toolCallBody('emit', { count: CALL_EVENTS, intervalMs: CALL_INTERVAL_MS, stream: 'request' }, rpc),
      timeoutMs: REQUEST_MS,
      // Dropped by the client: right after the priming event, its first event perhaps on its way.
      cutAtPriming: keep === 0 && fault !== 'kill' && !byBalancer,
    });
    if (opened.kind === 'answer') {
      const { response } = opened;
      this.note(`${what}: ${response.status}`);
      if (response.status !== 404) this.fail(`${what} answered ${response.status} ${response.body.slice(0, 300)}`);
      this.expectNotFound(response, session, what);
      this.stats.notFound++;
      client.notFound = true;
      return;
    }
    const conn = opened.stream;
    if (this.isLost(session)) {
      conn.close();
      this.fail(`${what}: a stream although the owner was killed`);
    }
    const idless = this.idless(session);
    await conn.until(() => (keep === 0 ? conn.primed.length > 0 : conn.events.length >= keep) || conn.ended, EVENTS_MS);
    if (fault === 'kill') {
      await this.kill(session.replica);
      if (!(await conn.until(() => conn.ended, END_MS))) this.fail(`${what}: its stream did not end within ${END_MS} ms after its replica was killed`);
    } else if (byBalancer) {
      await this.cutAll();
      if (!(await conn.until(() => conn.ended, END_MS))) this.fail(`${what}: its stream survived the balancer's cut`);
    } else {
      conn.close();
    }
    const seen = new Set<string>();
    // J1: a journaled POST stream begins with the gateway's priming event, at its first position.
    if (journal && conn.primed[0]?.after !== 0) this.fail(`${what}: its stream did not begin with a priming event (J1)`);
    if (!journal && conn.primed.length > 0) this.fail(`${what}: a priming event on a stream that is not journaled: ${JSON.stringify(conn.primed[0])}`);
    for (const priming of conn.primed) this.newCursor(`${what}: its priming event`, priming.id!, seen);
    let next = 1;
    for (const event of conn.events) {
      if (this.callEvent(`${what} before the cut`, event, rpc, seen, next, idless) === 'response') {
        this.note(`${what}: answered before the cut`);
        this.stats.calls.answeredBeforeCut++;
        return;
      }
      next++;
    }
    if (next === 1 && conn.primed.length === 0) this.fail(`${what}: its stream ended before its first event`);
    const cut = fault === 'kill' ? 'owner killed' : byBalancer ? 'cut at the balancer' : 'dropped';
    if (idless) {
      // E1: no id from the owner, none from the gateway without the journal: nothing to resume
      // from (§8 is what makes this call resumable).
      this.note(`${what}: ${cut} after ${next - 1} of ${CALL_EVENTS} events, which carry no cursor`);
      this.stats.calls.unresumable++;
      return;
    }
    // The client's place: its last event's cursor, or, cut before its first, its priming event's.
    const fromPriming = next === 1;
    const cursor = fromPriming ? conn.primed[conn.primed.length - 1]!.id! : conn.events[conn.events.length - 1]!.id!;
    if (fromPriming) this.stats.primings.calls++;
    this.note(`${what}: ${cut} after ${next - 1} of ${CALL_EVENTS} events${fromPriming ? ', resumed from its priming event' : ''}`);
    if (fault === 'trim') await this.trim(session.replica);
    if (fault === 'answered' || fault === 'killAnswered') {
      // The held stream (J2) reads on until the response has passed: every event of the call, the
      // response included, is journaled.
      // Read off this call's own incarnation (its record settles the call once the response is
      // recorded, with its bytes): the instances' journal counts also move with other streams.
      await waitFor(`${what}: the call's ${CALL_EVENTS} events and its response journaled`, bound(CALL_EVENTS * CALL_INTERVAL_MS), async () => (await this.pendingCalls(session.id, cursor)) === 0);
      this.note(`${what}: its response was journaled`);
      if (fault === 'killAnswered') await this.kill(session.replica);
    }

    // What may answer: continued (the rest and the response), or the signal and then -32010 or the
    // journaled response. With the journal, positions after the cursor: the rest and the response.
    const afterCursor = CALL_EVENTS + 1 - (next - 1);
    const belowWindow = journal && afterCursor >= this.fleet.window;
    const lost = this.isLost(session);
    const expect: CallExpectation = { continued: false, reasons: new Set(), then: 'failed', resets: undefined };
    if (!journal) {
      if (lost) expect.reasons.add('owner_gone');
      else if (fault === 'trim') expect.reasons.add('gap');
      else expect.continued = true;
    } else if (fault === 'kill') {
      // The response never reached the gateway: -32010, with owner_gone once the gateway knows the
      // owner is gone, a gap before (no log to take over from). The journal's events after the
      // cursor may come first (the headers then say continued).
      expect.reasons = new Set(['owner_gone', 'gap']);
      expect.continued = true;
      expect.resets = expect.reasons;
    } else if (fault === 'answered' || fault === 'killAnswered') {
      // J4: the journaled response is delivered, with its owner alive or not; after a gap too.
      if (!belowWindow) expect.continued = true;
      else {
        expect.reasons.add('gap');
        if (lost) expect.reasons.add('owner_gone');
        expect.then = 'response';
      }
    } else {
      // Held until its response passed (J2): whatever the owner's log holds.
      expect.continued = true;
      // The call runs on while its client is away: once a window of its events was journaled
      // after the cursor (a slow reconnection), the cursor is below the window, a gap (J5). The
      // call still settles with its response (J4): followed from the journal's window on while
      // its pump lives, or its journaled response once its stream ended; never -32010.
      if (belowWindow) {
        expect.reasons.add('gap');
        expect.then = 'response';
        expect.follows = true;
      }
    }
    const again = this.route();
    const how = `resumption of ${what}, through ${again.name} (expected ${describeCall(expect)})`;
    const resumed = await this.openResumption(again, session, cursor, how);
    if (resumed.kind === 'answer') this.fail(`${how}: ${resumed.response.status} ${resumed.response.body.slice(0, 300)}`);
    await this.checkCallResumption(how, resumed, expect, { rpc, cursor, seen, next });
  }

  /** What the resumption of a cut call, its stream read to its end, must show. */
  async checkCallResumption(
    how: string,
    resumed: Extract<WireGet, { kind: 'stream' }>,
    expect: CallExpectation,
    call: { rpc: number; cursor: string; seen: Set<string>; next: number },
  ): Promise<void> {
    const { rpc, cursor, seen } = call;
    let next = call.next;
    const stream = resumed.stream;
    const resumption = resumed.headers['mcp-resumption'];
    const header = resumed.headers['mcp-resumption-reason'];
    const continued = resumption === 'continued' && header === undefined;
    const signalled = resumption === 'new-stream' && expect.reasons.has(header as Reason);
    if (!(continued && expect.continued) && !signalled) {
      stream.close();
      this.fail(`${how}: Mcp-Resumption ${String(resumption)}, reason ${String(header)}`);
    }
    // The call settles: its response, or -32010. A stream may stay open after a response; one
    // after -32010 ends.
    const settled = (): boolean => stream.events.some((e) => callMessage(e)?.id === rpc);
    await stream.until(() => stream.ended || settled(), bound(CALL_EVENTS * CALL_INTERVAL_MS));
    if (settled() && callMessage(stream.events.find((e) => callMessage(e)?.id === rpc)!)?.error !== undefined) {
      if (!(await stream.until(() => stream.ended, END_MS))) this.fail(`${how}: the stream did not end after -32010`);
    }
    stream.close();
    // J1: a continuation begins with a priming event for the cursor it continues after; nothing
    // else is primed (a signal's first event is the signal).
    const [priming, ...primings] = stream.primed;
    if (continued && (priming?.after !== 0 || priming.id !== cursor)) this.fail(`${how}: continued, and not begun with a priming event for the cursor ${cursor} (J1): ${JSON.stringify(priming)}`);
    const stray = continued ? primings[0] : priming;
    if (stray !== undefined) this.fail(`${how}: a priming event that is not a continuation's first: ${JSON.stringify(stray)}`);
    let reason: Reason | undefined;
    let outcome: 'response' | 'failed' | undefined;
    let followed = false;
    const events = [...stream.events];
    if (signalled && streamReset(events[0] ?? { id: undefined, event: undefined, data: undefined }) === undefined) {
      this.fail(`${how}: the first event is not its stream_reset notification: ${JSON.stringify(events[0])}`);
    }
    for (const [i, event] of events.entries()) {
      // A retry hint (a continuation's end) is no event.
      if (event.data === undefined && event.id === undefined) continue;
      if (outcome !== undefined) this.fail(`${how}: events after the call settled: ${JSON.stringify(events.slice(i).map((e) => e.data))}`);
      const reset = streamReset(event);
      if (reset !== undefined && reason === undefined) {
        // The signal: the first event of a new stream, or (continued) after the journal's events.
        if (signalled ? i !== 0 || reset.reason !== header : expect.resets?.has(reset.reason as Reason) !== true) {
          this.fail(`${how}: a stream_reset ${String(reset.reason)} as event ${i + 1}: ${JSON.stringify(events.map((e) => e.data))}`);
        }
        if (reset.resumed !== false || reset.lastEventId !== cursor) this.fail(`${how}: the stream_reset notification ${JSON.stringify(event.data)} (lastEventId ${cursor})`);
        if (event.id === undefined) this.fail(`${how}: the stream_reset without a cursor`);
        this.newCursor(how, event.id, seen);
        reason = reset.reason as Reason;
        if (!signalled) this.stats.newStream[reason] = (this.stats.newStream[reason] ?? 0) + 1;
        continue;
      }
      const message = callMessage(event);
      if (reason !== undefined && expect.follows === true && message?.id !== rpc && emitPayload(event.data) !== undefined) {
        // A call still running, followed after the gap from the journal's window on: its events
        // in order from there, each under a cursor of its own, then its response.
        const from = emitPayload(event.data)!.seq;
        if (!followed) {
          if (from < next) this.fail(`${how}: after the gap, event seq ${from} again (the client saw up to ${next - 1})`);
          next = from;
          followed = true;
        }
        if (this.callEvent(how, event, rpc, seen, next) === 'response') outcome = 'response';
        else next++;
        continue;
      }
      if (reason !== undefined) {
        // After the signal, only the call's settling: -32010, or its journaled response (J4).
        if (message?.id !== rpc) this.fail(`${how}: after the signal, ${JSON.stringify(event.data)}`);
        if (message.error !== undefined) {
          // The gateway's own -32010 may come without a cursor: nothing follows it to resume from.
          if (event.id !== undefined) this.newCursor(how, event.id, seen);
          const wanted = { code: -32010, message: "Stream not resumable; the request's outcome is unknown", data: { resumed: false, reason } };
          if (JSON.stringify(message.error) !== JSON.stringify(wanted)) this.fail(`${how}: not -32010 for request ${rpc}: ${JSON.stringify(message)}`);
          if (expect.then !== 'failed') this.fail(`${how}: -32010 although the response was journaled (J4)`);
          outcome = 'failed';
        } else {
          const text = (message.result as { content?: { text?: string }[] } | undefined)?.content?.[0]?.text;
          if (text !== `emitted ${CALL_EVENTS} on request stream`) this.fail(`${how}: the response ${JSON.stringify(message)}`);
          // J4: with its original cursor.
          if (event.id === undefined) this.fail(`${how}: the journaled response without its cursor`);
          this.newCursor(how, event.id, seen);
          if (expect.then !== 'response' || !signalled) this.fail(`${how}: the response after a stream_reset, although it never reached the gateway`);
          outcome = 'response';
        }
        continue;
      }
      // A call event or the response: in order, each under a cursor of its own.
      if (this.callEvent(how, event, rpc, seen, next) === 'response') outcome = 'response';
      else next++;
    }
    if (outcome === undefined) this.fail(`${how}: the call did not settle (${reason === undefined ? 'continued' : `new-stream ${reason}`}, events up to seq ${next - 1})`);
    this.note(`${how}: ${continued ? 'continued' : `new-stream ${reason}`}${continued && reason ? `, then stream_reset ${reason}` : ''}, ${outcome}`);
    if (continued) this.stats.continued++;
    if (signalled) this.stats.newStream[reason!] = (this.stats.newStream[reason!] ?? 0) + 1;
    if (outcome === 'response') this.stats.calls[reason === undefined ? 'continued' : followed ? 'followedAfterGap' : 'answeredAfterGap']++;
    else this.stats.calls.failed++;
  }

  /** Events journaled by both gateway instances (§8 J1), as they count them. */
  /** The calls the cursor's incarnation still awaits a response for, as the store holds it. */
  async pendingCalls(sessionId: string, cursor: string): Promise<number | undefined> {
    const url = `${this.gateways[0]!.adminUrl}/debug/explain?cursor=${encodeURIComponent(cursor)}&session=${encodeURIComponent(sessionId)}`;
    const view = (await (await fetch(url)).json()) as { incarnation?: { record?: { pendingCalls?: number } } | null };
    return view.incarnation?.record?.pendingCalls;
  }

  async journaledEvents(): Promise<number> {
    const values = await Promise.all(this.gateways.map((g) => metricValue(g.registry, 'mcp_gateway_journal_events_total')));
    return values.reduce((a, b) => a + b, 0);
  }

  /** An event of a call's stream: emit notification number `seq`, or the call's response. */
  callEvent(where: string, event: WireEvent, rpc: number, seen: Set<string>, seq: number, idless = false): 'event' | 'response' {
    if (idless) {
      if (event.id !== undefined) this.fail(`${where}: event ${JSON.stringify(event)} carries an id, although its replica keeps no log and the journal is off (E1)`);
    } else {
      if (event.id === undefined) this.fail(`${where}: an event without a cursor: ${JSON.stringify(event)}`);
      this.newCursor(where, event.id, seen);
    }
    const message = callMessage(event);
    if (message?.id === rpc) {
      const text = (message.result as { content?: { text?: string }[] } | undefined)?.content?.[0]?.text;
      if (seq !== CALL_EVENTS + 1 || text !== `emitted ${CALL_EVENTS} on request stream`) {
        this.fail(`${where}: the response ${JSON.stringify(message)} after ${seq - 1} of ${CALL_EVENTS} events`);
      }
      return 'response';
    }
    const payload = emitPayload(event.data);
    if (payload?.seq !== seq) this.fail(`${where}: expected the call's event seq ${seq} next, got ${JSON.stringify(event)}`);
    return 'event';
  }

  /** A cursor seen for the first time: well-formed, and never issued before for anything else. */
  newCursor(where: string, cursor: string, seen: Set<string>): void {
    if (!CURSOR_ALPHABET.test(cursor)) this.fail(`${where}: cursor ${JSON.stringify(cursor)} is not opaque ASCII of at most 128 characters (E2)`);
    if (seen.has(cursor) || this.callCursors.has(cursor) || this.cursors.has(cursor)) this.fail(`${where}: cursor ${cursor} issued twice`);
    seen.add(cursor);
    this.callCursors.add(cursor);
  }

  /** A GET with Last-Event-ID, retried while the owner is suspected (503 with Retry-After). */
  async openResumption(route: Route, session: Session, cursor: string, what: string): Promise<WireGet> {
    for (let attempt = 1; ; attempt++) {
      const opened = await wireGet(this.target(route), this.headers(session, { accept: 'text/event-stream', 'last-event-id': cursor }), REQUEST_MS);
      if (opened.kind === 'answer') this.expectNoServerError(opened.response, what);
      if (opened.kind === 'answer' && opened.response.status === 503 && attempt < UNAVAILABLE_RETRIES) {
        this.stats.unavailable++;
        await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
        continue;
      }
      return opened;
    }
  }

  // ----- the walk's steps -----

  /** Whether `client` can take a step of `kind` now: fast-check skips a step whose precondition fails. */
  applicable(kind: Kind, client: Client): boolean {
    if (SKIP.has(kind)) return false;
    const open = client.stream !== undefined && !client.stream.conn.ended;
    const up = this.replicas.filter((r) => r.up).length;
    switch (kind) {
      case 'emitCut':
        return open && client.stream?.phase === 'exact' && !this.isLost(client.session);
      case 'resume':
      case 'forged':
        // A client whose events carry no cursor has none to give: it resumes with one it kept from
        // elsewhere (a foreign cursor), which draws a signal, and so a cursor of its own.
        return client.lastCursor !== undefined || this.idless(client.session);
      case 'abort':
        return open;
      case 'stale':
        return client.history.length > 1;
      case 'cross':
        return this.clients.some((c) => c !== client && c.history.length > 0);
      case 'kill':
        return up >= 2;
      case 'restart':
        return this.replicas.some((r) => !r.up && r.restarting === undefined);
      case 'trim':
        // A replica without a log has nothing to trim (the demo answers 409).
        return this.replicas.some((r) => r.up && r.log);
      default:
        return true;
    }
  }

  /** One step of the walk; `choice` seeds every random choice within it. */
  async act(kind: Kind, client: Client, choice: number): Promise<void> {
    this.rng = prng(choice);
    this.#step++;
    this.stats.steps++;
    this.stats.actions[kind] = (this.stats.actions[kind] ?? 0) + 1;
    const began = performance.now();
    try {
      if (this.restartFailed !== undefined) this.fail(this.restartFailed);
      await this.#act(kind, client);
      // A client whose session is gone starts a new one, as an MCP client does after a 404.
      for (const c of this.clients) {
        if (!c.notFound) continue;
        await this.renew(c);
        if (this.rng.chance(0.7)) await this.plainGet(c);
      }
      // Nothing may arrive that the model did not expect, on any client.
      for (const c of this.clients) this.drain(c);
    } catch (err) {
      // A request that failed or hung is a failure of the walk too, reported with its last actions.
      if (err instanceof Violation) throw err;
      this.fail(`${kind} on ${client.name}: ${err instanceof Error ? err.message : String(err)}`);
    }
    this.stats.actionMs[kind] = Math.round((this.stats.actionMs[kind] ?? 0) + performance.now() - began);
  }

  async #act(kind: Kind, client: Client): Promise<void> {
    const { rng } = this;
    const up = this.replicas.filter((r) => r.up);
    switch (kind) {
      case 'emit': {
        // A continuation through another instance than the pump's reads the journal as the pump
        // writes it: a burst of as many events as the window holds can pass it between two reads,
        // and the stream then says gap (J5) and goes on as a new one. That is the contract, but
        // the model expects an open stream to deliver everything: such streams get smaller bursts.
        const tail = this.fleet.journal && client.stream?.resumedFrom !== undefined;
        const count = rng.int(1, 6);
        if (await this.emit(client, tail ? Math.min(count, this.fleet.window - 1) : count)) await this.checkpoint(client);
        return;
      }
      case 'emitCut':
        return this.emitCut(client);
      case 'resume':
        if (client.lastCursor === undefined) return this.resume(client, FOREIGN_CURSOR, 'resume (no cursor of its own)', true);
        return this.resume(client, client.lastCursor, 'resume');
      case 'plain':
        return this.plainGet(client);
      case 'abort':
        this.closeStream(client);
        await client.stream!.conn.until(() => client.stream!.conn.ended, END_MS);
        this.note(`${client.name} dropped stream #${client.stream!.no}`);
        return;
      case 'stale':
        return this.resume(client, rng.pick(client.history.slice(0, -1)), 'stale');
      case 'cross': {
        const others = this.clients.filter((c) => c !== client && c.history.length > 0);
        return this.resume(client, rng.pick(rng.pick(others).history), 'cross');
      }
      case 'forged': {
        const real = client.lastCursor ?? FOREIGN_CURSOR;
        const at = rng.int(0, real.length - 1);
        const swapped = real[at] === 'A' ? 'B' : 'A';
        return this.resume(client, real.slice(0, at) + swapped + real.slice(at + 1), 'forged', true);
      }
      case 'cut':
        return this.cutAll();
      case 'kill':
        return this.kill(rng.pick(up));
      case 'restart':
        return this.restart(rng.pick(this.replicas.filter((r) => !r.up && r.restarting === undefined)));
      case 'trim':
        return this.trim(rng.pick(up.filter((r) => r.log)));
      case 'renew':
        await this.renew(client);
        if (rng.chance(0.7)) await this.plainGet(client);
        return;
      case 'call':
        return this.call(client);
    }
  }
}

/**
 * A cut call's fault: its owner killed mid-call, its owner's log trimmed after the cut, or (with
 * the journal) the resumption only once the response was journaled, its owner killed then or not.
 */
type CallFault = 'kill' | 'trim' | 'answered' | 'killAnswered';

/** What may answer a cut call's resumption. */
interface CallExpectation {
  /** Continued: the rest of its events and its response. */
  continued: boolean;
  /** Or a new stream with one of these reasons... */
  reasons: Set<Reason>;
  /** ...and then -32010, or the journaled response (J4 after a gap). */
  then: 'failed' | 'response';
  /** Continued, and after the journal's events the signal (one of these) and -32010. */
  resets: Set<Reason> | undefined;
  /** After the gap, the call's events from the journal's window on may come before its response. */
  follows?: boolean;
}

function describeCall(e: CallExpectation): string {
  const options: string[] = [];
  if (e.continued) options.push(e.resets ? `continued (perhaps then ${[...e.resets].join('|')} and -32010)` : 'continued');
  if (e.reasons.size > 0) options.push(`new-stream ${[...e.reasons].join('|')} then ${e.then === 'failed' ? '-32010' : 'the response'}`);
  return options.join(' or ');
}

/** The gateway's stream_reset notification in an event, if it is one. */
function streamReset(event: WireEvent): { resumed?: unknown; reason?: unknown; lastEventId?: unknown } | undefined {
  const message = callMessage(event);
  return message?.method === 'notifications/gateway/stream_reset' ? ((message.params ?? {}) as ReturnType<typeof streamReset>) : undefined;
}

/** The JSON-RPC message in an event's data, if it holds one. */
function callMessage(event: WireEvent): { id?: unknown; method?: string; params?: unknown; result?: unknown; error?: unknown } | undefined {
  try {
    const message = JSON.parse(event.data ?? '') as unknown;
    return typeof message === 'object' && message !== null ? (message as ReturnType<typeof callMessage>) : undefined;
  } catch {
    return undefined;
  }
}

/** The steps of the walk and how often each is drawn. */
const WEIGHTS = {
  emit: 30,
  emitCut: 8,
  resume: 22,
  plain: 8,
  abort: 6,
  stale: 6,
  cross: 2,
  forged: 1,
  cut: 5,
  kill: 3,
  restart: 6,
  trim: 4,
  renew: 2,
  call: 8,
} as const;
type Kind = keyof typeof WEIGHTS;

/** One step: its kind, the client that takes it, and the seed of its random choices. */
class Step implements fc.AsyncCommand<Model, Model> {
  constructor(
    readonly kind: Kind,
    readonly client: number,
    readonly choice: number,
  ) {}

  check(model: Readonly<Model>): boolean {
    return model.applicable(this.kind, model.clients[this.client]!);
  }

  run(model: Model): Promise<void> {
    return model.act(this.kind, model.clients[this.client]!, this.choice);
  }

  toString(): string {
    return `${this.kind}(c${this.client + 1}#${this.choice})`;
  }
}

const steps = fc.oneof(
  ...Object.entries(WEIGHTS).map(([kind, weight]) => ({
    weight,
    arbitrary: fc.tuple(fc.nat(CLIENTS - 1), fc.nat()).map(([client, choice]) => new Step(kind as Kind, client, choice)),
  })),
);

/**
 * Walks of at least `min` steps. fc.commands draws a walk's length uniformly from 0 up, mostly too
 * short for a walk through a real fleet; shrinking is fc.commands' own, down to any length.
 */
class LongWalks<T> extends fc.Arbitrary<Iterable<T>> {
  constructor(
    private readonly walks: fc.Arbitrary<Iterable<T>>,
    private readonly min: number,
  ) {
    super();
  }

  generate(mrng: fc.Random, biasFactor: number | undefined): fc.Value<Iterable<T>> {
    for (;;) {
      const walk = this.walks.generate(mrng, biasFactor);
      // value_, not value: reading value would leave fast-check a clone to run, and shrinking
      // goes by which of the original steps ran.
      if ([...walk.value_].length >= this.min) return walk;
    }
  }

  canShrinkWithoutContext(value: unknown): value is Iterable<T> {
    return this.walks.canShrinkWithoutContext(value);
  }

  shrink(value: Iterable<T>, context: unknown): fc.Stream<fc.Value<Iterable<T>>> {
    return this.walks.shrink(value, context);
  }
}

async function continuations(gateways: RunningGateway[], source: 'journal' | 'owner'): Promise<number> {
  const values = await Promise.all(gateways.map((g) => metricValue(g.registry, 'mcp_gateway_continuations_total', { source })));
  return values.reduce((a, b) => a + b, 0);
}

async function resumptionMetrics(gateways: RunningGateway[], labels: Record<string, string>): Promise<number> {
  const values = await Promise.all(gateways.map((g) => metricValue(g.registry, 'mcp_gateway_resumptions_total', labels)));
  return values.reduce((a, b) => a + b, 0);
}

// The walk, and on a failure the shrinking, with the fleet's start and end around them.
t.setTimeout(WALK_MS + SHRINK_MS + bound(60_000));
const FLEET = fleetConfig(SEED);
/** Longer than any walk with its shrinking. */
const HOLD_MS = WALK_MS + SHRINK_MS + bound(60_000);

t.test(`model-based resumption walk, MODEL_SEED=${SEED} (${describeFleet(FLEET)}), at least ${STEPS} steps`, async (t: Test) => {
  // The fleet follows from the seed unless these chose it.
  const fleetSet = [
    process.env['MODEL_JOURNAL'] === undefined ? '' : ` MODEL_JOURNAL=${process.env['MODEL_JOURNAL']}`,
    process.env['MODEL_LOGS'] === undefined ? '' : ` MODEL_LOGS=${process.env['MODEL_LOGS']}`,
  ].join('');
  const replayed = [PATH === undefined ? '' : ` MODEL_PATH=${PATH}`, REPLAY === undefined ? '' : ` MODEL_REPLAY=${REPLAY}`, fleetSet].join('');
  t.comment(`fleet: ${describeFleet(FLEET)}`);
  t.comment(`replay with MODEL_SEED=${SEED} MODEL_STEPS=${STEPS}${replayed}${SKIP.size > 0 ? ` MODEL_SKIP=${[...SKIP].join(',')}` : ''}`);
  const started = performance.now();
  const redis = await startRedisServer(t);
  const processes = await Promise.all(FLEET.logs.map((log, i) => spawnReplica(t, { id: `r${i + 1}`, eventStore: log })));
  const config = {
    // The walk checks the resumption rules, not store timing (store-outage*.test.ts do): a store
    // answer slowed by a stall of a loaded machine is not an outage here, where the default (500 ms)
    // gave a 503 (MODEL_SEED=539762739 beside a CPU hog).
    store: { type: 'redis', url: redis.url, commandTimeoutMs: bound(500) },
    replicas: processes.map((r) => ({ id: r.id, url: r.url })),
    // Probes as in production, only faster, so that a restarted replica takes sessions again; a
    // probe's time bound with a loaded machine's slack, so that only a killed replica (refused at
    // once) is found gone, never a running one that was slow to answer.
    health: { intervalMs: 1000, timeoutMs: bound(1000) },
    // A small window, so that cursors fall out of it (J5); holds that outlast the walk, so that a
    // stream is never let go for its client's slowness (the hold's end has its own tests,
    // journal*.test.ts).
    resumption: { journal: { enabled: FLEET.journal, maxEvents: FLEET.window, holdMs: HOLD_MS } },
  };
  const gateways = [await startGateway(t, config), await startGateway(t, config)];
  const balancer = await startBalancer(t, gateways.map((g) => g.url));

  // Every walk (shrinking runs many) starts from the whole fleet: the last walk's streams closed,
  // its killed replicas running again, and new sessions.
  let model: Model | undefined;
  const setup = async (): Promise<{ model: Model; real: Model }> => {
    for (const client of model?.clients ?? []) client.stream?.conn.close();
    for (const replica of model?.replicas ?? []) {
      await replica.restarting;
      if (!replica.up) await replica.proc.restart();
    }
    const replicas: ReplicaModel[] = processes.map((proc, i) => ({ id: proc.id, proc, up: true, generation: 0, trims: 0, log: FLEET.logs[i]! }));
    model = new Model(prng(SEED), replicas, gateways, balancer, FLEET);
    for (let i = 1; i <= CLIENTS; i++) {
      const client = await model.addClient(`c${i}`);
      await model.plainGet(client);
    }
    return { model, real: model };
  };
  t.teardown(() => {
    for (const client of model?.clients ?? []) client.stream?.conn.close();
  });

  const walks = new LongWalks(fc.commands([steps], { maxCommands: Math.ceil(STEPS * 1.25), size: 'max', ...(REPLAY === undefined ? {} : { replayPath: REPLAY }) }), STEPS);
  let failedAt: number | undefined;
  let walksRun = 0;
  const property = fc.asyncProperty(walks, async (walk) => {
    // Once shrinking has had its time, every further try passes at once: the shortest failing walk
    // found so far is the answer.
    if (failedAt !== undefined && performance.now() - failedAt > SHRINK_MS) return;
    walksRun++;
    try {
      await fc.asyncModelRun(setup, walk);
    } catch (err) {
      failedAt ??= performance.now();
      throw err;
    }
  });
  const details = await fc.check(property, {
    seed: SEED,
    numRuns: 1,
    endOnFailure: false,
    interruptAfterTimeLimit: WALK_MS + SHRINK_MS,
    ...(PATH === undefined ? {} : { path: PATH }),
  });
  if (details.failed) {
    const walk = details.counterexample === null ? '' : String(details.counterexample[0]);
    const replayPath = /replayPath="([^"]*)"/.exec(walk)?.[1];
    const shrunk = walk.replace(/\s*\/\*.*\*\/\s*$/s, '').split(',').filter(Boolean);
    const error = details.errorInstance;
    const message = error instanceof Error ? error.message : details.interrupted ? `the walk did not end within ${WALK_MS} ms` : String(error);
    const [what = '', ...trace] = message.split('\n');
    t.fail(`${what} (replay with MODEL_SEED=${SEED} MODEL_STEPS=${STEPS}${fleetSet})`, {
      fleet: describeFleet(FLEET),
      trace,
      shortest: `${shrunk.length} steps (${details.numShrinks} shrinks, ${walksRun} walks run): ${shrunk.join(' ')}`,
      replayWalk: `MODEL_SEED=${SEED} MODEL_STEPS=${STEPS}${fleetSet}`,
      replayShortest: `MODEL_SEED=${SEED} MODEL_STEPS=${STEPS}${fleetSet} MODEL_PATH=${String(details.counterexamplePath)} MODEL_REPLAY=${String(replayPath)}`,
    });
    return;
  }

  const seconds = Math.round((performance.now() - started) / 100) / 10;
  const { stats } = model!;
  t.comment(`seed ${SEED}: ${stats.steps} steps in ${seconds} s`);
  t.comment(`actions ${JSON.stringify(stats.actions)}`);
  t.comment(`ms per action kind ${JSON.stringify(stats.actionMs)}`);
  t.comment(
    `continued ${stats.continued}, 204 ${stats.complete}, new-stream ${JSON.stringify(stats.newStream)}, 404 ${stats.notFound}, ` +
      `409 retries ${stats.conflicts} (sessions given up for a held stream's 409 ${stats.heldConflicts}), 503 ${stats.unavailable} (on initialize ${stats.unavailableInitialize}), spontaneous ends ${stats.spontaneousEnds}`,
  );
  t.comment(
    `events emitted ${stats.eventsEmitted}, delivered ${stats.eventsDelivered} (replays ${stats.replayed}), ` +
      `fresh streams after a signal ${stats.settles} (ended at once ${stats.settlesEndedAtOnce}), probe events lost before the fresh stream attached ${stats.probesLost}`,
  );
  t.comment(`POST streams cut and resumed: ${JSON.stringify(stats.calls)}`);
  t.comment(
    `resumed from a priming cursor: a continuation's as the client's last ${stats.primings.resumed}, a plain GET's (stale) ${stats.primings.stale}, ` +
      `a call cut before its first event ${stats.primings.calls}; plain GETs' priming cursors placed ${stats.primings.placed}`,
  );
  t.comment(`streams continued from the journal ${await continuations(gateways, 'journal')}, by the owner ${await continuations(gateways, 'owner')}`);
  t.ok(Object.keys(stats.newStream).length > 0, 'the walk drew new-stream signals');
  if (FLEET.journal || FLEET.logs.some(Boolean)) {
    t.ok(stats.continued > 0, 'the walk continued streams');
    t.ok(stats.calls.continued + stats.calls.failed + stats.calls.answeredAfterGap > 0, 'the walk resumed POST streams');
  } else {
    // No cursor on any replica's event: only signals' positions can be resumed, as new streams.
    t.equal(stats.continued, 0, 'no stream continued: no replica keeps a log, and no journal');
    t.ok(stats.calls.unresumable > 0, 'the walk cut POST streams whose events carry no cursor');
  }
  if (!FLEET.journal) t.equal(await continuations(gateways, 'journal'), 0, 'nothing continued from a journal that is off');
  // Every continuation is primed: with the journal, every walk has several (without, only the owners' with a log).
  if (FLEET.journal) t.ok(stats.primings.resumed > 0, 'the walk resumed from continuations\' priming cursors');

  // What the gateways counted (§6) is what the clients saw.
  t.equal(await resumptionMetrics(gateways, { outcome: 'continued', reason: 'none' }), stats.continued + stats.complete, 'continued resumptions, as counted by the gateways');
  for (const reason of REASONS) {
    t.equal(await resumptionMetrics(gateways, { outcome: 'new_stream', reason }), stats.newStream[reason] ?? 0, `new_stream ${reason}, as counted by the gateways`);
  }
});

/** The incarnation a cursor names (its second dot-separated part, cursor/codec.ts). */
function cursorIncarnation(cursor: string): string {
  return cursor.split('.')[1] ?? '';
}
