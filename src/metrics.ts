/**
 * The metrics of CONTRACT.md §6, registered on an injected registry (no global registry: two
 * gateways in one process, as in the tests, keep their figures apart).
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, type Aggregator, type Registry } from 'prom-client';

export type Metrics = ReturnType<typeof createMetrics>;

/** Label value for answers the gateway gives itself, without forwarding to any replica. */
export const NO_REPLICA = 'none';
/** Reason label value of a resumption that continued: there is nothing to explain. */
export const NO_REASON = 'none';

/** One series of a counter counted in plain numbers: what it gained since the last scrape. */
interface PendingSeries<Labels> {
  readonly labels: Labels;
  pending: number;
}

export function createMetrics(registry: Registry) {
  const registers = [registry];
  // Every metric but the requests counter (its own collect) is one of these, on this registry alone.
  const counter = <L extends string>(name: string, help: string, labelNames: readonly L[] = []) => new Counter({ name, help, labelNames, registers });
  // `aggregator`: how the primary of several workers (workers/primary.ts) combines the workers'
  // values; a sum unless said otherwise.
  const gauge = <L extends string>(name: string, help: string, labelNames: readonly L[] = [], aggregator: Aggregator = 'sum') =>
    new Gauge({ name, help, labelNames, registers, aggregator });
  const histogram = <L extends string>(name: string, help: string, labelNames: readonly L[], buckets: number[]) =>
    new Histogram({ name, help, labelNames, buckets, registers });
  const requestCounts = new Map<string, PendingSeries<{ method: string; status: string; replica: string }>>();
  collectDefaultMetrics({ register: registry });
  const metrics = {
    registry,
    requests: new Counter({
      name: 'mcp_gateway_requests_total',
      help: 'Requests answered on the MCP endpoint, by method, status and the replica that answered (none: the gateway itself).',
      labelNames: ['method', 'status', 'replica'] as const,
      registers,
      // Counted in plain numbers per request (countRequest), handed over when scraped.
      collect() {
        for (const series of requestCounts.values()) {
          if (series.pending === 0) continue;
          this.inc(series.labels, series.pending);
          series.pending = 0;
        }
      },
    }),
    upstreamDuration: histogram(
      'mcp_gateway_upstream_duration_seconds',
      'Time from sending a request to a replica to receiving its response headers.',
      ['replica'],
      [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    ),
    sseStreamsOpen: gauge('mcp_gateway_sse_streams_open', 'SSE streams open through the gateway, by owning replica.', ['replica']),
    sseEvents: counter('mcp_gateway_sse_events_total', 'SSE events forwarded to clients, by owning replica.', ['replica']),
    ownerDivergences: counter(
      'mcp_gateway_owner_divergences_total',
      "Continuations from an owner's log in which the owner sent an event under an upstream id already recorded for another event of the stream (CONTRACT.md §4 E6: a replica that numbers its events anew), by owning replica and when: replay (among the events it was to replay: answered as a gap) or live (after them: the stream ended, its reconnection answered gap). Nothing of it was forwarded. Should stay 0: a replica counted here is misbuilt.",
      ['replica', 'when'],
    ),
    // Each worker probes on its own: 1 only when every worker sends the replica new sessions.
    replicaUp: gauge('mcp_gateway_replica_up', '1 when the replica takes new sessions, 0 when it is down.', ['replica'], 'min'),
    storeDuration: histogram(
      'mcp_gateway_store_duration_seconds',
      'Duration of store operations, by operation.',
      ['op'],
      [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
    ),
    leaseRenewalLateness: histogram(
      'mcp_gateway_lease_renewal_lateness_seconds',
      "How late a lease renewal landed in the store against its schedule (every third of resumption.journal.leaseMs), by lease: instance (this instance's liveness, renewed on a path of its own) or stream (a pumped stream's lease, renewed between its events). A renewal later than two thirds of the lease let the lease lapse.",
      ['lease'],
      [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 6, 10, 30, 60],
    ),
    storeErrors: counter('mcp_gateway_store_errors_total', 'Store operations that failed or timed out, by operation.', ['op']),
    bindingCache: counter(
      'mcp_gateway_binding_cache_total',
      'Session bindings looked up in or dropped from this instance\'s cache (store.bindingCache), by result: hit (routed without the store), miss (read from the store), invalidated (a session ended or its owner was declared gone, here or through another instance, or the store no longer holds it active), evicted (over maxEntries), dropped (the whole cache forgotten: the store connection or its notes dropped, or the store lost its data).',
      ['result'],
    ),
    bindingCacheEntries: gauge('mcp_gateway_binding_cache_entries', 'Session bindings in this instance\'s cache.'),
    unrecordedEvents: gauge(
      'mcp_gateway_unrecorded_events',
      'Events that left while the store did not answer, whose records this instance holds until it can write them.',
    ),
    unrecordedBytes: gauge('mcp_gateway_unrecorded_bytes', 'Bytes held for unrecorded events, as counted against resumption.unrecorded.totalBytes.'),
    recordWaits: counter(
      'mcp_gateway_resumption_record_waits_total',
      'Resumptions whose cursor was not recorded yet while the instance holding its stream could still record it (its records written late after a store outage), by outcome: recorded (the record came within resumption.replayTimeoutMs, decided on it), not_recorded (it did not: unknown_stream, or what the store said then).',
      ['outcome'],
    ),
    lateRecordBatches: counter('mcp_gateway_record_batches_late_total', 'Writes of held records that the store accepted after their events had left.'),
    streamsStoppedRecording: counter(
      'mcp_gateway_streams_stopped_recording_total',
      'Streams that went on unrecorded, by reason (stream_limit, total_limit, refused, shutdown): their later cursors are unknown_stream.',
      ['reason'],
    ),
    clientsRefused: counter(
      'mcp_gateway_client_refused_total',
      'Client connections and requests the MCP listener refused before routing: connection_limit (over limits.clientConnections), headers_timeout (headers not in within limits.headersTimeoutMs), header_overflow (over limits.headerBytes), malformed.',
      ['reason'],
    ),
    configReloads: counter(
      'mcp_gateway_config_reloads_total',
      'Configuration reloads (SIGHUP) by result: applied (all of it), partial (some keys need a restart; named in the log), invalid (refused; the running configuration stays).',
      ['result'],
    ),
    cursorKeyMismatch: gauge(
      'mcp_gateway_cursor_key_mismatch_instances',
      'Other gateway instances on this store that sign with a key this one does not verify, or do not verify the key this one signs with (cursors of one are foreign_cursor on the other).',
      [],
      // Workers all see the same other instances: counted once, not once per worker.
      'max',
    ),
    cursorPreviousKey: counter(
      'mcp_gateway_cursor_previous_key_total',
      'Cursors of resumptions that a previous key (cursor.previousSecrets) verified rather than the signing key (cursor.secret): once it stops growing on every instance, no cursor of those keys is used any more (docs/security.md#cursor-keys).',
    ),
    modernRequests: counter(
      'mcp_gateway_modern_requests_total',
      'Requests of the 2026-07-28 era, by JSON-RPC method (other: one the gateway does not know) and outcome (forwarded, header_mismatch, cache_hit: answered from the cache).',
      ['mcp_method', 'outcome'],
    ),
    tasks: counter(
      'mcp_gateway_tasks_total',
      'Tasks of the 2026-07-28 era by outcome: recorded (a tools/call answered with a task, its holder in the store), unrecorded (the store did not take it; logged), routed (a request for a recorded task sent to its holder), unknown (a request for a task the store does not hold, sent to the balancer), lost (its holder is gone: GW_TASK_LOST).',
      ['outcome'],
    ),
    cacheRequests: counter(
      'mcp_gateway_cache_requests_total',
      'Cacheable requests of the 2026-07-28 era with cache.enabled, by method and result: hit (answered from the cache), miss (forwarded; its answer kept when public), bypass (a multi-round retry, never cached).',
      ['mcp_method', 'result'],
    ),
    cacheEntries: gauge('mcp_gateway_cache_entries', 'Results held by the cache of the 2026-07-28 era (cache.maxEntries bounds it).'),
    cacheBytes: gauge('mcp_gateway_cache_bytes', 'Bytes of the results held by the cache of the 2026-07-28 era (cache.maxBytes bounds it).'),
    journalEvents: counter(
      'mcp_gateway_journal_events_total',
      'Events journaled (CONTRACT.md §8 J1): recorded with their bytes, or held with them for a late write while the store does not answer.',
    ),
    journalBytes: counter('mcp_gateway_journal_bytes_total', 'Bytes of the events journaled (each SSE block without its id line, UTF-8).'),
    upstreamStreams: gauge(
      'mcp_gateway_upstream_streams',
      'GET streams open to each replica from this instance (held ones included), counted against upstream.maxStreams.',
      ['replica'],
    ),
    upstreamStreamBudget: gauge('mcp_gateway_upstream_stream_budget', 'The stream budget of each replica (upstream.maxStreams) on this instance.'),
    streamBudgetExceeded: counter(
      'mcp_gateway_stream_budget_exceeded_total',
      'GET streams refused with 503 GW_STREAM_BUDGET: their replica was at its stream budget with no held stream to give way (never sent, never queued).',
      ['replica'],
    ),
    heldStreams: gauge(
      'mcp_gateway_held_streams',
      'Streams this instance reads from their replica with no client attached (J2 hold-open), bounded by resumption.journal.maxHeld.',
    ),
    holdExpiries: counter(
      'mcp_gateway_hold_expiries_total',
      'Held GET streams let go with no client back, by reason: timeout (resumption.journal.holdMs passed), cap (over resumption.journal.maxHeld, the oldest), superseded (a newer GET of its session), budget (its replica at upstream.maxStreams: the oldest held one makes room for a new GET; its journal stays).',
      ['reason'],
    ),
    heldTakeovers: counter(
      'mcp_gateway_held_takeovers_total',
      'Plain GETs (no Last-Event-ID) that took their session\'s held GET stream over (J2, J3): continued from the journal at the last position written to the client that left, instead of waiting for the replica to let the held stream go.',
    ),
    principalChecks: counter(
      'mcp_gateway_principal_checks_total',
      "Checks of a request's credential before the gateway serves a session from its own state (J6), by result: match (the session's principal), accepted (another credential, which the owner accepted: the session is bound to it from then on), refused (the owner's 401 or 403 passed on), owner_gone (another credential with the owner gone: 403), unverified (the owner did not answer the check: 503).",
      ['result'],
    ),
    continuations: counter(
      'mcp_gateway_continuations_total',
      'Resumptions continued, by source: journal (the gateway\'s own journal, then the live stream) or owner (the owner replica replayed from its log).',
      ['source'],
    ),
    resumptionsBusy: counter(
      'mcp_gateway_resumptions_busy_total',
      'Resumptions answered 503 GW_RESUMPTION_BUSY with Retry-After, before anything was read for them: more decisions were running and waiting on this instance than resumption.admission allows (a reconnection storm).',
    ),
    resumptionDecisions: gauge(
      'mcp_gateway_resumption_decisions',
      'Resumption decisions on this instance by state: running (at most resumption.admission.maxConcurrent) and queued (waiting for a turn, at most resumption.admission.maxQueued).',
      ['state'],
    ),
    resumptionTimes: histogram(
      'mcp_gateway_resumption_decision_seconds',
      'Time of the resumption decisions (GET with Last-Event-ID) admitted on this instance, by phase: queued (from arrival to its turn, resumption.admission; 0 when a turn was free) and decided (from its turn to its response headers: the store reads, the decision, a wait for a record on its way, the owner\'s answer when it replays). A decision whose client left before its headers is not counted in decided; one answered 503 GW_RESUMPTION_BUSY is in neither.',
      ['phase'],
      [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2.5, 5, 10, 30],
    ),
    resumptions: counter(
      'mcp_gateway_resumptions_total',
      'Requests carrying Last-Event-ID, by outcome (continued, new_stream, rejected, stripped) and reason.',
      ['outcome', 'reason'],
    ),
  };
  // The per-request series, each looked up once: prom-client hashes the label object on every
  // call otherwise. Their label values are bounded (methods, statuses, configured replicas, ops).
  const upstream = children((replica: string) => metrics.upstreamDuration.labels(replica));
  const storeTime = children((op: string) => metrics.storeDuration.labels(op));
  const storeError = children((op: string) => metrics.storeErrors.labels(op));
  const resumption = children((outcome: string, reason: string) => metrics.resumptions.labels(outcome, reason));
  return {
    ...metrics,
    /** Counts one answer on the MCP endpoint (mcp_gateway_requests_total). */
    countRequest(method: string, status: number, replica: string): void {
      // prom-client hashes and validates the labels on every inc, even of a child: the hot path
      // adds to a number, and the counter takes the sums when it is scraped (its collect above).
      const key = `${method} ${status} ${replica}`;
      let series = requestCounts.get(key);
      if (series === undefined) {
        series = { labels: { method, status: String(status), replica }, pending: 0 };
        requestCounts.set(key, series);
      }
      series.pending++;
    },
    /** Starts timing a request to `replica`; call the result when its headers arrived. */
    upstreamTimer(replica: string): () => void {
      return timer(upstream(replica));
    },
    storeTimer(op: string): () => void {
      return timer(storeTime(op));
    },
    /** Counts one request carrying Last-Event-ID (mcp_gateway_resumptions_total). */
    countResumption(outcome: string, reason: string): void {
      resumption(outcome, reason).inc();
    },
    countStoreError(op: string): void {
      storeError(op).inc();
    },
  };
}

function children<Args extends string[], Child>(make: (...values: Args) => Child): (...values: Args) => Child {
  const cache = new Map<string, Child>();
  return (...values) => {
    const key = values.join('\n');
    let child = cache.get(key);
    if (child === undefined) {
      child = make(...values);
      cache.set(key, child);
    }
    return child;
  };
}

/**
 * A duration observed on a histogram child, timed with performance.now(): prom-client's own
 * startTimer allocates two hrtime arrays and copies the labels once more for every observation.
 */
function timer(child: { observe(value: number): void }): () => void {
  const start = performance.now();
  return () => child.observe((performance.now() - start) / 1000);
}
