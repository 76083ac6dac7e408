/**
 * SSE streams through the gateway: each is an incarnation in the store (E4, E5), owned by the
 * replica that produced it, its events numbered with cursors by the rewriter, its session kept
 * alive while it is open, and registered so that shutdown can end it.
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { Config } from '../config/schema.js';
import { newIncarnationId } from '../cursor/codec.js';
import type { CursorKeys } from '../cursor/keys.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import type { OpenStreams } from './open.js';
import { pipeSse, type PipeEnd, type SsePipeOptions } from './pipe.js';
import { SseRewriter, type CursorTarget } from '../sse/rewriter.js';
import type { EventBatch, IncarnationKind, JsonRpcId, Store } from '../store/types.js';
import type { UnrecordedRecords } from './unrecorded.js';

export interface StreamDeps {
  config: () => Config;
  store: Store;
  keys: CursorKeys;
  metrics: Metrics;
  logger: Logger;
  openStreams: OpenStreams;
  unrecorded: UnrecordedRecords;
}

/** An incarnation this gateway writes to: which one, and as which attachment. */
export interface Attachment {
  readonly sessionId: string;
  readonly incarnation: string;
  readonly owner: string;
  readonly attach: number;
  /** Not recorded yet: the first batch of records creates the incarnation (see lazyIncarnation). */
  readonly create?: EventBatch['create'];
}

export interface PipeRequest {
  readonly body: Readable;
  readonly res: ServerResponse;
  readonly replica: string;
  readonly start: () => void;
  readonly verify?: SsePipeOptions['verify'];
}

export class SseStreams {
  constructor(private readonly deps: StreamDeps) {}

  /**
   * Records a new incarnation of the session, before any of its events leaves (E5). A GET
   * supersedes the session's earlier GET incarnations (E4). Rejects with a StoreError.
   */
  async openIncarnation(sessionId: string, owner: string, kind: IncarnationKind, options: { supersede: boolean }): Promise<Attachment> {
    const incarnation = newIncarnationId();
    const { idleTtlMs } = this.deps.config().sessions;
    await this.deps.store.openIncarnation({ id: incarnation, sessionId, owner, kind, pending: [], supersede: options.supersede }, idleTtlMs);
    return { sessionId, incarnation, owner, attach: 1 };
  }

  /**
   * A POST stream's incarnation, recorded by its first batch of events rather than before the
   * stream starts: one store round trip less per POST answered with SSE. Nothing else needs it
   * earlier: a POST stream supersedes nothing, and a client can only resume it with a cursor,
   * which it receives after the record (E5). A stream that never sends an event with an id is
   * never recorded at all.
   */
  lazyIncarnation(sessionId: string, owner: string, pending: readonly JsonRpcId[]): Attachment {
    return { sessionId, incarnation: newIncarnationId(), owner, attach: 1, create: { owner, kind: 'post', pending } };
  }

  /**
   * The cursors of an attachment: numbered by the codec, recorded in the store before their events
   * leave (E5) while it answers, and recorded late when it does not (§7, see unrecorded.ts).
   */
  async cursors(attachment: Attachment): Promise<CursorTarget> {
    const codec = await this.deps.keys.codec();
    const records = this.deps.unrecorded.stream(attachment);
    return {
      codec,
      sessionId: attachment.sessionId,
      incarnation: attachment.incarnation,
      sink: {
        record: (fromSeq, upstreamIds, responded) => records.record(fromSeq, upstreamIds, responded, this.deps.config().resumption.recordRetryMs),
      },
    };
  }

  /** `calls`: on a POST stream (or its continuation), the requests whose responses it carries. */
  rewriter(cursors: CursorTarget | undefined, head: number, options: { calls?: readonly JsonRpcId[]; verify?: { expected: readonly string[]; fromSeq: number } }): SseRewriter {
    return new SseRewriter({
      cursors,
      head,
      maxEventBytes: this.deps.config().limits.sseEventBytes,
      trackResponses: options.calls !== undefined,
      ...(options.calls ? { awaiting: options.calls } : {}),
      ...(options.verify ? { verify: options.verify } : {}),
    });
  }

  /** Pipes a replica's SSE body through `rewriter` to the client; resolves when it ends. */
  pipe(request: PipeRequest, rewriter: SseRewriter, attachment: Attachment | undefined): Promise<PipeEnd> {
    const { metrics, openStreams } = this.deps;
    const events = metrics.sseEvents.labels({ replica: request.replica });
    const streamOpen = metrics.sseStreamsOpen.labels({ replica: request.replica });
    let counted = false;
    const stream = pipeSse({
      body: request.body,
      res: request.res,
      rewriter,
      retryHintMs: this.deps.config().shutdown.retryHintMs,
      start: () => {
        counted = true;
        streamOpen.inc();
        request.start();
      },
      onEvents: (n) => events.inc(n),
      ...(request.verify ? { verify: request.verify } : {}),
    });
    openStreams.add(stream, request.replica);
    const keepAlive = attachment ? this.#keepAlive(attachment) : undefined;
    return stream.done.then((how) => {
      if (counted) streamOpen.dec();
      clearInterval(keepAlive);
      if (how === 'stale' || how === 'missing' || how === 'store_failed' || how === 'event_too_large') {
        this.deps.logger.warn({ replica: request.replica, why: how }, 'SSE stream ended early: the client will reconnect');
      }
      return how;
    });
  }

  /** An open stream is activity: its session and incarnation must not expire under it. */
  #keepAlive(attachment: Attachment): NodeJS.Timeout {
    const { store } = this.deps;
    const ttl = this.deps.config().sessions.idleTtlMs;
    const timer = setInterval(
      () => {
        // Failures are counted by the store metrics and retried at the next tick.
        store.touchSession(attachment.sessionId, ttl).catch(() => undefined);
        store.touchIncarnation(attachment.sessionId, attachment.incarnation, ttl).catch(() => undefined);
      },
      Math.max(1000, Math.floor(ttl / 3)),
    );
    timer.unref();
    return timer;
  }
}
