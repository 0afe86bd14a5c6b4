/**
 * The OTLP trace export's one internal shape (ExportTraceRequest), and the zod schemas that parse an OTLP/JSON body
 * into it (64-bit integers as strings, numbers or {low, high}; enums as numbers or names): lowercase hex ids,
 * nanosecond times as decimal strings, attributes as JSON values. `decode.ts` parses a JSON body with them;
 * `protobuf.ts` reads a protobuf body into the same shape; `normalize.ts` reads it.
 */
import { z } from 'zod';
import type { Json } from '../protocol/records';
import { describeIssues } from '../protocol/validation';

// ---- Field codecs: each accepts the forms OTLP/JSON allows a value. ----

/**
 * A 64-bit integer as `{low, high}`: what @opentelemetry/exporter-trace-otlp-http 0.44.0 wrote for times
 * (open-telemetry/opentelemetry-js#4216), so that an agent pinned to that release keeps its spans.
 */
const LongBits = z.object({ low: z.number().int(), high: z.number().int() });
const bitsToBigInt = (bits: { low: number; high: number }): bigint =>
  (BigInt(bits.high >>> 0) << 32n) | BigInt(bits.low >>> 0);

/**
 * A JSON number for a 64-bit field. OTLP/JSON allows them (most exporters send strings); JSON.parse
 * has already rounded one past 2^53, so it is accepted as the integer it now is (zod's `.int()` would
 * refuse it as unsafe).
 */
const integralNumber = z.number().refine(Number.isInteger, 'must be an integer');

/** uint64/fixed64 (times): decimal string, no precision lost; proto3 default `"0"`. */
const UInt64 = z
  .union([
    LongBits,
    z.string().regex(/^\d+$/, 'must be a decimal integer'),
    integralNumber.refine((n) => n >= 0, 'must not be negative'),
  ])
  .nullish()
  .transform((value): string => {
    if (value === null || value === undefined) return '0';
    if (typeof value === 'object') return BigInt.asUintN(64, bitsToBigInt(value)).toString();
    return BigInt(value).toString();
  });

/** int64 attribute values: a JSON number when it is exact, else a decimal string. */
const Int64 = z
  .union([LongBits, z.string().regex(/^-?\d+$/, 'must be a decimal integer'), integralNumber])
  .transform((value): number | string => {
    const big = typeof value === 'object' ? BigInt.asIntN(64, bitsToBigInt(value)) : BigInt(value);
    const asNumber = Number(big);
    return Number.isSafeInteger(asNumber) ? asNumber : big.toString();
  });

/** doubles: JSON has no NaN/Infinity, so those become their proto3-JSON string names. */
const Double = z
  .union([z.custom<number>((value) => typeof value === 'number'), z.string()])
  .transform((value): number | string => {
    const parsed = typeof value === 'number' ? value : Number(value);
    if (Number.isFinite(parsed)) return parsed;
    return Number.isNaN(parsed) ? 'NaN' : parsed > 0 ? 'Infinity' : '-Infinity';
  });

/** Trace/span ids: hex strings in OTLP/JSON (unlike proto3 JSON's base64). Validity is checked per span later. */
const Id = z
  .string()
  .transform((hex) => hex.toLowerCase())
  .nullish()
  .transform((id) => id ?? '');

/** Enum fields: integers on the wire; names accepted too, leniently. Unknown names read as 0 (unspecified). */
const enumOf = (names: readonly string[]) =>
  z
    .union([z.number().int(), z.string()])
    .nullish()
    .transform((value) => (typeof value === 'string' ? Math.max(0, names.indexOf(value)) : (value ?? 0)));
const SPAN_KIND_NAMES = [
  'SPAN_KIND_UNSPECIFIED',
  'SPAN_KIND_INTERNAL',
  'SPAN_KIND_SERVER',
  'SPAN_KIND_CLIENT',
  'SPAN_KIND_PRODUCER',
  'SPAN_KIND_CONSUMER',
];
const STATUS_CODE_NAMES = ['STATUS_CODE_UNSET', 'STATUS_CODE_OK', 'STATUS_CODE_ERROR'];

const text = z
  .string()
  .nullish()
  .transform((value) => value ?? '');

// ---- AnyValue and attributes ----

type Attributes = Record<string, Json>;

/** AnyValue → JSON: the one member that is set, or null when none is. */
const AnyValue: z.ZodType<Json> = z.lazy(() =>
  z
    .object({
      stringValue: z.string().nullish(),
      boolValue: z.boolean().nullish(),
      intValue: Int64.nullish(),
      doubleValue: Double.nullish(),
      arrayValue: z.object({ values: z.array(AnyValue).nullish() }).nullish(),
      kvlistValue: z.object({ values: KeyValueList }).nullish(),
      /** base64, as proto3 JSON writes bytes. */
      bytesValue: z.string().nullish(),
    })
    .transform(
      (v): Json =>
        v.stringValue ??
        v.boolValue ??
        v.intValue ??
        v.doubleValue ??
        arrayOrNull(v.arrayValue) ??
        v.kvlistValue?.values ??
        v.bytesValue ??
        null,
    ),
);
const arrayOrNull = (array: { values?: Json[] | null } | null | undefined): Json[] | null =>
  array ? (array.values ?? []) : null;

/** KeyValue list → object. Object.fromEntries keeps a `__proto__` key an ordinary property; a later duplicate wins. */
const KeyValueList: z.ZodType<Attributes> = z.lazy(() =>
  z
    .array(z.object({ key: text, value: AnyValue.nullish() }))
    .nullish()
    .transform((pairs) =>
      Object.fromEntries((pairs ?? []).filter((kv) => kv.key !== '').map((kv) => [kv.key, kv.value ?? null])),
    ),
);

// ---- Spans ----

const OtlpEvent = z.object({ name: text, timeUnixNano: UInt64, attributes: KeyValueList });

export const OtlpSpan = z.object({
  traceId: Id,
  spanId: Id,
  /** '' for a root span. */
  parentSpanId: Id,
  name: text,
  /** OTLP SpanKind: 0 unspecified, 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: enumOf(SPAN_KIND_NAMES),
  /** Nanoseconds since the epoch, as a decimal string; '0' when absent. */
  startTimeUnixNano: UInt64,
  endTimeUnixNano: UInt64,
  attributes: KeyValueList,
  events: z
    .array(OtlpEvent)
    .nullish()
    .transform((events) => events ?? []),
  status: z
    .object({ code: enumOf(STATUS_CODE_NAMES), message: text })
    .nullish()
    .transform((status) => status ?? { code: 0, message: '' }),
});
export type OtlpSpan = z.output<typeof OtlpSpan>;

/** A span the decoder could not read at all (wrong JSON types); the rest of its batch goes on. */
export interface MalformedSpan {
  spanId: string | null;
  error: string;
}

/** Each span is parsed on its own so that one bad span never fails the batch (OTLP partial success). */
function splitSpans(raw: readonly unknown[]): { spans: OtlpSpan[]; malformed: MalformedSpan[] } {
  const spans: OtlpSpan[] = [];
  const malformed: MalformedSpan[] = [];
  raw.forEach((candidate, index) => {
    const parsed = OtlpSpan.safeParse(candidate);
    if (parsed.success) spans.push(parsed.data);
    else malformed.push({ spanId: rawSpanId(candidate), error: describeIssues(parsed.error, `span[${index}]`) });
  });
  return { spans, malformed };
}

function rawSpanId(candidate: unknown): string | null {
  const id = Id.safeParse((candidate as { spanId?: unknown } | null)?.spanId);
  return id.success && /^[0-9a-f]{16}$/.test(id.data) ? id.data : null;
}

const OtlpScopeSpans = z
  .object({
    scope: z.object({ name: text, version: text }).nullish(),
    spans: z.array(z.unknown()).nullish(),
  })
  .transform(({ scope, spans }) => ({ scope: scope ?? { name: '', version: '' }, ...splitSpans(spans ?? []) }));

const OtlpResourceSpans = z
  .object({
    resource: z.object({ attributes: KeyValueList }).nullish(),
    scopeSpans: z.array(OtlpScopeSpans).nullish(),
  })
  .transform(({ resource, scopeSpans }) => ({
    resourceAttributes: resource?.attributes ?? {},
    scopeSpans: scopeSpans ?? [],
  }));

/** An ExportTraceServiceRequest, from either encoding, in the daemon's one internal shape. */
export const ExportTraceRequest = z
  .object({ resourceSpans: z.array(OtlpResourceSpans).nullish() })
  .transform(({ resourceSpans }) => ({ resourceSpans: resourceSpans ?? [] }));
export type ExportTraceRequest = z.output<typeof ExportTraceRequest>;
