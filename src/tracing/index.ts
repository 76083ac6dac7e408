/**
 * OpenTelemetry traces, off by default. What the rest of the gateway sees of them: this interface
 * and whether they are wanted. The SDK (tracing/sdk.ts) is imported only when they are: with
 * traces off nothing of OpenTelemetry is loaded and no hook is registered.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Config, ReplicaConfig } from '../config/schema.js';
import type { Logger, SessionFingerprint } from '../logger.js';

export interface TracedGateway {
  /** This instance's name among those sharing the store, on each of its server spans. */
  readonly instanceId: string;
  /** The replicas as configured now, to name the one a client span went to. */
  readonly replicas: () => readonly ReplicaConfig[];
  /** How a session is named on its spans: the keyed fingerprint the logs write. */
  readonly session: SessionFingerprint;
}

/** One process's traces: one SDK, shared by every gateway built in the process. */
export interface Tracing {
  /** A server span per request on `mcp`, parent of what the request does. */
  instrument(mcp: FastifyInstance, gateway: TracedGateway): void;
  /** The trace id of a request's span, for its log line. */
  traceId(request: FastifyRequest): string | undefined;
  /** The answer's status line left: the replica that answered, the session (named by its fingerprint), the gateway's own code. */
  answered(request: FastifyRequest, answered: { readonly replica?: string; readonly session?: string; readonly code?: string }): void;
  /** What a resumption decided (resume.ts), each time it decided: on the request's span, and on the event of its outcome. */
  decided(request: FastifyRequest, decided: Decided): void;
  /** The outcome of a request carrying Last-Event-ID, with what was decided, as an event on its span. */
  resumption(request: FastifyRequest, outcome: string, reason: string): void;
  /** The trace context of the active span as a W3C traceparent (that of a stream, kept on its record when it is held); undefined outside any. */
  holderSpan(): string | undefined;
  /** A span around one store operation, under the request (or stream) that made it. */
  storeSpan<T>(store: string, op: string, call: () => Promise<T>): Promise<T>;
  /** A span of the gateway's own around `call`, under the request that made it; `after` gives its attributes (under mcp_gateway.) from the result. */
  span<T>(name: string, call: () => Promise<T>, after?: (result: T) => Readonly<Record<string, string | number | boolean>>): Promise<T>;
  /** Exports what is buffered. */
  flush(): Promise<void>;
  shutdown(): Promise<void>;
}

/** A resumption's decision (decide.ts's kind), where the client's events come from, and whether it waited for a record on its way. */
export interface Decided {
  readonly decision: string;
  readonly from: 'journal' | 'owner' | 'gateway';
  readonly recordAwaited: boolean;
  /** The instance whose pump reads the stream, as its lease names it (J3), and whether it holds it with no client (J2). */
  readonly stream?: { readonly pump: string; readonly held: boolean };
  /** The span of the stream where it was held (its record's holderSpan): a decision that continues the stream links to it. */
  readonly holderSpan?: string;
}

export type Env = Readonly<Record<string, string | undefined>>;

/**
 * tracing.enabled, or the OpenTelemetry SDK's own switch: OTEL_TRACES_EXPORTER naming otlp with an
 * OTLP endpoint set. OTEL_SDK_DISABLED=true turns off what the variables turned on.
 */
export function tracingWanted(config: Config['tracing'], env: Env): boolean {
  if (config.enabled) return true;
  if (env['OTEL_SDK_DISABLED']?.trim().toLowerCase() === 'true') return false;
  const exporters = (env['OTEL_TRACES_EXPORTER'] ?? '').split(',').map((e) => e.trim().toLowerCase());
  return exporters.includes('otlp') && Boolean(env['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'] || env['OTEL_EXPORTER_OTLP_ENDPOINT']);
}

/** The process's traces, or undefined when they are off. */
export async function startTracing(config: Config['tracing'], env: Env = process.env): Promise<Tracing | undefined> {
  if (!tracingWanted(config, env)) return undefined;
  const { createTracing } = await import('./sdk.js');
  return createTracing(config, env);
}

/** Exports the last spans, once the gateway has closed; a collector that does not answer does not fail the stop. */
export async function stopTracing(tracing: Tracing | undefined, logger: Logger): Promise<void> {
  await tracing?.shutdown().catch((err: unknown) => logger.warn({ err }, 'the last spans could not be exported'));
}
