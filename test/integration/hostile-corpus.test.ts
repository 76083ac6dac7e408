/**
 * The hostile corpus (hostile-corpus.ts) on raw sockets, through a gateway process and directly to
 * its SDK replica. For every case: no 5xx from the gateway unless the replica answered one, the
 * gateway still runs and serves the next request on another connection, the replica is not
 * suspected, and no header named in Connection (nor any hop-by-hop header) reaches the replica.
 */
import t from 'tap';
import { setTimeout as delay } from 'node:timers/promises';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { rawSession, toolCallBody, PROTOCOL_VERSION } from '../helpers/http.js';
import { openSocket, parseResponses, type RawAnswer } from '../helpers/raw-socket.js';
import { spawnReplica } from '../helpers/replicas.js';
import { scrapeMetric } from '../helpers/scrape.js';
import { CORPUS, type HostileCase } from './hostile-corpus.js';

/** Short, so that the case that stops sending its headers is closed soon. */
const HEADERS_TIMEOUT_MS = 1000;
/** How long a client waits, once it sent everything, for answers that do not come. */
const GIVE_UP_MS = 1500;

/** Headers the gateway writes itself on every forwarded request, whatever the client named. */
const WRITTEN_BY_THE_GATEWAY = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto']);
const CONNECTION_OPTIONS = new Set(['', 'close', 'keep-alive']);

interface Played extends RawAnswer {
  closedByPeer: boolean;
}

/** Plays `c` on a new connection to `url`, with `session` for `{session}`. */
async function play(url: string, c: HostileCase, session: string): Promise<Played> {
  const socket = await openSocket(url);
  const chunks: Buffer[] = [];
  const text = (): string => Buffer.concat(chunks).toString('latin1');
  const wanted = c.responses ?? 1;
  let closedByPeer = false;
  const answered = new Promise<void>((resolve) => {
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      if (parseResponses(text(), false).responses.filter((r) => r.complete).length >= wanted) resolve();
    });
    socket.on('error', () => undefined);
    socket.once('close', () => {
      closedByPeer = true;
      resolve();
    });
  });
  for (const step of c.send) {
    if (closedByPeer) break;
    if (typeof step === 'string') socket.write(Buffer.from(step.replaceAll('{session}', session), 'latin1'));
    else if ('pauseMs' in step) await delay(step.pauseMs);
    else socket.end();
  }
  // The client gives up on answers that do not come: not a wait for something to happen.
  const givingUp = new AbortController();
  await Promise.race([answered, delay(c.giveUpMs ?? GIVE_UP_MS, undefined, { signal: givingUp.signal }).catch(() => undefined)]);
  givingUp.abort();
  const peerClosed = closedByPeer;
  socket.destroy();
  return { ...parseResponses(text(), peerClosed), closedByPeer: peerClosed };
}

/** The names a case's requests list in Connection, less its options. */
function namedInConnection(c: HostileCase): string[] {
  const bytes = c.send.filter((s): s is string => typeof s === 'string').join('');
  const names = [...bytes.matchAll(/^connection:([^\r\n]*)/gim)].flatMap((m) => m[1]!.split(',').map((n) => n.trim().toLowerCase()));
  return [...new Set(names)].filter((n) => !CONNECTION_OPTIONS.has(n));
}

/** Whether the replica's answer to request_headers lists `name` (as JSON, or JSON inside a text content). */
function recorded(answer: RawAnswer, name: string): boolean {
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return answer.responses.some((r) => new RegExp(`\\\\?"${escaped}\\\\?":`, 'i').test(r.body));
}

const statuses = (answer: RawAnswer): number[] => answer.responses.map((r) => r.status);

const NEXT: HostileCase = {
  name: 'the next request',
  send: [
    `POST /mcp HTTP/1.1\r\nHost: corpus.test\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n` +
      `MCP-Protocol-Version: ${PROTOCOL_VERSION}\r\nMcp-Session-Id: {session}\r\nConnection: close\r\nContent-Length: ${toolCallBody('whoami').length}\r\n\r\n${toolCallBody('whoami')}`,
  ],
};

t.test('the hostile corpus, through the gateway and directly', async (t) => {
  const replica = await spawnReplica(t, { id: 'r1' });
  const gateway = await startGatewayProcess(t, {
    replicas: [{ id: replica.id, url: replica.url }],
    limits: { headersTimeoutMs: HEADERS_TIMEOUT_MS },
    log: { level: 'info' },
  });
  const sessions = { gateway: await rawSession(gateway.url), replica: await rawSession(replica.url) };
  let cases = 0;

  for (const { family, cases: familyCases } of CORPUS) {
    for (const c of familyCases) {
      cases++;
      const [through, direct] = await Promise.all([play(gateway.url, c, sessions.gateway), play(replica.url, c, sessions.replica)]);
      const what = `${family}: ${c.name}`;
      t.comment(`${what}: gateway ${statuses(through).join(',') || 'none'}, replica ${statuses(direct).join(',') || 'none'}`);

      const gateway5xx = statuses(through).filter((s) => s >= 500);
      if (gateway5xx.length > 0) t.ok(statuses(direct).some((s) => s >= 500), `${what}: the gateway's ${gateway5xx.join(',')} only where the replica answered a 5xx`);

      const named = namedInConnection(c).filter((n) => !WRITTEN_BY_THE_GATEWAY.has(n));
      for (const name of [...named, ...(c.notForwarded ?? [])]) t.notOk(recorded(through, name), `${what}: ${name} does not reach the replica`);
      for (const name of named.filter((n) => n.startsWith('x-'))) {
        if (statuses(direct).includes(200)) t.ok(recorded(direct, name), `${what}: directly, the replica does receive ${name}`);
      }
      for (const value of c.absent ?? []) {
        t.notOk(through.responses.some((r) => r.body.includes(value)), `${what}: ${value} does not reach the replica`);
        if (statuses(direct).includes(200)) t.ok(direct.responses.some((r) => r.body.includes(value)), `${what}: directly, the replica does receive ${value}`);
      }
      for (const name of c.forwarded ?? []) {
        t.equal(statuses(through)[0], 200, `${what}: the call is answered`);
        t.ok(recorded(through, name), `${what}: ${name} reaches the replica`);
      }

      const next = await play(gateway.url, NEXT, sessions.gateway);
      t.equal(gateway.exit, undefined, `${what}: the gateway still runs`);
      t.same(statuses(next), [200], `${what}: the next request, on another connection, is served by the session's replica`);
    }
  }

  t.equal(
    gateway.logs.filter((l) => l['msg'] === 'replica health changed').length,
    0,
    'no case changed the replica health (a suspect owner would have answered the next requests 503)',
  );
  t.equal(await scrapeMetric(gateway.adminUrl, 'mcp_gateway_replica_up', { replica: replica.id }), 1, 'replica_up is 1');
  const ready = await fetch(`${gateway.adminUrl}/readyz`);
  t.equal(ready.status, 200, '/readyz says ready');
  await ready.text();
  t.ok(cases >= 100, `${cases} cases`);
});
