/**
 * An OTLP/HTTP traces endpoint on loopback: what the gateway exports, as a collector receives it,
 * decoded into spans from either encoding (http/json, or http/protobuf read field by field as the
 * OTLP .proto numbers them).
 */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { Teardown } from './gateway.js';
import { listenOnLoopback } from './http.js';

export interface ReceivedSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  /** OTLP's SpanKind: 2 server, 3 client. */
  readonly kind: number;
  readonly attributes: Readonly<Record<string, string | number | boolean>>;
  readonly events: readonly { readonly name: string; readonly attributes: Readonly<Record<string, string | number | boolean>> }[];
  readonly links: readonly { readonly traceId: string; readonly spanId: string }[];
  /** service.name and the other resource attributes of the export it came in. */
  readonly resource: Readonly<Record<string, string | number | boolean>>;
}

/** OTLP's SpanKind numbers. */
export const SERVER = 2;
export const CLIENT = 3;

/** Every value of a span's attributes and of its events' attributes, as text: where a secret must not be. */
export const attributeValues = (span: ReceivedSpan): string[] => [...Object.values(span.attributes), ...span.events.flatMap((e) => Object.values(e.attributes))].map(String);

export interface ReceivedExport {
  readonly path: string;
  readonly contentType: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

export interface OtlpReceiver {
  /** e.g. http://127.0.0.1:41234 (exports go to /v1/traces under it). */
  readonly origin: string;
  readonly spans: ReceivedSpan[];
  readonly exports: ReceivedExport[];
}

/** A value of OTLP's JSON encoding, as the receiver reads it. */
interface JsonValue {
  stringValue?: string;
  intValue?: number | string;
  boolValue?: boolean;
  doubleValue?: number;
  arrayValue?: { values?: JsonValue[] };
}

interface JsonAttribute {
  key: string;
  value: JsonValue;
}

interface JsonSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: JsonAttribute[];
  events?: { name: string; attributes?: JsonAttribute[] }[];
  links?: { traceId: string; spanId: string }[];
}

interface JsonRequest {
  resourceSpans: { resource?: { attributes?: JsonAttribute[] }; scopeSpans: { spans: JsonSpan[] }[] }[];
}

type Attributes = Record<string, string | number | boolean>;

/** A value; an array as its items joined by commas. */
const jsonValue = (value: JsonValue): string | number | boolean =>
  value.arrayValue !== undefined
    ? (value.arrayValue.values ?? []).map(jsonValue).join(',')
    : (value.stringValue ?? (value.intValue !== undefined ? Number(value.intValue) : (value.boolValue ?? value.doubleValue ?? '')));

const jsonAttributes = (list: readonly JsonAttribute[] | undefined): Attributes => Object.fromEntries((list ?? []).map(({ key, value }) => [key, jsonValue(value)]));

function fromJson(request: JsonRequest): ReceivedSpan[] {
  return request.resourceSpans.flatMap((resourceSpans) => {
    const resource = jsonAttributes(resourceSpans.resource?.attributes);
    return resourceSpans.scopeSpans.flatMap((scope) =>
      scope.spans.map((span) => ({
        traceId: span.traceId,
        spanId: span.spanId,
        parentSpanId: span.parentSpanId ?? '',
        name: span.name,
        kind: span.kind,
        attributes: jsonAttributes(span.attributes),
        events: (span.events ?? []).map((e) => ({ name: e.name, attributes: jsonAttributes(e.attributes) })),
        links: (span.links ?? []).map((l) => ({ traceId: l.traceId, spanId: l.spanId })),
        resource,
      })),
    );
  });
}

/** One message's fields by number, as the protobuf wire format carries them: varints as bigint, the rest as bytes. */
type Fields = Map<number, (bigint | Buffer)[]>;

function fieldsOf(bytes: Buffer): Fields {
  const fields: Fields = new Map();
  let at = 0;
  const varint = (): bigint => {
    let value = 0n;
    for (let shift = 0n; ; shift += 7n) {
      const byte = bytes[at++]!;
      value |= BigInt(byte & 0x7f) << shift;
      if (byte < 0x80) return value;
    }
  };
  while (at < bytes.length) {
    const tag = Number(varint());
    const [field, wire] = [tag >>> 3, tag & 7];
    let value: bigint | Buffer;
    if (wire === 0) value = varint();
    else if (wire === 1 || wire === 5) {
      const size = wire === 1 ? 8 : 4;
      value = bytes.subarray(at, at + size);
      at += size;
    } else if (wire === 2) {
      const size = Number(varint());
      value = bytes.subarray(at, at + size);
      at += size;
    } else throw new Error(`protobuf wire type ${wire} is not OTLP's`);
    fields.set(field, [...(fields.get(field) ?? []), value]);
  }
  return fields;
}

const messages = (fields: Fields, field: number): Fields[] => (fields.get(field) ?? []).map((v) => fieldsOf(v as Buffer));
const bytesOf = (fields: Fields, field: number): Buffer => (fields.get(field)?.[0] as Buffer | undefined) ?? Buffer.alloc(0);
const textOf = (fields: Fields, field: number): string => bytesOf(fields, field).toString('utf8');
const numberOf = (fields: Fields, field: number): number => Number((fields.get(field)?.[0] as bigint | undefined) ?? 0n);

/** AnyValue: 1 string, 2 bool, 3 int, 4 double, 5 ArrayValue (1 values: its items joined by commas). */
function protobufValue(value: Fields): string | number | boolean {
  if (value.has(1)) return textOf(value, 1);
  if (value.has(2)) return numberOf(value, 2) === 1;
  if (value.has(3)) return Number(BigInt.asIntN(64, value.get(3)![0] as bigint));
  if (value.has(4)) return bytesOf(value, 4).readDoubleLE(0);
  if (value.has(5)) return messages(messages(value, 5)[0]!, 1).map(protobufValue).join(',');
  return '';
}

/** KeyValue: 1 key, 2 AnyValue. */
const protobufAttributes = (list: Fields[]): Attributes => Object.fromEntries(list.map((kv) => [textOf(kv, 1), protobufValue(messages(kv, 2)[0] ?? new Map())]));

/**
 * ExportTraceServiceRequest: 1 ResourceSpans (1 Resource: 1 attributes; 2 ScopeSpans: 2 Span).
 * Span: 1 trace_id, 2 span_id, 4 parent_span_id, 5 name, 6 kind, 9 attributes, 11 events
 * (2 name, 3 attributes), 13 links (1 trace_id, 2 span_id).
 */
function fromProtobuf(body: Buffer): ReceivedSpan[] {
  const hex = (fields: Fields, field: number) => bytesOf(fields, field).toString('hex');
  return messages(fieldsOf(body), 1).flatMap((resourceSpans) => {
    const resource = protobufAttributes(messages(messages(resourceSpans, 1)[0] ?? new Map(), 1));
    return messages(resourceSpans, 2).flatMap((scope) =>
      messages(scope, 2).map((span) => ({
        traceId: hex(span, 1),
        spanId: hex(span, 2),
        parentSpanId: hex(span, 4),
        name: textOf(span, 5),
        kind: numberOf(span, 6),
        attributes: protobufAttributes(messages(span, 9)),
        events: messages(span, 11).map((e) => ({ name: textOf(e, 2), attributes: protobufAttributes(messages(e, 3)) })),
        links: messages(span, 13).map((l) => ({ traceId: hex(l, 1), spanId: hex(l, 2) })),
        resource,
      })),
    );
  });
}

export async function startOtlpReceiver(t: Teardown): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const exports: ReceivedExport[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const contentType = req.headers['content-type'] ?? '';
      exports.push({ path: req.url ?? '', contentType, headers: req.headers, body });
      const json = contentType.startsWith('application/json');
      spans.push(...(json ? fromJson(JSON.parse(body.toString('utf8')) as JsonRequest) : fromProtobuf(body)));
      res.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf' });
      res.end(json ? '{}' : '');
    });
  });
  const port = await listenOnLoopback(t, server);
  return { origin: `http://127.0.0.1:${port}`, spans, exports };
}
