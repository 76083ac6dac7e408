import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  LATEST_PROTOCOL_VERSION,
  LoggingMessageNotificationSchema,
  type LoggingMessageNotification,
} from '@modelcontextprotocol/sdk/types.js';
import { startReplica, type Replica } from '../../demo/src/replica.js';
import { spawnProcess } from '../helpers/processes.js';
import { spawnReplica, spawnReplicas, type ReplicaProcess } from '../helpers/replicas.js';

interface SseEvent {
  id?: string;
  event?: string;
  data: string;
}

/** Minimal SSE reader for raw responses; pulls one event per next() so a stream can be read in parts. */
async function* sseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  let buffered = '';
  for await (const chunk of body) {
    buffered += decoder.decode(chunk, { stream: true });
    for (let end = buffered.indexOf('\n\n'); end >= 0; end = buffered.indexOf('\n\n')) {
      const block = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      const event: SseEvent = { data: '' };
      let fields = 0;
      for (const line of block.split('\n')) {
        const colon = line.indexOf(':');
        if (colon === 0) continue; // comment (keep-alive)
        const name = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (name === 'id' || name === 'event') event[name] = value;
        else if (name === 'data') event.data += (event.data ? '\n' : '') + value;
        else continue;
        fields++;
      }
      if (fields > 0) yield event;
    }
  }
}

async function take(events: AsyncGenerator<SseEvent>, n: number): Promise<SseEvent[]> {
  const out: SseEvent[] = [];
  while (out.length < n) {
    const next = await events.next();
    if (next.done) throw new Error(`stream ended after ${out.length} of ${n} events`);
    out.push(next.value);
  }
  return out;
}

const seqOf = (e: SseEvent): number =>
  ((JSON.parse(e.data) as LoggingMessageNotification).params.data as { seq: number }).seq;

/** A session driven with plain fetch, so that every byte and id on the wire is visible. */
async function rawSession(url: string) {
  const post = (headers: Record<string, string>, body: unknown) =>
    fetch(url, {
      method: 'POST',
      headers: { ...headers, accept: 'application/json, text/event-stream', 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const init = await post(
    {},
    {
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: { protocolVersion: LATEST_PROTOCOL_VERSION, capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
    },
  );
  const sessionId = init.headers.get('mcp-session-id') as string;
  await init.text();
  const headers = { 'mcp-session-id': sessionId, 'mcp-protocol-version': LATEST_PROTOCOL_VERSION };
  const initialized = await post(headers, { jsonrpc: '2.0', method: 'notifications/initialized' });
  if (initialized.status !== 202) throw new Error(`initialized: ${initialized.status}`);

  let nextId = 1;
  return {
    sessionId,
    headers,
    /** Calls a tool and reads its POST stream to the end. */
    call: async (name: string, args: Record<string, unknown>, meta?: Record<string, unknown>) => {
      const res = await post(headers, {
        jsonrpc: '2.0',
        id: nextId++,
        method: 'tools/call',
        params: { name, arguments: args, ...(meta && { _meta: meta }) },
      });
      const all: SseEvent[] = [];
      for await (const e of sseEvents(res.body as ReadableStream<Uint8Array>)) all.push(e);
      return all;
    },
    get: (lastEventId?: string, signal?: AbortSignal) =>
      fetch(url, {
        headers: { ...headers, accept: 'text/event-stream', ...(lastEventId && { 'last-event-id': lastEventId }) },
        signal: signal ?? null,
      }),
  };
}

/** An SDK client, plus a promise for its standalone GET stream being attached on the replica. */
async function sdkClient(t: Test, url: string) {
  let getAttached!: () => void;
  const getStream = new Promise<void>((resolve) => (getAttached = resolve));
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: async (input, init) => {
      const res = await fetch(input, init);
      // The replica registers the GET stream before answering, so headers mean "attached".
      if (init?.method === 'GET' && res.ok) getAttached();
      return res;
    },
  });
  const client = new Client({ name: 'replica-test', version: '0' });
  await client.connect(transport);
  t.teardown(() => client.close());
  return { client, transport, getStream };
}

const textOf = (result: unknown): string => (result as { content: { text: string }[] }).content[0]?.text ?? '';

async function replica(t: Test, opts: Partial<Parameters<typeof startReplica>[0]> = {}): Promise<Replica> {
  const r = await startReplica({ id: 'demo-1', ...opts });
  t.teardown(() => r.close());
  return r;
}

t.test('tools: whoami, echo, counter and counter_value', async (t) => {
  const r = await replica(t);
  const { client } = await sdkClient(t, r.url);

  const tools = await client.listTools();
  t.same(tools.tools.map((tool) => tool.name).sort(), ['counter', 'counter_value', 'echo', 'emit', 'progress', 'request_headers', 'whoami']);

  const who = await client.callTool({ name: 'whoami', arguments: {} });
  t.equal(textOf(who), 'demo-1');
  t.same(who.structuredContent, { replica: 'demo-1' });

  t.equal(textOf(await client.callTool({ name: 'echo', arguments: { text: 'héllo' } })), 'héllo');

  t.equal(textOf(await client.callTool({ name: 'counter', arguments: {} })), '1');
  t.equal(textOf(await client.callTool({ name: 'counter', arguments: {} })), '2');
  t.equal(textOf(await client.callTool({ name: 'counter_value', arguments: {} })), '2');
  t.equal(textOf(await client.callTool({ name: 'counter_value', arguments: {} })), '2', 'reading does not count');

  const bad = await client.callTool({ name: 'progress', arguments: { steps: 'many', intervalMs: 1 } });
  t.equal(bad.isError, true, 'arguments are validated');
});

t.test('progress notifications reach onprogress; a cancelled call stops', async (t) => {
  const r = await replica(t);
  const { client } = await sdkClient(t, r.url);

  const seen: number[] = [];
  const result = await client.callTool({ name: 'progress', arguments: { steps: 3, intervalMs: 1 } }, undefined, {
    onprogress: (p) => seen.push(p.progress),
  });
  t.equal(textOf(result), 'done after 3 steps');
  t.same(seen, [1, 2, 3]);

  const abort = new AbortController();
  const cancelled = client.callTool({ name: 'progress', arguments: { steps: 10_000, intervalMs: 5 } }, undefined, {
    signal: abort.signal,
    onprogress: () => abort.abort(),
  });
  await t.rejects(cancelled, 'the cancelled call fails instead of running 50 s');
  t.equal(textOf(await client.callTool({ name: 'echo', arguments: { text: 'still here' } })), 'still here');

  t.same(r.toolCalls()['progress'], { started: 2, finished: 1 }, 'each run counted once when it starts, once when it answers');
  t.same(r.toolCalls()['echo'], { started: 1, finished: 1 });
  t.same(r.toolCalls()['whoami'], { started: 0, finished: 0 }, 'every tool is listed, called or not');
  const health = (await (await fetch(new URL('/healthz', r.url))).json()) as { toolCalls: unknown };
  t.same(health.toolCalls, r.toolCalls(), '/healthz says the same');
});

t.test('emit reaches the notification handler from the GET stream and from the request stream', async (t) => {
  const r = await replica(t);
  const { client, getStream } = await sdkClient(t, r.url);
  const received: unknown[] = [];
  let wanted = 0;
  let reached = () => {};
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
    received.push(n.params.data);
    if (received.length === wanted) reached();
  });
  const receive = (n: number) => {
    wanted = received.length + n;
    return new Promise<void>((resolve) => (reached = resolve));
  };

  // Events for a GET stream that is not attached yet are stored, not delivered: wait for it.
  await getStream;
  const onGet = receive(3);
  t.equal(textOf(await client.callTool({ name: 'emit', arguments: { count: 3, intervalMs: 1, stream: 'get' } })), 'emitted 3 on get stream');
  await onGet;
  t.same(received, [1, 2, 3].map((seq) => ({ seq, replica: 'demo-1' })));

  received.length = 0;
  await client.callTool({ name: 'emit', arguments: { count: 2, intervalMs: 0, stream: 'request' } });
  t.same(received, [1, 2].map((seq) => ({ seq, replica: 'demo-1' })), 'on the request stream, all arrive before the result');
});

t.test('sessions: DELETE ends one, unknown ones get 404, a missing one 400', async (t) => {
  const r = await replica(t);
  const { transport } = await sdkClient(t, r.url);
  const sessionId = transport.sessionId as string;
  t.equal(r.sessions(), 1);

  const health = await fetch(new URL('/healthz', r.url));
  t.match(await health.json(), { replica: 'demo-1', sessions: 1, getStreams: Number }, 'sessions held and GET streams open');

  await transport.terminateSession();
  t.equal(r.sessions(), 0);
  const after = await fetch(r.url, {
    method: 'POST',
    headers: {
      'mcp-session-id': sessionId,
      accept: 'application/json, text/event-stream',
      'content-type': 'application/json',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
  });
  t.equal(after.status, 404);
  t.same(await after.json(), { jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null });

  const noSession = await fetch(r.url, {
    method: 'POST',
    headers: { accept: 'application/json, text/event-stream', 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  });
  t.equal(noSession.status, 400);
  await noSession.text();
  const getNoSession = await fetch(r.url, { headers: { accept: 'text/event-stream' } });
  t.equal(getNoSession.status, 400);
  await getNoSession.text();
  t.equal(r.sessions(), 0, 'a failed non-initialize POST leaves no session behind');
});

t.test('the GET stream resumes exactly after Last-Event-ID, and not at all after a trim', async (t) => {
  const r = await replica(t);
  const s = await rawSession(r.url);
  const aborts = new AbortController();
  t.teardown(() => aborts.abort());

  const first = await s.get(undefined, aborts.signal);
  t.equal(first.status, 200);
  const firstEvents = sseEvents(first.body as ReadableStream<Uint8Array>);
  await s.call('emit', { count: 5, intervalMs: 0, stream: 'get' });
  const live = await take(firstEvents, 5);
  t.same(live.map(seqOf), [1, 2, 3, 4, 5]);
  const ids = live.map((e) => e.id as string);
  t.equal(new Set(ids).size, 5, 'every event carries its own id');

  const resumed = await s.get(ids[1], aborts.signal);
  t.equal(resumed.status, 200);
  const resumedEvents = sseEvents(resumed.body as ReadableStream<Uint8Array>);
  const replayed = await take(resumedEvents, 3);
  t.same(replayed.map((e) => e.id), ids.slice(2), 'exactly the later events, same ids, in order');
  t.same(replayed.map(seqOf), [3, 4, 5]);
  t.equal((await firstEvents.next()).done, true, 'the resume took the stream over and ended the old one');

  await s.call('emit', { count: 1, intervalMs: 0, stream: 'get' });
  const [next] = await take(resumedEvents, 1);
  t.equal(next && seqOf(next), 1, 'the resumed stream goes on live');
  t.notOk(ids.includes(next?.id as string));

  const trim = await fetch(new URL('/_demo/trim?keep=0', r.url), { method: 'POST' });
  t.same(await trim.json(), { size: 0 });
  const afterTrim = await s.get(ids[1]);
  t.equal(afterTrim.status, 500, 'a trimmed id is refused, not answered with a partial or empty stream');
  t.match(await afterTrim.json(), { error: { code: -32000, message: 'Error replaying events' } });

  const never = await s.get('never-issued');
  t.equal(never.status, 500);
  await never.text();
});

t.test("a POST stream resumes from its priming event; another session's id is refused", async (t) => {
  const r = await replica(t);
  const s = await rawSession(r.url);
  const original = await s.call('progress', { steps: 2, intervalMs: 0 }, { progressToken: 'p' });
  const [priming, ...rest] = original;
  t.equal(priming?.data, '', 'the SDK primes POST streams with an id and empty data');
  t.same(rest.map((e) => (JSON.parse(e.data) as { method?: string }).method ?? 'result'), [
    'notifications/progress',
    'notifications/progress',
    'result',
  ]);

  const aborts = new AbortController();
  t.teardown(() => aborts.abort());
  const resumed = await s.get(priming?.id, aborts.signal);
  t.equal(resumed.status, 200);
  const replayed = await take(sseEvents(resumed.body as ReadableStream<Uint8Array>), 3);
  t.same(replayed, rest, 'the same events, ids and bytes, response included');

  const other = await rawSession(r.url);
  const foreign = await other.get(priming?.id);
  t.equal(foreign.status, 500, 'sessions share the log but not each other streams');
  await foreign.text();
});

t.test('without an event store: no ids, no priming event, nothing replayed, 409 to a second GET', async (t) => {
  const r = await replica(t, { eventStore: false });
  t.equal(r.events, undefined);
  const s = await rawSession(r.url);

  const events = await s.call('progress', { steps: 2, intervalMs: 0 }, { progressToken: 'p' });
  t.same(events.map((e) => (JSON.parse(e.data) as { method?: string }).method ?? 'result'), [
    'notifications/progress',
    'notifications/progress',
    'result',
  ], 'no priming event on the POST stream');
  t.same(events.filter((e) => e.id !== undefined), [], 'no event carries an id');

  const aborts = new AbortController();
  t.teardown(() => aborts.abort());
  const first = await s.get(undefined, aborts.signal);
  t.equal(first.status, 200);
  const live = sseEvents(first.body as ReadableStream<Uint8Array>);
  await s.call('emit', { count: 2, intervalMs: 0, stream: 'get' });
  const onGet = await take(live, 2);
  t.same(onGet.map(seqOf), [1, 2]);
  t.same(onGet.map((e) => e.id), [undefined, undefined], 'nor on the GET stream');

  const second = await s.get('any-id');
  t.equal(second.status, 409, 'a second GET, Last-Event-ID or not, is refused while the first is open');
  await second.text();

  const trim = await fetch(new URL('/_demo/trim?keep=0', r.url), { method: 'POST' });
  t.equal(trim.status, 409);
  t.same(await trim.json(), { error: 'this replica keeps no event log (--no-event-store)' });
  t.match(await (await fetch(new URL('/healthz', r.url))).json(), { eventStore: false });

  await t.rejects(startReplica({ id: 'x', eventStore: false, maxEvents: 5 }), RangeError, 'a bound for a log it does not keep is refused');
});

t.test('JSON response mode answers POSTs with JSON', async (t) => {
  const r = await replica(t, { id: 'json-1', enableJsonResponse: true });
  const { client } = await sdkClient(t, r.url);
  t.equal(textOf(await client.callTool({ name: 'whoami', arguments: {} })), 'json-1');
  const res = await fetch(r.url, {
    method: 'POST',
    headers: { accept: 'application/json, text/event-stream', 'content-type': 'application/json' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: { protocolVersion: LATEST_PROTOCOL_VERSION, capabilities: {}, clientInfo: { name: 'raw', version: '0' } },
    }),
  });
  t.match(res.headers.get('content-type'), /^application\/json/);
  t.match(await res.json(), { result: { serverInfo: { name: 'mcp-resume-gateway-demo' } } });
});

t.test('demo endpoints reject bad input', async (t) => {
  const r = await replica(t);
  const bad = await fetch(new URL('/_demo/trim?keep=-1', r.url), { method: 'POST' });
  t.equal(bad.status, 400);
  await bad.text();
  const missing = await fetch(new URL('/nope', r.url));
  t.equal(missing.status, 404);
  await missing.text();
});

t.test('as a child process: listening line, SIGTERM exits 0, restart on the same port forgets sessions', async (t) => {
  const [child, sibling] = (await spawnReplicas(t, 2, { idPrefix: 'c' })) as [ReplicaProcess, ReplicaProcess];
  t.match(child.url, new RegExp(`^http://127\\.0\\.0\\.1:${child.port}/mcp$`));
  t.not(sibling.port, child.port);
  const first = await sdkClient(t, child.url);
  t.equal(textOf(await first.client.callTool({ name: 'whoami', arguments: {} })), 'c1');
  const oldSession = first.transport.sessionId as string;
  const oldPid = child.pid;

  await child.kill('SIGTERM');
  t.same(child.exit, { code: 0, signal: null });

  await child.restart();
  t.not(child.pid, oldPid);
  const again = await sdkClient(t, child.url);
  t.equal(textOf(await again.client.callTool({ name: 'counter', arguments: {} })), '1', 'a fresh process');
  const stale = await fetch(child.url, {
    method: 'POST',
    headers: { 'mcp-session-id': oldSession, accept: 'application/json, text/event-stream', 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  });
  t.equal(stale.status, 404);
  await stale.text();

  await child.kill();
  t.same(child.exit, { code: null, signal: 'SIGKILL' });
  const siblingClient = await sdkClient(t, sibling.url);
  t.equal(textOf(await siblingClient.client.callTool({ name: 'whoami', arguments: {} })), 'c2', 'the sibling lives on');
});

/** The program as the image, compose and `npm run demo` run it: the demo package's build. */
const REPLICA_PROGRAM = fileURLToPath(new URL('../../../demo/dist/replica.js', import.meta.url));

/** Runs the replica program with `args` to its end: exit code and both outputs. */
async function runReplicaProgram(t: Test, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = spawnProcess(process.execPath, [REPLICA_PROGRAM, ...args], { stdio: ['ignore', 'pipe', 'pipe'], t });
  let stdout = '';
  proc.child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  const { code } = await proc.exited;
  return { code, stdout, stderr: proc.stderrTail() };
}

t.test('the command line: --help lists every option and exits 0; a missing --id points to it', async (t) => {
  for (const flag of ['--help', '-h']) {
    const r = await runReplicaProgram(t, [flag]);
    t.equal(r.code, 0, `${flag}: exit 0`);
    t.match(r.stdout, /^usage: node demo\/dist\/replica\.js --id ID/, `${flag}: usage on stdout`);
    for (const option of ['--id ID', '--host HOST', '--port N', '--max-events N', '--no-event-store', '-h, --help']) t.match(r.stdout, option, `${flag} lists ${option}`);
    t.equal(r.stderr, '', `${flag}: nothing on stderr`);
  }
  const missing = await runReplicaProgram(t, ['--port', '0']);
  t.equal(missing.code, 1, 'no --id: exit 1');
  t.equal(missing.stdout, '', 'no --id: no listening line');
  t.equal(missing.stderr, 'replica: --id is required (--help lists the options)\n');
  const both = await runReplicaProgram(t, ['--id', 'x', '--no-event-store', '--max-events', '5']);
  t.equal(both.code, 1, '--max-events with --no-event-store: exit 1');
  t.equal(both.stderr, 'replica: --max-events bounds the event log that --no-event-store turns off: give one of them\n');
});

t.test('as a child process with --no-event-store: it says so, and keeps no log', async (t) => {
  const child = await spawnReplica(t, { id: 'n1', eventStore: false });
  const health = (await (await fetch(new URL('/healthz', child.url))).json()) as { eventStore: boolean };
  t.equal(health.eventStore, false);
  const s = await rawSession(child.url);
  const events = await s.call('echo', { text: 'x' });
  t.same(events.map((e) => e.id), [undefined], 'the answer carries no id');
});

t.test("the demo's dependencies are its own: the gateway's runtime set holds neither the SDK nor zod", async (t) => {
  const manifest = (path: string) => JSON.parse(readFileSync(fileURLToPath(new URL(`../../../${path}`, import.meta.url)), 'utf8')) as Record<string, Record<string, string> | undefined>;
  const root = manifest('package.json');
  const demo = manifest('demo/package.json');
  for (const name of ['@modelcontextprotocol/sdk', 'zod']) {
    t.notOk(root['dependencies']?.[name], `${name} is not a dependency of the gateway`);
    t.ok(demo['dependencies']?.[name], `${name} is a dependency of the demo package`);
    t.equal(root['devDependencies']?.[name], demo['dependencies']?.[name], `the tests run the demo on the ${name} range it declares`);
  }
});
