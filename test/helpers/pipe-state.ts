/**
 * A pipe's shared state (src/streams/pipe-types.ts) on a real chain of loopback sockets, for the
 * tests of one part of the pipe at a time: the state as pipe.ts makes it, with a real channel and
 * a real rewriter, and nothing of the other parts running.
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { pipeState as newPipeState, type PipeState, type SsePipeOptions, type VerifyFailure } from '../../src/streams/pipe-types.js';
import { CursorCodec } from '../../src/cursor/codec.js';
import { SseRewriter } from '../../src/sse/rewriter.js';
import { startChain, type Chain } from './stream-chain.js';
import type { Teardown } from './processes.js';

export interface StateRun {
  state: PipeState;
  /** Counts passed to onEvents, in order. */
  events: number[];
  /** Why verification failed, each time onFailed was called. */
  failures: VerifyFailure[];
}

export const RETRY_HINT_MS = 4321;
/** The codec of testRewriter's cursors, session 's1'. */
export const testCodec = new CursorCodec('a-test-secret-of-at-least-32-bytes!!');

export const TEST_INCARNATION = 'AAAAAAAAAAAAAAAA';

/**
 * A rewriter as the gateway makes one: `awaiting`, a POST stream's request ids; `verify`, a
 * continuation, whose replica must first replay these ids; `prime`, a stream that begins with a
 * priming event (J1), journaled unless `journal` is false. Only those mint cursors here.
 */
export function testRewriter(options: {
  awaiting?: (string | number)[] | undefined;
  verify?: string[] | undefined;
  prime?: boolean | undefined;
  journal?: boolean | undefined;
  maxEventBytes: number;
}): SseRewriter {
  return new SseRewriter({
    cursors:
      options.verify || options.prime
        ? { codec: testCodec, sessionId: 's1', incarnation: TEST_INCARNATION, sink: { record: async () => 'ok' }, journal: options.prime === true && options.journal !== false }
        : undefined,
    prime: options.prime === true,
    head: options.verify?.length ?? 0,
    ...(options.verify ? { verify: { expected: options.verify, fromSeq: 0 } } : {}),
    maxEventBytes: options.maxEventBytes,
    trackResponses: options.awaiting !== undefined,
    ...(options.awaiting ? { awaiting: options.awaiting } : {}),
  });
}

/** The options every pipe of these tests shares: start() sets a head the client can tell, and each onEvents count is kept. */
export function startedPipe(body: Readable, res: ServerResponse, rewriter: SseRewriter, events: number[], retryHintMs: number) {
  return {
    body,
    res,
    rewriter,
    // As the owner's replay does after the journal's events: a response begun already goes on.
    start: () => {
      if (!res.headersSent) res.writeHead(200, { 'content-type': 'text/event-stream', 'x-started': 'yes' });
    },
    onEvents: (count: number) => events.push(count),
    retryHintMs,
  };
}

/**
 * A state on a chain whose replica answers with an SSE head. `awaiting`: a POST stream's request
 * ids; `verify`: a continuation, whose replica must first replay these ids.
 */
export async function pipeState(t: Teardown, options: { awaiting?: (string | number)[]; verify?: string[]; prime?: boolean; journal?: boolean } = {}): Promise<Chain<StateRun>> {
  return startChain(
    t,
    (res) => res.writeHead(200, { 'content-type': 'text/event-stream' }),
    (body: Readable, res: ServerResponse): StateRun => {
      const events: number[] = [];
      const failures: VerifyFailure[] = [];
      const rewriter = testRewriter({ ...options, maxEventBytes: 64 * 1024 });
      const pipeOptions: SsePipeOptions = {
        ...startedPipe(body, res, rewriter, events, RETRY_HINT_MS),
        verify: { timeoutMs: 60_000, maxBytes: 1024, onFailed: (why) => failures.push(why) },
      };
      const state = newPipeState(pipeOptions);
      return { state, events, failures };
    },
  );
}
