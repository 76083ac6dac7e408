/**
 * The OpenTelemetry SDK, set up once per process when traces are on (tracing/index.ts decides):
 * a tracer provider exporting over OTLP/HTTP (protobuf or JSON), the W3C trace context, the undici
 * instrumentation for the requests to the replicas, and the gateway's own spans: one server span
 * per request, one per store operation, the resumption decision as an event, and a link from the
 * span that continues a held stream to the span that held it (its record's holderSpan).
 *
 * Fastify's and ioredis's instrumentations are not used: both patch the module as it is first
 * loaded, which traces loaded on demand come too late for, and ioredis's would write each
 * command's keys, which name sessions, into its spans. The server span and the store spans are
 * made here instead, with nothing in them that is secret: no header value, no cursor, no task id,
 * and a session only as the keyed fingerprint the request log writes.
 */
import {
  context,
  isSpanContextValid,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type SpanContext,
  type SpanOptions,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
  type Sampler,
} from '@opentelemetry/sdk-trace';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Config } from '../config/schema.js';
import { headerValue, SESSION_HEADER } from '../headers.js';
import { NO_REPLICA } from '../metrics.js';
import { packageVersion } from '../version.js';
import type { Decided, Env, TracedGateway, Tracing } from './index.js';

/** The prefix of the gateway's own attribute names, where the semantic conventions have none. */
export const PREFIX = 'mcp_gateway';
const SERVICE_NAME = 'mcp-resume-gateway';

export function createTracing(config: Config['tracing'], env: Env): Tracing {
  const protocol = config.protocol ?? env['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'] ?? env['OTEL_EXPORTER_OTLP_PROTOCOL'] ?? 'http/protobuf';
  if (protocol !== 'http/protobuf' && protocol !== 'http/json') {
    throw new Error(`OTLP protocol ${protocol} is not supported: traces are exported over http/protobuf or http/json`);
  }
  const options = exporterOptions(config, env);
  const exporter = protocol === 'http/json' ? new JsonExporter(options) : new ProtobufExporter(options);
  const serviceName = config.serviceName ?? env['OTEL_SERVICE_NAME'] ?? SERVICE_NAME;
  const version = packageVersion();
  const resource = resourceFromAttributes({ 'service.version': version })
    .merge(detectResources({ detectors: [envDetector] }))
    .merge(resourceFromAttributes({ 'service.name': serviceName }));
  const provider = new TracerProvider({ resource, sampler: sampler(config.sampleRatio, env), spanProcessors: [new BatchSpanProcessor({ exporter })] });
  // The API's context and propagator are the process's: the undici instrumentation reads them.
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()] }));
  const tracer = provider.getTracer(SERVICE_NAME, version);
  const replicaLookups = new Set<(origin: string) => string | undefined>();
  const undici = new UndiciInstrumentation({
    // Probes and background work have no request to belong to: no root span every health interval.
    requireParentforSpans: true,
    // The client's query goes on to the replica and may hold a credential: the URL without it.
    startSpanHook: (request) => {
      const path = pathOf(request.path);
      const url = { 'url.full': `${request.origin}${path}`, 'url.path': path, 'url.query': path === request.path ? '' : '?redacted' };
      for (const lookup of replicaLookups) {
        const replica = lookup(request.origin);
        if (replica !== undefined) return { ...url, [`${PREFIX}.replica`]: replica };
      }
      return url;
    },
  });
  undici.setTracerProvider(provider);
  undici.enable();
  const spans = new WeakMap<FastifyRequest, Span>();
  /** The gateway each request came to: several in one process (tests) share the SDK, each with its own cursor key. */
  const gateways = new WeakMap<FastifyRequest, TracedGateway>();
  const nameSession = (request: FastifyRequest, span: Span, sessionId: string): void => {
    const fingerprint = gateways.get(request)?.session(sessionId);
    if (fingerprint !== undefined) span.setAttribute(`${PREFIX}.session`, fingerprint);
  };
  const decisions = new WeakMap<FastifyRequest, Attributes>();
  const madeDecisions = new WeakMap<FastifyRequest, Decided[]>();
  /**
   * A span around `call`, made only under a request's (or a stream's): the background loops' work
   * is not traced.
   */
  async function within<T>(name: string, options: SpanOptions, call: () => Promise<T>, after?: (result: T) => Attributes): Promise<T> {
    if (trace.getSpan(context.active()) === undefined) return call();
    return tracer.startActiveSpan(name, options, async (span) => {
      try {
        const result = await call();
        if (after !== undefined) span.setAttributes(Object.fromEntries(Object.entries(after(result)).map(([key, value]) => [`${PREFIX}.${key}`, value])));
        return result;
      } catch (err) {
        span.setStatus({ code: SpanStatusCode.ERROR });
        span.setAttribute('error.type', (err as { code?: string }).code ?? 'Error');
        throw err;
      } finally {
        span.end();
      }
    });
  }

  return {
    instrument(mcp: FastifyInstance, gateway: TracedGateway): void {
      replicaLookups.add((origin) => gateway.replicas().find((r) => new URL(r.url).origin === origin)?.id);
      const start = (request: FastifyRequest, body: unknown): Span => {
        const route = request.routeOptions.url;
        const span = tracer.startSpan(
          route === undefined ? request.method : `${request.method} ${route}`,
          {
            kind: SpanKind.SERVER,
            startTime: arrivals.get(request),
            attributes: {
              'http.request.method': request.method,
              'url.path': pathOf(request.url),
              'url.scheme': request.protocol,
              ...(route !== undefined && { 'http.route': route }),
              'client.address': request.ip,
              'network.protocol.version': request.raw.httpVersion,
              ...rpcAttributes(body),
              [`${PREFIX}.instance`]: gateway.instanceId,
            },
          },
          parentOf(request, body),
        );
        spans.set(request, span);
        return span;
      };
      const arrivals = new WeakMap<FastifyRequest, number>();
      mcp.addHook('onRequest', (request, reply, done) => {
        arrivals.set(request, Date.now());
        gateways.set(request, gateway);
        // Whenever the answer ends (written, or the client gone), whoever answered.
        reply.raw.once('close', () => {
          const span = spans.get(request) ?? start(request, undefined);
          const status = reply.raw.statusCode;
          span.setAttribute('http.response.status_code', status);
          const session = headerValue(request.headers, SESSION_HEADER);
          if (session !== undefined) nameSession(request, span, session);
          if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
          if (!reply.raw.writableFinished) span.setAttribute(`${PREFIX}.aborted`, true);
          span.end();
        });
        done();
      });
      // After the body is read (its _meta may carry the trace context), before the handler: the
      // handler and all it starts run in the span's context.
      mcp.addHook('preHandler', (request, _reply, done) => {
        const span = start(request, request.body);
        // The gateway's span takes the client's place as the parent of the request to the replica:
        // the undici instrumentation sends it, with the client's tracestate, in their stead.
        delete request.raw.headers['traceparent'];
        delete request.raw.headers['tracestate'];
        context.with(trace.setSpan(context.active(), span), done);
      });
    },
    traceId(request) {
      return spans.get(request)?.spanContext().traceId;
    },
    answered(request, answered) {
      const span = spans.get(request);
      if (span === undefined) return;
      if (answered.replica !== undefined && answered.replica !== NO_REPLICA) span.setAttribute(`${PREFIX}.replica`, answered.replica);
      if (answered.session !== undefined) nameSession(request, span, answered.session);
      if (answered.code !== undefined) span.setAttribute(`${PREFIX}.code`, answered.code);
    },
    decided(request, decided) {
      const span = spans.get(request);
      if (span === undefined) return;
      // A decision made again on the way (the journal's end: complete; an owner that could not
      // replay: a new stream) follows the first: the last that is not complete says who served.
      const made = [...(madeDecisions.get(request) ?? []), decided];
      madeDecisions.set(request, made);
      const serving = made.filter((d) => d.decision !== 'complete').at(-1) ?? decided;
      const attributes = {
        decision: serving.decision,
        decisions: made.map((d) => d.decision),
        from: serving.from,
        record_awaited: made.some((d) => d.recordAwaited),
      };
      // Where the stream is held: the other instance's spans carry it as mcp_gateway.instance.
      if (decided.stream !== undefined) span.setAttributes({ [`${PREFIX}.stream.pump`]: decided.stream.pump, [`${PREFIX}.stream.held`]: decided.stream.held });
      // A continuation of a held stream (from the journal, a takeover, the owner's replay) links
      // to the span that held it, on whichever instance, in whichever trace: once per request.
      const holder = decided.from === 'gateway' || decided.holderSpan === undefined ? undefined : fromTraceparent(decided.holderSpan);
      if (holder !== undefined && !made.slice(0, -1).some((d) => d.from !== 'gateway' && d.holderSpan === decided.holderSpan)) {
        span.addLink({ context: holder, attributes: { [`${PREFIX}.link`]: 'holder' } });
      }
      decisions.set(request, attributes);
      span.setAttributes(Object.fromEntries(Object.entries(attributes).map(([key, value]) => [`${PREFIX}.resumption.${key}`, value])));
    },
    resumption(request, outcome, reason) {
      const span = spans.get(request);
      if (span === undefined) return;
      span.setAttributes({ [`${PREFIX}.resumption.outcome`]: outcome, [`${PREFIX}.resumption.reason`]: reason });
      span.addEvent(`${PREFIX}.resumption`, { outcome, reason, ...decisions.get(request) });
    },
    holderSpan() {
      const active = trace.getSpan(context.active())?.spanContext();
      return active === undefined || !isSpanContextValid(active) ? undefined : `00-${active.traceId}-${active.spanId}-${active.traceFlags.toString(16).padStart(2, '0')}`;
    },
    storeSpan: (store, op, call) => within(`store ${op}`, { kind: SpanKind.CLIENT, attributes: { 'db.system.name': store, 'db.operation.name': op } }, call),
    span: (name, call, after) => within(name, { kind: SpanKind.INTERNAL }, call, after),
    flush: () => provider.forceFlush(),
    async shutdown() {
      undici.disable();
      await provider.shutdown();
      context.disable();
      propagation.disable();
    },
  };
}

/**
 * The exporter's endpoint, headers and timeout: tracing.* where set, else the OTEL_EXPORTER_OTLP_*
 * variables as the SDK specification reads them (the signal's own first; the general endpoint
 * with /v1/traces appended; headers as comma-separated key=value, URL-encoded).
 */
export function exporterOptions(config: Config['tracing'], env: Env): { url?: string; headers?: Record<string, string>; timeoutMillis?: number } {
  const general = env['OTEL_EXPORTER_OTLP_ENDPOINT']?.trim();
  const url = config.endpoint ?? (env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT']?.trim() || undefined) ?? (general ? `${general.replace(/\/+$/, '')}/v1/traces` : undefined);
  const listed = env['OTEL_EXPORTER_OTLP_TRACES_HEADERS'] ?? env['OTEL_EXPORTER_OTLP_HEADERS'];
  const headers = config.headers ?? (listed === undefined ? undefined : parseHeaders(listed));
  const timeout = Number(env['OTEL_EXPORTER_OTLP_TRACES_TIMEOUT'] ?? env['OTEL_EXPORTER_OTLP_TIMEOUT']);
  const timeoutMillis = config.timeoutMs ?? (Number.isInteger(timeout) && timeout > 0 ? timeout : undefined);
  return { ...(url !== undefined && { url }), ...(headers !== undefined && { headers }), ...(timeoutMillis !== undefined && { timeoutMillis }) };
}

function parseHeaders(list: string): Record<string, string> {
  const pairs = list.split(',').flatMap((pair) => {
    const at = pair.indexOf('=');
    return at <= 0 ? [] : [[decodeURIComponent(pair.slice(0, at).trim()), decodeURIComponent(pair.slice(at + 1).trim())] as const];
  });
  return Object.fromEntries(pairs);
}

/** The client's trace context: its traceparent header, else (2026-07-28) the request's params._meta, read only. */
function parentOf(request: FastifyRequest, body: unknown): Context {
  if (request.headers['traceparent'] !== undefined) return propagation.extract(ROOT_CONTEXT, request.headers);
  const meta = metaOf(body);
  if (meta !== undefined && typeof meta['traceparent'] === 'string') return propagation.extract(ROOT_CONTEXT, meta);
  return ROOT_CONTEXT;
}

/** A span context from a W3C traceparent (version 00) as holderSpan wrote it; undefined for anything else. */
function fromTraceparent(traceparent: string): SpanContext | undefined {
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(traceparent);
  if (match === null) return undefined;
  const context = { traceId: match[1]!, spanId: match[2]!, traceFlags: Number.parseInt(match[3]!, 16), isRemote: true };
  return isSpanContextValid(context) ? context : undefined;
}

/** The JSON-RPC message of a request body, if it is one (not a batch, not a response). */
function messageOf(body: unknown): Record<string, unknown> | undefined {
  if (!Buffer.isBuffer(body) || body.length === 0 || body[0] !== 0x7b) return undefined;
  try {
    const message: unknown = JSON.parse(body.toString('utf8'));
    return typeof message === 'object' && message !== null && !Array.isArray(message) ? (message as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

function metaOf(body: unknown): Record<string, unknown> | undefined {
  const params = messageOf(body)?.['params'];
  const meta = typeof params === 'object' && params !== null ? (params as Record<string, unknown>)['_meta'] : undefined;
  return typeof meta === 'object' && meta !== null ? (meta as Record<string, unknown>) : undefined;
}

/** The JSON-RPC method and, for tools/call, the tool's name (semantic conventions for MCP). */
function rpcAttributes(body: unknown): Record<string, string> {
  const message = messageOf(body);
  if (message === undefined || typeof message['method'] !== 'string') return {};
  const attributes: Record<string, string> = { 'mcp.method.name': message['method'] };
  const params = message['params'] as Record<string, unknown> | undefined;
  if (message['method'] === 'tools/call' && typeof params?.['name'] === 'string') attributes['gen_ai.tool.name'] = params['name'];
  return attributes;
}

function pathOf(url: string): string {
  const query = url.indexOf('?');
  return query < 0 ? url : url.slice(0, query);
}

/** The sampler: sampleRatio when set, else OTEL_TRACES_SAMPLER(_ARG) as the SDK specification defines them. */
export function sampler(ratio: number | undefined, env: Env): Sampler {
  if (ratio !== undefined) return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) });
  const arg = Number(env['OTEL_TRACES_SAMPLER_ARG'] ?? '1');
  const envRatio = Number.isFinite(arg) && arg >= 0 && arg <= 1 ? arg : 1;
  switch ((env['OTEL_TRACES_SAMPLER'] ?? 'parentbased_always_on').trim().toLowerCase()) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return new TraceIdRatioBasedSampler(envRatio);
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(envRatio) });
    default:
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
  }
}
