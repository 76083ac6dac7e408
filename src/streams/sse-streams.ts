/**
 * SSE streams through the gateway: each is an incarnation in the store (E4, E5), owned by the
 * replica that produced it, its events numbered with cursors by the rewriter, its session kept
 * alive while it is open, and registered so that shutdown can end it.
 *
 * With the journal (CONTRACT.md §8), this instance is the stream's pump: every event is journaled,
 * each batch renews the pump's lease (an empty one between events), the stream is held when its
 * client goes away (J2) and registered in pumps.ts so that a client coming back attaches to it.
 */
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { Config } from '../config/schema.js';
import type { Fleet } from '../fleet/index.js';
import { newIncarnationId } from '../cursor/codec.js';
import type { CursorKeys } from '../cursor/keys.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics.js';
import type { OpenStreams } from './open.js';
import { pipeSse, type PipeEnd, type SsePipeOptions } from './pipe.js';
import type { Pump, Pumps } from './pumps.js';
import { SseRewriter, type CursorTarget, type Verify } from '../sse/rewriter.js';
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
  pumps: Pumps;
  fleet: Pick<Fleet, 'confirmAlive'>;
  /** This gateway instance, as a pump's lease names it. */
  instanceId: string;
}

/** An incarnation this gateway writes to: which one, and as which attachment. */
export interface Attachment {
  readonly sessionId: string;
  readonly incarnation: string;
  readonly owner: string;
  readonly attach: number;
  /** Not recorded yet: the first batch of records creates the incarnation (see lazyIncarnation). */
  readonly create?: EventBatch['create'];
  /** J1 to J3: journaled, pumped by this instance under this lease. */
  readonly pump?: EventBatch['pump'];
  readonly kind: IncarnationKind;
}

export interface PipeRequest {
  readonly body: Readable;
  readonly res: ServerResponse;
  readonly replica: string;
  readonly start: () => void;
  readonly verify?: SsePipeOptions['verify'];
}

/** The child metrics of one replica's streams. */
interface ReplicaMetrics {
  readonly events: ReturnType<Metrics['sseEvents']['labels']>;
  readonly open: ReturnType<Metrics['sseStreamsOpen']['labels']>;
}

export class SseStreams {
  /**
   * Looked up once per replica, not once per stream: each labels() call builds a child's bound
   * functions, which every open stream would otherwise keep (docs/performance.md, idle streams).
   */
  readonly #replicaMetrics = new Map<string, ReplicaMetrics>();
  readonly #streamLeaseLateness: ReturnType<Metrics['leaseRenewalLateness']['labels']>;

  constructor(private readonly deps: StreamDeps) {
    this.#streamLeaseLateness = deps.metrics.leaseRenewalLateness.labels({ lease: 'stream' });
  }

  #metricsOf(replica: string): ReplicaMetrics {
    let children = this.#replicaMetrics.get(replica);
    if (children === undefined) {
      const { metrics } = this.deps;
      children = { events: metrics.sseEvents.labels({ replica }), open: metrics.sseStreamsOpen.labels({ replica }) };
      this.#replicaMetrics.set(replica, children);
    }
    return children;
  }

  /**
   * Records a new incarnation of the session, before any of its events leaves (E5). A GET
   * supersedes the session's earlier GET incarnations (E4). Rejects with a StoreError.
   */
  async openIncarnation(sessionId: string, owner: string, kind: IncarnationKind, options: { supersede: boolean }): Promise<Attachment> {
    const incarnation = newIncarnationId();
    const { idleTtlMs } = this.deps.config().sessions;
    const attachment = this.attachment(sessionId, incarnation, owner, kind, 1);
    const { pump } = attachment;
    await this.deps.store.openIncarnation({ id: incarnation, sessionId, owner, kind, pending: [], supersede: options.supersede, ...(pump ? { pump } : {}) }, idleTtlMs);
    return attachment;
  }

  /** An incarnation written as attachment `attach`: journaled and pumped here when the journal is on. */
  attachment(sessionId: string, incarnation: string, owner: string, kind: IncarnationKind, attach: number): Attachment {
    const { enabled, leaseMs } = this.deps.config().resumption.journal;
    return { sessionId, incarnation, owner, kind, attach, ...(enabled ? { pump: { instanceId: this.deps.instanceId, leaseMs } } : {}) };
  }

  /**
   * A POST stream's incarnation, recorded by its first batch of events rather than before the
   * stream starts: one store round trip less per POST answered with SSE. Nothing else needs it
   * earlier: a POST stream supersedes nothing, and a client can only resume it with a cursor,
   * which it receives after the record (E5). A stream that never sends an event with a cursor is
   * never recorded at all.
   */
  lazyIncarnation(sessionId: string, owner: string, pending: readonly JsonRpcId[]): Attachment {
    return { ...this.attachment(sessionId, newIncarnationId(), owner, 'post', 1), create: { owner, kind: 'post', pending } };
  }

  /**
   * The cursors of an attachment: numbered by the codec, recorded in the store before their events
   * leave (E5) while it answers, and recorded late when it does not (§7, see unrecorded.ts).
   */
  async cursors(attachment: Attachment): Promise<CursorTarget> {
    const codec = await this.deps.keys.codec();
    const records = this.deps.unrecorded.stream(attachment);
    const { journalEvents, journalBytes } = this.deps.metrics;
    const { pump } = attachment;
    return {
      codec,
      sessionId: attachment.sessionId,
      incarnation: attachment.incarnation,
      journal: pump !== undefined,
      sink: {
        record: async (fromSeq, upstreamIds, responded, payloads) => {
          const result = await records.record(fromSeq, upstreamIds, responded, this.deps.config().resumption.recordRetryMs, payloads);
          if (result === 'ok' && payloads) {
            journalEvents.inc(payloads.length);
            journalBytes.inc(payloads.payloadBytes);
          }
          return result;
        },
        // Only a pump holds a lease to renew (the rewriter answers 'ok' without one).
        ...(pump ? { renew: (head: number) => records.renew(head, pump.leaseMs / 3) } : {}),
        diverged: (when) => this.#diverged(attachment, when),
      },
    };
  }

  /** `calls`: on a POST stream (or its continuation), the requests whose responses it carries. */
  rewriter(
    cursors: CursorTarget | undefined,
    head: number,
    options: { calls?: readonly JsonRpcId[]; verify?: Verify },
  ): SseRewriter {
    return new SseRewriter({
      cursors,
      head,
      maxEventBytes: this.deps.config().limits.sseEventBytes,
      trackResponses: options.calls !== undefined,
      // J1: every journaled stream, and every continuation, begins with a priming event.
      prime: cursors !== undefined,
      ...(options.calls ? { awaiting: options.calls } : {}),
      ...(options.verify ? { verify: options.verify } : {}),
    });
  }

  /**
   * Pipes a replica's SSE body through `rewriter` to the client; resolves when it ends (a held
   * stream: when its hold ends, J2).
   */
  pipe(request: PipeRequest, rewriter: SseRewriter, attachment: Attachment | undefined): Promise<PipeEnd> {
    const { metrics, openStreams, pumps } = this.deps;
    const pumped = attachment?.pump !== undefined ? attachment : undefined;
    const key = pumped && { sessionId: pumped.sessionId, incarnation: pumped.incarnation, kind: pumped.kind };
    const { events, open: streamOpen } = this.#metricsOf(request.replica);
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
      ...(key ? { hold: pumps.holdOptions(key) } : {}),
      ...(key ? { beforeEnd: (how) => this.#ended(key, request.replica, rewriter, how) } : {}),
    });
    openStreams.add(stream, request.replica, attachment);
    const keepAlive = attachment ? this.#keepAlive(attachment) : undefined;
    let renewal: NodeJS.Timeout | undefined;
    if (key && pumped?.pump) {
      pumps.add({ ...key, replica: request.replica, pipe: stream });
      // The lease says this instance still pumps: renewed between events (J3). A refusal says
      // another attachment took the stream over, or the stream is gone. One renewed late (behind
      // this instance's other work) is not what proves the pump alive: the instance's liveness is
      // (liveness.ts); how late each landed against the timer's schedule is measured.
      const period = pumped.pump.leaseMs / 3;
      const late = this.#streamLeaseLateness;
      let due = performance.now() + period;
      renewal = setInterval(() => {
        const dueAt = due;
        due = performance.now() + period;
        stream.between(async () => {
          const result = await rewriter.renew().catch(() => 'ok' as const);
          late.observe(Math.max(0, performance.now() - dueAt) / 1000);
          if (result !== 'ok') stream.release('hold_released');
        });
      }, period);
      renewal.unref();
    }
    return stream.done.then((how) => {
      if (counted) streamOpen.dec();
      clearInterval(keepAlive);
      clearInterval(renewal);
      if (key) {
        this.deps.store.releasePump(key.sessionId, key.incarnation, this.deps.instanceId).catch(() => undefined);
      }
      if (how === 'stale' || how === 'missing' || how === 'store_failed' || how === 'event_too_large') {
        this.deps.logger.warn({ replica: request.replica, why: how }, 'SSE stream ended early: the client will reconnect');
      }
      return how;
    });
  }

  /**
   * A pumped stream's replica stream ended: the pump's lease goes before the client's response
   * ends, so that the client's resumption never reads a stream whose replica stream is over as
   * live (J3). An end no live replica gives (a GET stream's, a POST stream's with calls still
   * awaited, a cut) is checked first: an owner found dead is gone (R4, J4) before the client hears.
   */
  async #ended(key: Omit<Pump, 'pipe' | 'replica'>, replica: string, rewriter: SseRewriter, how: 'upstream_end' | 'upstream_error'): Promise<void> {
    const suspicious = how === 'upstream_error' || key.kind === 'get' || !rewriter.answered;
    if (suspicious) await this.deps.fleet.confirmAlive(replica).catch(() => undefined);
    await this.deps.store.releasePump(key.sessionId, key.incarnation, this.deps.instanceId).catch(() => undefined);
  }

  /**
   * E6: the owner of a continuation numbers its events anew. The incarnation is marked, so that
   * every instance answers its resumptions as a gap from now on; the operator hears of the replica.
   */
  async #diverged(attachment: Attachment, when: 'replay' | 'live'): Promise<void> {
    const { logger, metrics, store } = this.deps;
    metrics.ownerDivergences.inc({ replica: attachment.owner, when });
    logger.warn(
      { replica: attachment.owner, when },
      "the owner sent an event under an upstream id already recorded for another event of the stream: it numbers its events anew (its log does not replay what it sent); nothing of it was forwarded, and the stream's resumptions are gaps from now on",
    );
    await store.closeIncarnation(attachment.sessionId, attachment.incarnation, 'diverged').catch((err: unknown) => {
      logger.error({ err, replica: attachment.owner }, 'the stream could not be marked diverged in the store: a resumption of it may ask the owner again');
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
