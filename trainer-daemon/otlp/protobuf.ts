/**
 * OTLP/protobuf read straight from the wire format into decode.ts's ExportTraceRequest (the shape OTLP/JSON is parsed
 * to), and the receiver's protobuf answer written. One pass over the bytes, no message objects in between: the field
 * numbers are those of opentelemetry-proto's `collector/trace/v1/trace_service.proto`, `trace/v1/trace.proto`,
 * `common/v1/common.proto` and `resource/v1/resource.proto` (stable since OTLP 1.0; fields this daemon does not keep,
 * such as links, trace state, flags and schema URLs, are skipped as unknown fields are).
 *
 * Protobuf's rules as readers apply them: fields in any order; a repeated field may come in pieces; a scalar field
 * given twice, or a oneof member, takes the last; a message field given twice (a span's status, a scope, a resource)
 * merges; unknown fields, groups too, are skipped, as is a known field of another wire type (what a reader of a later
 * schema would see). A length past its message's end, a wire type protobuf does not define, or messages nested deeper
 * than MAX_PROTOBUF_DEPTH is a 400 that says where (an offset), never what the bytes hold (a prompt, a key).
 */
import type { Json } from '../protocol/records';
import type { ExportTraceRequest, OtlpSpan } from './schema';
import { I64, LEN, MAX_PROTOBUF_DEPTH, Reader, tooDeep, VARINT, type WireTypes } from './protobufWire';

export { MAX_PROTOBUF_DEPTH };

/** The known fields' wire types, message by message (Reader#tag skips a known field of another). */
const WIRE = {
  request: { 1: LEN },
  resourceSpans: { 1: LEN, 2: LEN },
  resource: { 1: LEN },
  scopeSpans: { 1: LEN, 2: LEN },
  scope: { 1: LEN, 2: LEN },
  span: { 1: LEN, 2: LEN, 4: LEN, 5: LEN, 6: VARINT, 7: I64, 8: I64, 9: LEN, 11: LEN, 15: LEN },
  event: { 1: I64, 2: LEN, 3: LEN },
  status: { 2: LEN, 3: VARINT },
  keyValue: { 1: LEN, 2: LEN },
  anyValue: { 1: LEN, 2: VARINT, 3: VARINT, 4: I64, 5: LEN, 6: LEN, 7: LEN },
  /** KeyValueList and ArrayValue: their values. */
  list: { 1: LEN },
} as const satisfies Record<string, WireTypes>;

/** A repeated KeyValue field's next pair into `into` (a later duplicate wins; an empty key is left out). */
function keyValue(r: Reader, end: number, depth: number, into: Record<string, Json>): void {
  if (depth > MAX_PROTOBUF_DEPTH) throw tooDeep();
  let key = '';
  let value: Json = null;
  while (r.pos < end) {
    const tag = r.tag(end, WIRE.keyValue);
    const field = tag >>> 3;
    if (field === 1) key = r.key(end);
    else if (field === 2) {
      const stop = r.delimited(end);
      value = anyValue(r, stop, depth + 1);
    } else r.skip(tag, end);
  }
  if (key === '') return;
  // `__proto__` an ordinary property (an assignment would set the object's prototype).
  if (key === '__proto__')
    Object.defineProperty(into, key, { value, enumerable: true, writable: true, configurable: true });
  else into[key] = value;
}

/** A message of repeated KeyValue (KeyValueList) or AnyValue (ArrayValue) at field 1. */
function keyValueList(r: Reader, end: number, depth: number): Record<string, Json> {
  if (depth > MAX_PROTOBUF_DEPTH) throw tooDeep();
  const out: Record<string, Json> = {};
  while (r.pos < end) {
    const tag = r.tag(end, WIRE.list);
    const field = tag >>> 3;
    if (field === 1) {
      const stop = r.delimited(end);
      keyValue(r, stop, depth + 1, out);
    } else r.skip(tag, end);
  }
  return out;
}

function arrayValue(r: Reader, end: number, depth: number): Json[] {
  if (depth > MAX_PROTOBUF_DEPTH) throw tooDeep();
  const out: Json[] = [];
  while (r.pos < end) {
    const tag = r.tag(end, WIRE.list);
    const field = tag >>> 3;
    if (field === 1) {
      const stop = r.delimited(end);
      out.push(anyValue(r, stop, depth + 1));
    } else r.skip(tag, end);
  }
  return out;
}

/** AnyValue as JSON: its member that is set (the last, if several are), null if none; non-finite doubles as text. */
function anyValue(r: Reader, end: number, depth: number): Json {
  if (depth > MAX_PROTOBUF_DEPTH) throw tooDeep();
  let value: Json = null;
  while (r.pos < end) {
    const tag = r.tag(end, WIRE.anyValue);
    switch (tag >>> 3) {
      case 1:
        value = r.string(end);
        break;
      case 2:
        value = r.bool(end);
        break;
      case 3:
        value = r.int64(end);
        break;
      case 4: {
        const d = r.double(end);
        value = Number.isFinite(d) ? d : Number.isNaN(d) ? 'NaN' : d > 0 ? 'Infinity' : '-Infinity';
        break;
      }
      case 5:
        value = arrayValue(r, r.delimited(end), depth + 1);
        break;
      case 6:
        value = keyValueList(r, r.delimited(end), depth + 1);
        break;
      case 7:
        value = r.bytes(end, 'base64');
        break;
      default:
        r.skip(tag, end);
    }
  }
  return value;
}

function event(r: Reader, end: number, depth: number): OtlpSpan['events'][number] {
  r.entry();
  const out = { name: '', timeUnixNano: '0', attributes: {} as Record<string, Json> };
  while (r.pos < end) {
    const tag = r.tag(end, WIRE.event);
    const field = tag >>> 3;
    if (field === 1) out.timeUnixNano = r.fixed64(end);
    else if (field === 2) out.name = r.string(end);
    else if (field === 3) keyValue(r, r.delimited(end), depth + 1, out.attributes);
    else r.skip(tag, end);
  }
  return out;
}

/** A Status into `out` (a span's status given twice merges). */
function status(r: Reader, end: number, out: OtlpSpan['status']): void {
  while (r.pos < end) {
    const tag = r.tag(end, WIRE.status);
    const field = tag >>> 3;
    if (field === 2) out.message = r.string(end);
    else if (field === 3) out.code = r.uint32(end) | 0;
    else r.skip(tag, end);
  }
}

function span(r: Reader, end: number, depth: number): OtlpSpan {
  r.entry();
  const out: OtlpSpan = {
    traceId: '',
    spanId: '',
    parentSpanId: '',
    name: '',
    kind: 0,
    startTimeUnixNano: '0',
    endTimeUnixNano: '0',
    attributes: {},
    events: [],
    status: { code: 0, message: '' },
  };
  while (r.pos < end) {
    const tag = r.tag(end, WIRE.span);
    switch (tag >>> 3) {
      case 1:
        out.traceId = r.bytes(end, 'hex');
        break;
      case 2:
        out.spanId = r.bytes(end, 'hex');
        break;
      case 4:
        out.parentSpanId = r.bytes(end, 'hex');
        break;
      case 5:
        out.name = r.string(end);
        break;
      case 6:
        out.kind = r.uint32(end) | 0;
        break;
      case 7:
        out.startTimeUnixNano = r.fixed64(end);
        break;
      case 8:
        out.endTimeUnixNano = r.fixed64(end);
        break;
      case 9:
        keyValue(r, r.delimited(end), depth + 1, out.attributes);
        break;
      case 11:
        out.events.push(event(r, r.delimited(end), depth + 1));
        break;
      case 15:
        status(r, r.delimited(end), out.status);
        break;
      default:
        r.skip(tag, end);
    }
  }
  return out;
}

type ScopeSpans = ExportTraceRequest['resourceSpans'][number]['scopeSpans'][number];

function scopeSpans(r: Reader, end: number, depth: number): ScopeSpans {
  r.entry();
  const out: ScopeSpans = { scope: { name: '', version: '' }, spans: [], malformed: [] };
  while (r.pos < end) {
    const tag = r.tag(end, WIRE.scopeSpans);
    const field = tag >>> 3;
    if (field === 1) {
      // InstrumentationScope: its name and version (a scope given twice merges).
      const stop = r.delimited(end);
      while (r.pos < stop) {
        const inner = r.tag(stop, WIRE.scope);
        if (inner >>> 3 === 1) out.scope.name = r.string(stop);
        else if (inner >>> 3 === 2) out.scope.version = r.string(stop);
        else r.skip(inner, stop);
      }
    } else if (field === 2) out.spans.push(span(r, r.delimited(end), depth + 1));
    else r.skip(tag, end);
  }
  return out;
}

type ResourceSpans = ExportTraceRequest['resourceSpans'][number];

function resourceSpans(r: Reader, end: number, depth: number): ResourceSpans {
  r.entry();
  const out: ResourceSpans = { resourceAttributes: {}, scopeSpans: [] };
  while (r.pos < end) {
    const tag = r.tag(end, WIRE.resourceSpans);
    const field = tag >>> 3;
    if (field === 1) {
      // Resource: its attributes; a second Resource adds to the first's, as protobuf merges a message given twice.
      const stop = r.delimited(end);
      while (r.pos < stop) {
        const inner = r.tag(stop, WIRE.resource);
        if (inner >>> 3 === 1) keyValue(r, r.delimited(stop), depth + 2, out.resourceAttributes);
        else r.skip(inner, stop);
      }
    } else if (field === 2) out.scopeSpans.push(scopeSpans(r, r.delimited(end), depth + 1));
    else r.skip(tag, end);
  }
  return out;
}

/**
 * An ExportTraceServiceRequest's bytes as ExportTraceRequest. Throws InvalidInputError for bytes that are not one, and
 * PayloadTooLargeError for more than `maxEntries` groups, spans and events (protobufWire.ts#decodeBudget).
 */
export function readTraceRequest(bytes: Buffer, maxEntries = Infinity): ExportTraceRequest {
  const r = new Reader(bytes, maxEntries);
  const end = bytes.length;
  const request: ExportTraceRequest = { resourceSpans: [] };
  while (r.pos < end) {
    const tag = r.tag(end, WIRE.request);
    const field = tag >>> 3;
    if (field === 1) request.resourceSpans.push(resourceSpans(r, r.delimited(end), 1));
    else r.skip(tag, end);
  }
  return request;
}

/**
 * The spans an ExportTraceServiceRequest holds, counted by skipping over them (not read): for the span limit, checked
 * before the costly part. Throws InvalidInputError for bytes it cannot walk, and PayloadTooLargeError once its spans
 * and their resource and scope groups are more than `maxEntries` (readTraceRequest counts their events too).
 */
export function countTraceSpans(bytes: Buffer, maxEntries = Infinity): number {
  const r = new Reader(bytes, maxEntries);
  let count = 0;
  const inEach = (end: number, wire: WireTypes, field: number, then: (stop: number) => void): void => {
    while (r.pos < end) {
      const tag = r.tag(end, wire);
      if (tag >>> 3 === field) {
        r.entry();
        then(r.delimited(end));
      } else r.skip(tag, end);
    }
  };
  inEach(bytes.length, WIRE.request, 1, (resource) =>
    inEach(resource, WIRE.resourceSpans, 2, (scope) =>
      inEach(scope, WIRE.scopeSpans, 2, (spanEnd) => {
        count += 1;
        r.pos = spanEnd;
      }),
    ),
  );
  return count;
}

/** Appends a varint (at most 2^53). */
function pushVarint(out: number[], value: number): void {
  while (value >= 0x80) {
    out.push((value % 0x80) | 0x80);
    value = Math.floor(value / 0x80);
  }
  out.push(value);
}

/**
 * ExportTraceServiceResponse { ExportTracePartialSuccess partial_success = 1 } with { int64 rejected_spans = 1; string
 * error_message = 2 }; empty when nothing was rejected (all accepted).
 */
export function writeExportResponse(rejected: number, message: string): Buffer {
  if (rejected <= 0) return Buffer.alloc(0);
  const text = Buffer.from(message, 'utf8');
  const inner: number[] = [(1 << 3) | VARINT];
  pushVarint(inner, rejected);
  inner.push((2 << 3) | LEN);
  pushVarint(inner, text.length);
  const head: number[] = [(1 << 3) | LEN];
  pushVarint(head, inner.length + text.length);
  return Buffer.concat([Buffer.from(head), Buffer.from(inner), text]);
}
