/**
 * A journal continuation waits for one store round trip, not two: the journal after the cursor is
 * read beside the decision's read of the session and incarnation (resume.ts, prefetchJournal), so
 * that a storm of reconnections, each a decision on a busy instance, holds each client one round
 * trip less. Two gateways share one memory store; the second's store answers its decision's read
 * only once the journal read has begun (or, without the prefetch, after a bound, late).
 */
import t from 'tap';
import { createLogger } from '../../src/logger.js';
import { createStore } from '../../src/store/index.js';
import type { Store } from '../../src/store/types.js';
import { startGateway, testConfig } from '../helpers/gateway.js';
import { PROTOCOL_VERSION, post, rawSession, toolCallBody } from '../helpers/http.js';
import { bodyUntilResult, idsOf } from '../helpers/raw-sse.js';
import { spawnReplicas } from '../helpers/replicas.js';

/** How long the decision's read is held for a journal read that would come only after it: a bound on failure. */
const HOLD_BOUND_MS = 2_000;

/** The data of an SSE body's events that carry any (a priming event carries none). */
const dataOf = (body: string): string[] => [...body.matchAll(/^data:(.*)$/gm)].map((m) => m[1]!.trim()).filter((d) => d !== '');

/** `store`, with its touchAndRead answered only once a readJournal began, and the order of both logged. */
function gated(store: Store): { store: Store; order: string[] } {
  const order: string[] = [];
  let begun!: () => void;
  const journalRead = new Promise<void>((resolve) => (begun = resolve));
  const wrapped = new Proxy(store, {
    get(target, prop) {
      const value: unknown = Reflect.get(target, prop, target);
      if (typeof value !== 'function') return value;
      const call = (...args: unknown[]) => (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
      if (prop === 'readJournal') {
        return (...args: unknown[]) => {
          order.push('readJournal');
          begun();
          return call(...args);
        };
      }
      if (prop === 'touchAndRead') {
        return async (...args: unknown[]) => {
          const read = await call(...args);
          let timer: NodeJS.Timeout | undefined;
          await Promise.race([journalRead, new Promise<void>((resolve) => (timer = setTimeout(resolve, HOLD_BOUND_MS)))]);
          clearTimeout(timer);
          order.push('touchAndRead answered');
          return read;
        };
      }
      return call;
    },
  });
  return { store: wrapped, order };
}

t.test("a journal continuation's journal read begins before the decision's own read is answered", async (t) => {
  const [replica] = await spawnReplicas(t, 1);
  const settings = { replicas: [{ id: replica!.id, url: replica!.url }], resumption: { journal: { enabled: true } } };
  const store = createStore(testConfig(settings).store, createLogger('silent'));
  t.teardown(() => store.close());
  const a = await startGateway(t, settings, store);
  const onB = gated(store);
  const b = await startGateway(t, settings, onB.store);

  const sessionId = await rawSession(a.url);
  const call = await post(a.url, toolCallBody('emit', { count: 3, intervalMs: 1, stream: 'request' }), { 'mcp-session-id': sessionId });
  t.equal(call.status, 200);
  const body = await call.text();
  const cursors = idsOf(body);
  t.ok(cursors.length >= 4, `the call's stream carried its priming cursor and its events' (${cursors.length})`);

  const resumed = await fetch(b.url, {
    headers: { accept: 'text/event-stream', 'mcp-session-id': sessionId, 'mcp-protocol-version': PROTOCOL_VERSION, 'last-event-id': cursors[1]! },
  });
  t.equal(resumed.status, 200);
  t.equal(resumed.headers.get('mcp-resumption'), 'continued', 'continued');
  const replayed = await bodyUntilResult(resumed);
  t.same(dataOf(replayed), dataOf(body).slice(1), 'from the journal: every event after the cursor, once, to the result');
  // Once every event went, what follows is decided again on the same response (its own read).
  t.same(onB.order.slice(0, 2), ['readJournal', 'touchAndRead answered'], 'the journal read began before the decision had its facts');
});
