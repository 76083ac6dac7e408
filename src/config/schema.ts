/**
 * The configuration schema: one JSON schema (TypeBox) that validates the YAML file, fills in
 * defaults, gives the typed `Config`, and generates the configuration reference
 * (docs/configuration.md).
 * The keys of CONTRACT.md §2 are fixed; the rest are the gateway's own.
 */
import { Type, type Static } from '@sinclair/typebox';

/** A string enum as JSON schema `enum`, so that a wrong value gets one clear error. */
const StringEnum = <const T extends string>(values: readonly T[], options: { default: NoInfer<T>; description: string }) =>
  Type.Unsafe<T>({ type: 'string', enum: [...values], ...options });
const Millis = (description: string, def: number, minimum = 1) =>
  Type.Integer({ minimum, default: def, description });

const Listener = (port: number, what: string) =>
  Type.Object(
    {
      host: Type.String({ minLength: 1, default: '127.0.0.1', description: `address the ${what} binds to` }),
      port: Type.Integer({ minimum: 0, maximum: 65535, default: port, description: `TCP port of the ${what} (0: any free port)` }),
    },
    { additionalProperties: false, default: {} },
  );

const Replica = Type.Object(
  {
    id: Type.String({
      pattern: '^[A-Za-z0-9._-]{1,64}$',
      description: 'stable name of the replica; sessions are recorded against it',
    }),
    url: Type.String({ pattern: '^https?://', description: "the replica's own MCP endpoint" }),
    sseUrl: Type.Optional(
      Type.String({
        pattern: '^https?://',
        description: "the replica's 2024-11-05 HTTP+SSE endpoint (with legacySse); unset: /sse on the origin of its url",
      }),
    ),
  },
  { additionalProperties: false },
);

export const ConfigSchema = Type.Object(
  {
    listen: Listener(8080, 'MCP endpoint'),
    admin: Listener(9464, 'admin listener (/metrics, /healthz, /readyz)'),
    path: Type.String({ pattern: '^/', default: '/mcp', description: 'public path of the MCP endpoint' }),
    workers: Type.Union([Type.Integer({ minimum: 1 }), Type.Literal('auto')], {
      default: 1,
      description:
        'gateway processes serving listen.port together (node:cluster), each a full instance on the shared store; auto: one per core (os.availableParallelism()). Above 1 the process started is their primary: it serves the admin listener for all of them, forwards SIGHUP and SIGTERM, and replaces a worker that dies. Needs store.type redis (auto with a memory store runs 1); restart to change',
    }),
    store: Type.Object(
      {
        type: StringEnum(['memory', 'redis'], {
          default: 'memory',
          description: 'memory: one gateway process; redis: any number of gateways sharing it',
        }),
        url: Type.String({
          pattern: '^rediss?://',
          default: 'redis://127.0.0.1:6379',
          description:
            'Redis URL (type redis), redis://[[user]:password@]host[:port][/db], rediss:// for TLS; a password in it is never logged. With store.sentinel, only its user, password, db and TLS are used (those of the master, whose address the sentinels give); with store.cluster, it is not used',
        }),
        cluster: Type.Optional(
          Type.Object(
            {
              nodes: Type.Array(Type.String({ pattern: '^rediss?://' }), {
                minItems: 1,
                description:
                  'store.cluster (type redis; not with store.sentinel): seed nodes of a Redis Cluster, redis://[[user]:password@]host:port (rediss:// for TLS); the gateway discovers the others and logs in to every node as the seeds say, so all seeds have the same scheme, user and password. Unset: store.url is one node',
              }),
            },
            { additionalProperties: false },
          ),
        ),
        sentinel: Type.Optional(
          Type.Object(
            {
              nodes: Type.Array(Type.String({ pattern: '^rediss?://' }), {
                minItems: 1,
                description:
                  "store.sentinel (type redis; not with store.cluster): the Sentinels, redis://[[user]:password@]host:port (rediss:// for TLS), all with the same scheme, user and password (the sentinels' own, not the master's: those come from store.url). The gateway always talks to the master (every store operation writes), and follows a failover by itself; operations during one fail fast (503)",
              }),
              name: Type.String({
                minLength: 1,
                description: "store.sentinel: the master's name, as in the sentinels' `sentinel monitor <name> ...`",
              }),
            },
            { additionalProperties: false },
          ),
        ),
        tls: Type.Optional(
          Type.Object(
            {
              ca: Type.Optional(
                Type.String({
                  minLength: 1,
                  description:
                    "store.tls (type redis), the TLS of every store connection whose URL is rediss:// (store.url, the store.cluster nodes and the nodes they announce, the store.sentinel nodes; unset: Node's defaults, no client certificate; file paths relative to the working directory): PEM file of the certificate authorities that sign the servers' certificates, trusted instead of Node's own list; read at start",
                }),
              ),
              cert: Type.Optional(
                Type.String({
                  minLength: 1,
                  description: "store.tls: PEM file of the gateway's client certificate, for a Redis that requires one (tls-auth-clients yes); with store.tls.key; read at start",
                }),
              ),
              key: Type.Optional(
                Type.String({
                  minLength: 1,
                  description: "store.tls: PEM file of the client certificate's private key (not encrypted), with store.tls.cert; read at start, never logged",
                }),
              ),
              servername: Type.Optional(
                Type.String({
                  minLength: 1,
                  description:
                    "store.tls: the name every server's certificate is checked against, and sent as SNI, instead of the host of each node's URL: for nodes reached by an address their certificate does not name (Cluster nodes announce their IP addresses, Sentinel gives the master's)",
                }),
              ),
              rejectUnauthorized: Type.Boolean({
                default: true,
                description:
                  "store.tls: verify each server's certificate (its chain up to a trusted authority, and its name); false accepts any certificate, so that anyone on the path can read and change the store's traffic",
              }),
            },
            { additionalProperties: false },
          ),
        ),
        keyPrefix: Type.String({
          pattern: '^[A-Za-z0-9:._-]{1,64}$',
          default: 'mcpgw',
          description: 'prefix of every Redis key, so that several fleets can share one Redis',
        }),
        connectTimeoutMs: Millis('how long a connection attempt to Redis may take', 1000),
        commandTimeoutMs: Millis(
          'how long one store operation may take before the request that needs it gets 503',
          500,
        ),
        autoPipelining: Type.Boolean({
          default: false,
          description:
            'store operations issued in one turn of the event loop leave in one write to Redis (ioredis auto-pipelining) and their replies come back in one read: a reconnection storm of 1,000 streams was continued in about half the time and half the CPU, but the records of paced streams wait for their batch, which raised their p99 latency (docs/performance.md#auto-pipelining). Each operation keeps its own timeout; restart to change',
        }),
        bindingCache: Type.Object(
          {
            maxEntries: Type.Integer({
              minimum: 0,
              default: 100_000,
              description:
                "sessions whose binding (owner) each gateway instance keeps in memory, the least recently used dropped first (about 300 bytes each): a request of a cached session is routed without a store round trip. The store tells every instance when a session ends or an owner is declared gone; a cached binding is confirmed with the store at least once per health.intervalMs, so it outlives the store's record by one health tick at most. 0: every request reads the store",
            }),
          },
          { additionalProperties: false, default: {} },
        ),
      },
      { additionalProperties: false, default: {} },
    ),
    replicas: Type.Array(Replica, { minItems: 1, description: 'the MCP replicas behind the gateway' }),
    balancer: StringEnum(['round-robin', 'least-sessions'], {
      default: 'round-robin',
      description:
        'how a new session picks among healthy replicas; least-sessions counts the sessions this gateway instance bound',
    }),
    health: Type.Object(
      {
        intervalMs: Millis('time between two active probes of a replica', 2000),
        timeoutMs: Millis('how long a probe may take before it counts as failed', 1000),
        unhealthyThreshold: Type.Integer({
          minimum: 1,
          default: 3,
          description: 'consecutive failed probes after which a replica is down and its sessions are lost',
        }),
        healthyThreshold: Type.Integer({
          minimum: 1,
          default: 1,
          description: 'consecutive good probes after which a down replica takes new sessions again',
        }),
        path: Type.Optional(
          Type.String({
            pattern: '^/',
            description:
              "path probed with a GET on the replica's origin; unset: the MCP endpoint itself, where any HTTP answer means alive",
          }),
        ),
        instanceHeader: Type.Optional(
          Type.String({
            pattern: '^[A-Za-z0-9-]{1,64}$',
            description:
              "a response header naming the replica's process (the demo replica sends mcp-replica-instance); a new value seen by a probe means the replica restarted and its sessions are lost; removed from every response to clients",
          }),
        ),
        expectStatus: Type.Array(Type.Integer({ minimum: 100, maximum: 599 }), {
          default: [],
          description: 'statuses that count as healthy; empty: any HTTP answer',
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    sessions: Type.Object(
      {
        idleTtlMs: Millis('a session without any request or open stream for this long is forgotten', 1_800_000),
        tombstoneTtlMs: Millis(
          'how long an ended session (DELETE, or lost with its owner) is remembered, to tell late requests why',
          3_600_000,
        ),
      },
      { additionalProperties: false, default: {} },
    ),
    upstream: Type.Object(
      {
        connectTimeoutMs: Millis('how long connecting to a replica may take', 2000),
        headersTimeoutMs: Millis(
          "how long a replica may take to send response headers (a JSON-answered tools/call sends them at the end)",
          300_000,
        ),
        connections: Type.Integer({
          minimum: 1,
          default: 1024,
          description:
            'connections per replica at the most for requests other than GETs (POST, DELETE; a POST answered with an SSE stream holds one until it ends). GET streams have their own, upstream.maxStreams',
        }),
        maxStreams: Type.Integer({
          minimum: 1,
          default: 4096,
          description:
            "GET streams (SSE) open to one replica at the most, each on a connection of its own, apart from every other request's. One over it takes the place of the oldest held stream no client is attached to (a hold expiry of reason budget, its journal kept), else gets 503 GW_STREAM_BUDGET with Retry-After at once. Keep the replica's own connection limit and the process file limit (ulimit -n) above it",
        }),
        retryAfterSeconds: Type.Integer({
          minimum: 0,
          default: 1,
          description: 'Retry-After sent with every 503 (store unavailable, replica suspected, no replica up, shutting down)',
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    resumption: Type.Object(
      {
        mode: StringEnum(['signal', 'reject'], {
          default: 'signal',
          description: 'signal: answer a stream that cannot continue as a new stream with a notification; reject: 410',
        }),
        replayTimeoutMs: Millis("how long the owner may take to replay the events after a cursor, and how long a resumption waits for a cursor's record still on its way from the instance that holds its stream (written late after a store outage, docs/store-outages.md)", 5000),
        recordRetryMs: Millis(
          'how long, beyond one store attempt (itself bounded by store.commandTimeoutMs), the events of an open stream wait for their record before they leave unrecorded, to be recorded once the store answers again (docs/store-outages.md). 0: one attempt. Events are never held longer, and a stream never ends for want of a record',
          0,
          0,
        ),
        unrecorded: Type.Object(
          {
            streamBytes: Type.Integer({
              minimum: 1024,
              default: 1024 * 1024,
              description:
                'bound of one stream\'s records held in memory while the store does not answer (counted as 56 bytes plus the upstream id\'s length per event and 200 per batch); past it the stream goes on but is no longer recorded: its later cursors are unknown_stream',
            }),
            totalBytes: Type.Integer({
              minimum: 1024,
              default: 64 * 1024 * 1024,
              description:
                'bound of all records held in memory by this instance while the store does not answer, counted as streamBytes; a stream that would go past it goes on unrecorded',
            }),
          },
          { additionalProperties: false, default: {} },
        ),
        recordedEvents: Type.Integer({
          minimum: 16,
          default: 1024,
          description:
            'positions kept per stream: a cursor older than the last this many events of its stream is unknown_stream',
        }),
        replayBufferBytes: Type.Integer({
          minimum: 65536,
          default: 8 * 1024 * 1024,
          description:
            'largest replay held back while it is checked (nothing is sent before every replayed event is verified); a larger one is a gap',
        }),
        admission: Type.Object(
          {
            maxConcurrent: Type.Integer({
              minimum: 1,
              default: 64,
              description:
                'resumption decisions (GET with Last-Event-ID) this instance runs at once, each from its arrival until its response headers leave; more wait in the queue',
            }),
            maxQueued: Type.Integer({
              minimum: 0,
              default: 1024,
              description: 'resumption decisions waiting for a turn; one more is answered 503 GW_RESUMPTION_BUSY with Retry-After at once',
            }),
            queueMs: Millis('how long a resumption decision may wait for a turn before it is answered 503 GW_RESUMPTION_BUSY with Retry-After', 500, 1),
          },
          {
            additionalProperties: false,
            default: {},
            description:
              'storm admission: bounded concurrency of resumption decisions, so that each admitted one is fast when thousands of clients reconnect at once, and the rest are told at once to come back (docs/operations.md)',
          },
        ),
        journal: Type.Object(
          {
            enabled: Type.Boolean({
              default: true,
              description:
                "the gateway's own event journal (CONTRACT.md §8, docs/journal.md): every event of a stream gets a cursor and its bytes are kept in the store, a stream whose client went away is held open, and a continuation is served from the journal through any instance; false: only the owner's own log replays (§5)",
            }),
            maxEvents: Type.Integer({
              minimum: 1,
              default: 1000,
              description:
                'events journaled per stream incarnation: the oldest go first, and a cursor older than the journal window is a gap',
            }),
            maxBytes: Type.Integer({
              minimum: 1024,
              default: 1024 * 1024,
              description:
                'bytes journaled per stream incarnation (the events as sent, without their id lines): the oldest events go first, the newest is always kept',
            }),
            holdMs: Millis(
              'how long a GET stream whose client went away is held open, still read and journaled, waiting for the client to continue (extended while a client is attached through another instance); a POST stream is held until its responses have passed',
              60_000,
              1000,
            ),
            leaseMs: Millis(
              "how long an instance's claim on a journaled stream lasts unless renewed (renewed every third of it): the claim of the instance that reads and journals it, so another instance takes a stream over at most this long after that one died, and the claim of a client attached through another instance, which keeps a held GET stream from being let go; shorter takes over sooner, at the cost of a store write per stream that often. Also how long this instance's liveness lasts (read at start, renewed every third of it on a thread of its own): a stream whose claim lapsed while its instance lives is only late, never taken over or signalled for it (docs/journal.md#instance-liveness)",
              6000,
              1000,
            ),
            maxHeld: Type.Integer({
              minimum: 0,
              default: 1000,
              description:
                'streams this instance holds open at once without a client; past it the one held longest is released (0: none is held)',
            }),
          },
          { additionalProperties: false, default: {} },
        ),
      },
      { additionalProperties: false, default: {} },
    ),
    legacySse: Type.Optional(
      Type.Object(
        {
          path: Type.String({ pattern: '^/', description: "legacySse: the gateway's public SSE endpoint of the 2024-11-05 HTTP+SSE transport (GET)" }),
          messagesPath: Type.String({
            pattern: '^/',
            description: "legacySse: the gateway's public message endpoint of that transport (POST ...?sessionId=), named in the endpoint event the client receives",
          }),
        },
        {
          additionalProperties: false,
          description: 'serves clients of the 2024-11-05 HTTP+SSE transport (CONTRACT.md §9), through each replica\'s own SSE endpoint (replicas[].sseUrl); unset: not served',
        },
      ),
    ),
    tasks: Type.Object(
      {
        maxTtlMs: Type.Integer({
          minimum: 1000,
          maximum: 30 * 24 * 3_600_000,
          default: 86_400_000,
          description:
            "how long at most the gateway remembers which replica holds a task of the 2026-07-28 era (§9 M2): a task is remembered for the ttlMs its tools/call answer gives, or this long when that is null, absent, or longer (at least 1 s; at most 30 days). After it, a request for the task goes to the balancer",
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    cursor: Type.Object(
      {
        secret: Type.Optional(
          Type.String({
            minLength: 32,
            description:
              'key of the cursor MAC (at least 32 characters): it signs every cursor issued, and verifies; unset: the gateways sharing the store agree on a random one. A reload applies a new one; to change it without turning cursors in flight foreign, follow the rotation in docs/security.md#cursor-keys',
          }),
        ),
        previousSecrets: Type.Optional(
          Type.Array(Type.String({ minLength: 32 }), {
            description:
              'keys that verify cursors but sign none (each at least 32 characters, each different, none the same as cursor.secret; needs cursor.secret): the key being retired, or the next one before it signs (docs/security.md#cursor-keys). An item whose ${VAR} is unset or empty is left out. A reload applies them',
          }),
        ),
      },
      { additionalProperties: false, default: {} },
    ),
    security: Type.Object(
      {
        allowedOrigins: Type.Optional(
          Type.Array(Type.String({ minLength: 1 }), {
            description: 'web origins granted CORS access (exact match); when set, a request whose Origin is not listed gets 403; unset: Origin is not checked and no origin is granted',
          }),
        ),
        credentialHeaders: Type.Array(Type.String({ pattern: '^[a-z0-9!#$%&\'*+.^_`|~-]+$', description: 'a request header name, in lower case' }), {
          default: ['authorization'],
          uniqueItems: true,
          description:
            "the request headers that carry a client's credential (J6): at initialize a session is bound to a keyed fingerprint of their values (never the values), and whatever the gateway serves of the session from its own state (the journal) goes only to a request with the same fingerprint or one that the session's owner accepts (asked with a ping carrying the request's credential); e.g. [authorization, x-api-key] or [cookie]. []: sessions are bound to no credential and the journal serves any request that names the session",
        }),
        principalCheckTimeoutMs: Millis(
          "how long the owner may take to answer the ping that checks a credential other than the session's (J6); past it the request gets 503 with Retry-After and none of the session's events",
          5000,
        ),
      },
      { additionalProperties: false, default: {} },
    ),
    limits: Type.Object(
      {
        bodyBytes: Type.Integer({
          minimum: 1024,
          default: 4 * 1024 * 1024,
          description: 'largest request body accepted (413 above it)',
        }),
        headerBytes: Type.Integer({
          minimum: 1024,
          default: 16 * 1024,
          description: 'largest request header block accepted (431 above it)',
        }),
        headersTimeoutMs: Millis(
          "how long a client may take to send a request's whole header block; a silent or half-sent one is answered 408 and closed (checked every second). Never bounds a request after its headers: SSE streams stay open",
          10_000,
        ),
        clientConnections: Type.Integer({
          minimum: 1,
          default: 10_000,
          description:
            'open client connections on the MCP listener at the most (each open SSE stream holds one); a connection over it is closed at once and counted in mcp_gateway_client_refused_total{reason="connection_limit"}. Keep it under the process file limit (ulimit -n)',
        }),
        sseEventBytes: Type.Integer({
          minimum: 1024,
          default: 1024 * 1024,
          description: 'largest SSE event a replica may send; a larger one ends the stream cleanly',
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    cache: Type.Object(
      {
        enabled: Type.Boolean({
          default: false,
          description:
            'keep the 2026-07-28 results a shared cache may keep (server/discover, the lists, resources/read with cacheScope public and a positive ttlMs) and answer the same request from memory for that ttlMs; false: every request reaches a replica',
        }),
        maxEntries: Type.Integer({ minimum: 0, default: 1000, description: 'most results kept (least recently used out first)' }),
        maxBytes: Type.Integer({
          minimum: 0,
          default: 16 * 1024 * 1024,
          description: 'most bytes of results kept, counted as the replicas sent them; a larger result is not kept',
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    shutdown: Type.Object(
      {
        graceMs: Millis(
          'on SIGTERM, how long requests in flight (a POST answered with SSE until its response has passed) may take to finish; the stop comes sooner once none is left',
          10_000,
          0,
        ),
        retryHintMs: Millis(
          'the SSE retry: value sent on each open stream as the gateway ends it (shutdown, replica removed): when the client reconnects, elsewhere, to continue',
          1000,
          0,
        ),
      },
      { additionalProperties: false, default: {} },
    ),
    tracing: Type.Object(
      {
        enabled: Type.Boolean({
          default: false,
          description:
            'OpenTelemetry traces over OTLP/HTTP (docs/operations.md "Traces"): a span per request, per request to a replica, per store operation, the resumption decision. Off by default; also on without this key when OTEL_TRACES_EXPORTER=otlp and OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT are set. The keys below, where set, take precedence over the OTEL_* variables; restart to change',
        }),
        endpoint: Type.Optional(
          Type.String({
            pattern: '^https?://',
            description: "the collector's OTLP/HTTP traces URL, e.g. http://127.0.0.1:4318/v1/traces; unset: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_EXPORTER_OTLP_ENDPOINT with /v1/traces, or http://localhost:4318/v1/traces",
          }),
        ),
        protocol: Type.Optional(
          Type.Unsafe<'http/protobuf' | 'http/json'>({
            type: 'string',
            enum: ['http/protobuf', 'http/json'],
            description: 'OTLP encoding; unset: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf',
          }),
        ),
        headers: Type.Optional(
          Type.Record(Type.String({ pattern: '^[A-Za-z0-9!#$%&\'*+.^_`|~-]+$' }), Type.String(), {
            description: 'headers sent to the collector (e.g. its credential); unset: OTEL_EXPORTER_OTLP_TRACES_HEADERS or OTEL_EXPORTER_OTLP_HEADERS. Never logged',
          }),
        ),
        timeoutMs: Type.Optional(Type.Integer({ minimum: 1, description: 'timeout of one export to the collector; unset: OTEL_EXPORTER_OTLP_TRACES_TIMEOUT or OTEL_EXPORTER_OTLP_TIMEOUT, else 10000' })),
        sampleRatio: Type.Optional(
          Type.Number({
            minimum: 0,
            maximum: 1,
            description:
              "share of traces recorded, decided where a trace starts: a request whose client sent a traceparent follows the client's choice (parentbased_traceidratio); unset: OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, else every trace",
          }),
        ),
        serviceName: Type.Optional(Type.String({ minLength: 1, description: 'service.name of the spans; unset: OTEL_SERVICE_NAME, else mcp-resume-gateway' })),
      },
      { additionalProperties: false, default: {} },
    ),
    log: Type.Object(
      {
        level: StringEnum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], {
          default: 'info',
          description: 'pino log level',
        }),
        requests: Type.Boolean({
          default: false,
          description:
            'one line per request on the MCP endpoint (msg "request": method, path, status, replica, session (its keyed fingerprint), ms, how it ended, resumption outcome and reason, GW code, client address), written whatever log.level says, like an access log; off by default: at full load it is the largest cost of logging',
        }),
      },
      { additionalProperties: false, default: {} },
    ),
  },
  { additionalProperties: false },
);

export type Config = Static<typeof ConfigSchema>;
export type ReplicaConfig = Config['replicas'][number];
