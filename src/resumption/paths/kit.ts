/**
 * What the paths of a resumption are given: the kit, the proxy's services that the resumption
 * uses (each path names the few it takes, as a Pick of it), and the exchange, the one request
 * being resumed and how to carry a decision made again out on it.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AnswerOptions } from '../../answers.js';
import type { Config, ReplicaConfig } from '../../config/schema.js';
import type { CursorKeys } from '../../cursor/keys.js';
import type { DecodeResult } from '../../cursor/codec.js';
import type { AnswerCode } from '../../errors.js';
import type { Fleet } from '../../fleet/index.js';
import type { Logger } from '../../logger.js';
import type { Metrics } from '../../metrics.js';
import type { RequestLog } from '../../request-log.js';
import type { JournalRead, SessionRecord, Store } from '../../store/types.js';
import type { Pumps } from '../../streams/pumps.js';
import type { SseStreams } from '../../streams/sse-streams.js';
import type { Tracing } from '../../tracing/index.js';
import type { Principals } from '../../trust/principal.js';
import type { UpstreamAbort, UpstreamResponse } from '../../upstream/index.js';
import { decide, type Decision, type ResumptionFacts } from '../decide.js';

/** What the resumption needs from the proxy around it. */
export interface ResumeKit {
  config: () => Config;
  store: Store;
  fleet: Fleet;
  keys: CursorKeys;
  streams: SseStreams;
  pumps: Pumps;
  metrics: Metrics;
  logger: Logger;
  requests: RequestLog;
  /** Sends the client's request to `replica`, minus its Last-Event-ID, plus `extra` headers. */
  send(request: FastifyRequest, replica: ReplicaConfig, extra: Record<string, string>, signal: UpstreamAbort): Promise<UpstreamResponse>;
  /** One of the gateway's own answers (answers.ts), counted; also on a hijacked reply. */
  answer(request: FastifyRequest, reply: FastifyReply, code: AnswerCode, options?: Omit<AnswerOptions, 'retryAfterSeconds'>): unknown;
  loseSession(record: SessionRecord, why: string): void;
  /** Answers a request to `replica` that failed, as its fault says; `gone` for a refused connection. */
  sendFailed(request: FastifyRequest, reply: FastifyReply, replica: string, err: unknown, gone: () => unknown): Promise<void>;
  /** J6: who may be served a session from the gateway's own state. */
  principals: Principals;
  /** The facts of a resumption from `cursor`, gathered anew (facts.ts), with the store touched. */
  gather(cursor: DecodeResult, sessionId: string): Promise<ResumptionFacts>;
  /** The decision on the request's span, the wait for a record as a span of its own; unset: traces off. */
  tracing?: Pick<Tracing, 'decided' | 'span'> | undefined;
}

/** The request being resumed. */
export interface Exchange {
  readonly request: FastifyRequest;
  readonly reply: FastifyReply;
  readonly lastEventId: string;
  /** Carries a decision out on this request (resume.ts dispatches it to its path). */
  readonly settle: (facts: ResumptionFacts, decision: Decision) => unknown;
  /**
   * The journal after the cursor, read beside the decision's own store read (resume.ts), for the
   * journal continuation of that incarnation from that position; taken once (journal.ts).
   */
  prefetched?: JournalPrefetch | undefined;
}

/** A journal read made before the decision needed it: of `incarnation` after `seq`. */
export interface JournalPrefetch {
  readonly incarnation: string;
  readonly seq: number;
  readonly read: Promise<JournalRead | null>;
}

/** What was learnt goes back into the facts, and the decision is made again (decide.ts). */
export function decideAgain(ex: Exchange, facts: ResumptionFacts): unknown {
  return ex.settle(facts, decide(facts));
}

/** Ends a response that began (a continuation): the client reconnects from its last cursor, told when. */
export function endBegun(kit: Pick<ResumeKit, 'config' | 'requests'>, ex: Exchange, how: string): void {
  const res = ex.reply.raw;
  if (!res.destroyed && !res.writableEnded) res.end(`retry: ${kit.config().shutdown.retryHintMs}\n\n`);
  kit.requests.ended(ex.request, ex.reply, how);
}

/** The head of a stream the gateway answers from its own state. */
export function gatewayStreamHead(extra: Record<string, string>): Record<string, string> {
  return { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no', ...extra };
}
