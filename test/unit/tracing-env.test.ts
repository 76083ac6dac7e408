/**
 * How traces are turned on and set up from tracing.* and the OTEL_* variables (tracing/index.ts,
 * tracing/sdk.ts), as the OpenTelemetry SDK specification reads the variables.
 */
import t from 'tap';
import { startTracing, tracingWanted } from '../../src/tracing/index.js';
import { exporterOptions, sampler } from '../../src/tracing/sdk.js';

const OFF = { enabled: false } as const;

t.test('on with tracing.enabled, or OTEL_TRACES_EXPORTER=otlp with an OTLP endpoint', async (t) => {
  t.equal(tracingWanted(OFF, {}), false, 'off by default');
  t.equal(tracingWanted({ enabled: true }, {}), true);
  t.equal(tracingWanted(OFF, { OTEL_TRACES_EXPORTER: 'otlp' }), false, 'an exporter without an endpoint is not enough');
  t.equal(tracingWanted(OFF, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }), false, 'nor an endpoint alone');
  t.equal(tracingWanted(OFF, { OTEL_TRACES_EXPORTER: 'console, otlp', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }), true);
  t.equal(tracingWanted(OFF, { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' }), true);
  t.equal(tracingWanted(OFF, { OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }), false, "compose's default");
  t.equal(tracingWanted(OFF, { OTEL_SDK_DISABLED: 'true', OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }), false);
  t.equal(await startTracing(OFF, {}), undefined, 'off: no traces');
});

t.test('a protocol other than http/protobuf and http/json is refused at start', async (t) => {
  await t.rejects(startTracing({ enabled: true }, { OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }), /grpc is not supported/);
});

t.test("the exporter's endpoint, headers and timeout: the keys first, then the variables", async (t) => {
  t.same(exporterOptions(OFF, {}), {}, "nothing set: the exporter's defaults");
  t.same(exporterOptions(OFF, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318/', OTEL_EXPORTER_OTLP_HEADERS: 'a=1, b%20c=x%3Dy', OTEL_EXPORTER_OTLP_TIMEOUT: '2500' }), {
    url: 'http://c:4318/v1/traces',
    headers: { a: '1', 'b c': 'x=y' },
    timeoutMillis: 2500,
  });
  t.same(
    exporterOptions(OFF, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://t:4318/custom', OTEL_EXPORTER_OTLP_HEADERS: 'a=1', OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'b=2' }),
    { url: 'http://t:4318/custom', headers: { b: '2' } },
    "the signal's own variables first, its endpoint as it is",
  );
  t.same(exporterOptions({ enabled: true, endpoint: 'http://k:4318/v1/traces', headers: { k: 'v' }, timeoutMs: 700 }, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_HEADERS: 'a=1', OTEL_EXPORTER_OTLP_TIMEOUT: '2500' }), {
    url: 'http://k:4318/v1/traces',
    headers: { k: 'v' },
    timeoutMillis: 700,
  });
});

t.test('the sampler: tracing.sampleRatio, else OTEL_TRACES_SAMPLER(_ARG)', async (t) => {
  t.match(String(sampler(undefined, {})), /^ParentBased\{root=AlwaysOnSampler/, 'every trace, a parent followed');
  t.match(String(sampler(0.1, { OTEL_TRACES_SAMPLER: 'always_off' })), /^ParentBased\{root=TraceIdRatioBased\{0.1\}/, 'the key wins');
  t.equal(String(sampler(undefined, { OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.25' })), 'TraceIdRatioBased{0.25}');
  t.match(String(sampler(undefined, { OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.5' })), /^ParentBased\{root=TraceIdRatioBased\{0.5\}/);
  t.equal(String(sampler(undefined, { OTEL_TRACES_SAMPLER: 'always_off' })), 'AlwaysOffSampler');
  t.match(String(sampler(undefined, { OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '7' })), 'TraceIdRatioBased{1}', 'an argument out of range: every trace');
});
