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
import { InvalidInputError } from '../protocol/errors';
import type { ExportTraceRequest, OtlpSpan } from './schema';

/**
 * Messages nested deeper than this are refused, as OTLP/JSON deeper than 256 levels is (decode.ts). A value inside an
 * attribute's value is two or three messages further down (AnyValue, ArrayValue; AnyValue, KeyValueList, KeyValue);
 * the store keeps 64 levels of values.
 */
export const MAX_PROTOBUF_DEPTH = 256;

const VARINT = 0;
const I64 = 1;
const LEN = 2;
const START_GROUP = 3;
const END_GROUP = 4;
const I32 = 5;

function invalid(what: string): InvalidInputError {
  return new InvalidInputError(`OTLP protobuf body is not a valid ExportTraceServiceRequest (${what})`);
}

/**
 * Buffer's own decoders without toString's argument checks (~40% of reading a span): the methods protobuf readers on
 * Node (protobufjs) have called since Node 0.x. Not documented API: where a Node lacks them, toString does the same.
 */
interface Slices {
  utf8Slice(start: number, end: number): string;
  hexSlice(start: number, end: number): string;
  base64Slice(start: number, end: number): string;
}
const BUFFER_SLICES = (['utf8Slice', 'hexSlice', 'base64Slice'] as const).every(
  (name) => typeof (Buffer.prototype as unknown as Record<string, unknown>)[name] === 'function',
);
function slicesOf(buf: Buffer): Slices {
  if (BUFFER_SLICES) return buf as unknown as Slices;
  return {
    utf8Slice: (start, end) => buf.toString('utf8', start, end),
    hexSlice: (start, end) => buf.toString('hex', start, end),
    base64Slice: (start, end) => buf.toString('base64', start, end),
  };
}

/** Attribute keys decoded lately, by a hash of their bytes (Reader#key): for the thread's life, a few KiB. */
const KEY_CACHE_SLOTS = 1024;
const MAX_CACHED_KEY = 64;
const KEY_CACHE = {
  bytes: new Array<Uint8Array | undefined>(KEY_CACHE_SLOTS).fill(undefined),
  text: new Array<string | undefined>(KEY_CACHE_SLOTS).fill(undefined),
};

/** The bytes and where reading is: one per body. */
class Reader {
  pos = 0;
  private readonly slices: Slices;
  constructor(readonly buf: Buffer) {
    this.slices = slicesOf(buf);
  }

  /** A varint's low 32 bits, unsigned (a tag, a length, an enum's bits, a count). */
  uint32(end: number): number {
    const buf = this.buf;
    let pos = this.pos;
    let value = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      if (pos >= end) throw outOfRange(pos, 1, end);
      const byte = buf[pos++]!;
      value |= (byte & 0x7f) << shift;
      if (byte < 0x80) {
        this.pos = pos;
        return value >>> 0;
      }
    }
    // Bits past 32 (a negative enum is ten bytes): read over, kept out.
    for (let i = 5; i < 10; i += 1) {
      if (pos >= end) throw outOfRange(pos, 1, end);
      if (buf[pos++]! < 0x80) {
        this.pos = pos;
        return value >>> 0;
      }
    }
    throw invalid(`varint longer than 10 bytes at offset ${pos}`);
  }

  /** An int64 varint as JSON: a number where it is a safe integer, else its decimal string (exact). */
  int64(end: number): number | string {
    const buf = this.buf;
    let pos = this.pos;
    let low = 0;
    let high = 0;
    let byte = 0;
    let i = 0;
    for (; i < 4; i += 1) {
      if (pos >= end) throw outOfRange(pos, 1, end);
      byte = buf[pos++]!;
      low |= (byte & 0x7f) << (i * 7);
      if (byte < 0x80) break;
    }
    if (byte >= 0x80) {
      // The fifth byte holds bits 28–34: four of the low word, three of the high.
      if (pos >= end) throw outOfRange(pos, 1, end);
      byte = buf[pos++]!;
      low |= (byte & 0x7f) << 28;
      high = (byte & 0x7f) >> 4;
      for (i = 0; byte >= 0x80 && i < 5; i += 1) {
        if (pos >= end) throw outOfRange(pos, 1, end);
        byte = buf[pos++]!;
        high |= (byte & 0x7f) << (i * 7 + 3);
      }
      if (byte >= 0x80) throw invalid(`varint longer than 10 bytes at offset ${pos}`);
    }
    this.pos = pos;
    return int64Json(low >>> 0, high | 0);
  }

  /** A fixed64 (times): its decimal string, exact. */
  fixed64(end: number): string {
    const pos = this.pos;
    if (pos + 8 > end) throw outOfRange(pos, 8, end);
    this.pos = pos + 8;
    const low = this.buf.readUInt32LE(pos);
    const high = this.buf.readUInt32LE(pos + 4);
    // Below 2^53 a double holds it exactly; a time now (~1.8e18 ns) is past that.
    if (high < 0x200000) return String(high * 0x100000000 + low);
    return ((BigInt(high) << 32n) | BigInt(low)).toString();
  }

  double(end: number): number {
    const pos = this.pos;
    if (pos + 8 > end) throw outOfRange(pos, 8, end);
    this.pos = pos + 8;
    return this.buf.readDoubleLE(pos);
  }

  /** A length-delimited field's end, checked against its message's. */
  delimited(end: number): number {
    const length = this.uint32(end);
    if (length > end - this.pos) throw outOfRange(this.pos, length, end);
    return this.pos + length;
  }

  string(end: number): string {
    const stop = this.delimited(end);
    const text = stop === this.pos ? '' : this.slices.utf8Slice(this.pos, stop);
    this.pos = stop;
    return text;
  }

  /**
   * An attribute's key: the few keys an exporter repeats in every span are decoded once (KEY_CACHE), so each is the
   * same string, which V8 then need not look up again as it becomes a property name.
   */
  key(end: number): string {
    const stop = this.delimited(end);
    const start = this.pos;
    const length = stop - start;
    this.pos = stop;
    if (length === 0) return '';
    const buf = this.buf;
    if (length > MAX_CACHED_KEY) return this.slices.utf8Slice(start, stop);
    let hash = length;
    for (let i = start; i < stop; i += 1) hash = (Math.imul(hash, 31) + buf[i]!) | 0;
    const slot = hash & (KEY_CACHE_SLOTS - 1);
    const cached = KEY_CACHE.bytes[slot];
    if (cached !== undefined && cached.length === length) {
      let same = true;
      for (let i = 0; i < length; i += 1)
        if (cached[i] !== buf[start + i]) {
          same = false;
          break;
        }
      if (same) return KEY_CACHE.text[slot]!;
    }
    const text = this.slices.utf8Slice(start, stop);
    // A copy (Buffer#slice would be a view that keeps the whole body alive).
    KEY_CACHE.bytes[slot] = Uint8Array.prototype.slice.call(buf, start, stop);
    KEY_CACHE.text[slot] = text;
    return text;
  }

  bytes(end: number, encoding: 'hex' | 'base64'): string {
    const stop = this.delimited(end);
    const text =
      stop === this.pos
        ? ''
        : encoding === 'hex'
          ? this.slices.hexSlice(this.pos, stop)
          : this.slices.base64Slice(this.pos, stop);
    this.pos = stop;
    return text;
  }

  /** Past the field whose tag was just read (0: a field `tag()` skipped already). */
  skip(tag: number, end: number, depth = 0): void {
    if (tag === 0) return;
    const wireType = tag & 7;
    switch (wireType) {
      case VARINT:
        this.uint32(end);
        return;
      case I64:
        if (this.pos + 8 > end) throw outOfRange(this.pos, 8, end);
        this.pos += 8;
        return;
      case LEN:
        this.pos = this.delimited(end);
        return;
      case START_GROUP:
        // A group (proto2's): its fields up to the END_GROUP of the same field number.
        if (depth >= MAX_PROTOBUF_DEPTH) throw tooDeep();
        for (;;) {
          const inner = this.uint32(end);
          if (inner === ((tag & ~7) | END_GROUP) >>> 0) return;
          this.skip(inner, end, depth + 1);
        }
      case I32:
        if (this.pos + 4 > end) throw outOfRange(this.pos, 4, end);
        this.pos += 4;
        return;
      default:
        throw invalid(`invalid wire type ${wireType} at offset ${this.pos}`);
    }
  }

  /**
   * The next field's tag, or 0 for a known field (`expected`: wire types by field number) of another wire type than
   * its own, which the caller then skips as it skips unknown fields (`tag >>> 3` matches no case of its). The field
   * number is `tag >>> 3`.
   */
  tag(end: number, expected: WireTypes): number {
    const at = this.pos;
    const tag = this.uint32(end);
    const field = tag >>> 3;
    if (field === 0) throw invalid(`field number 0 at offset ${at}`);
    const want = expected[field];
    if (want !== undefined && want !== (tag & 7)) {
      this.skip(tag, end);
      return 0;
    }
    return tag;
  }

  /** A bool varint: true when any of its bits is set (bits past 32 too). */
  bool(end: number): boolean {
    const buf = this.buf;
    let any = 0;
    for (let i = 0; i < 10; i += 1) {
      if (this.pos >= end) throw outOfRange(this.pos, 1, end);
      const byte = buf[this.pos++]!;
      any |= byte & 0x7f;
      if (byte < 0x80) return any !== 0;
    }
    throw invalid(`varint longer than 10 bytes at offset ${this.pos}`);
  }
}

function outOfRange(pos: number, length: number, end: number): InvalidInputError {
  return invalid(`index out of range: ${pos} + ${length} > ${end}`);
}

/** An int64's two words as JSON: a safe integer as a number, else its decimal string. */
function int64Json(low: number, high: number): number | string {
  // Exact whenever it is safe (|high| < 2^21); past that it is no safe integer, however rounded.
  const value = high * 0x100000000 + low;
  if (Number.isSafeInteger(value)) return value;
  return BigInt.asIntN(64, (BigInt(high >>> 0) << 32n) | BigInt(low)).toString();
}

function tooDeep(): InvalidInputError {
  return new InvalidInputError(
    `OTLP protobuf body is nested deeper than ${MAX_PROTOBUF_DEPTH} levels; flatten the attributes`,
  );
}

/** Wire types of a message's known fields, by field number. */
type WireTypes = Readonly<Record<number, number>>;
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

/** An ExportTraceServiceRequest's bytes as ExportTraceRequest. Throws InvalidInputError for bytes that are not one. */
export function readTraceRequest(bytes: Buffer): ExportTraceRequest {
  const r = new Reader(bytes);
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
 * before the costly part. Throws InvalidInputError for bytes it cannot walk.
 */
export function countTraceSpans(bytes: Buffer): number {
  const r = new Reader(bytes);
  let count = 0;
  const inEach = (end: number, wire: WireTypes, field: number, then: (stop: number) => void): void => {
    while (r.pos < end) {
      const tag = r.tag(end, wire);
      if (tag >>> 3 === field) then(r.delimited(end));
      else r.skip(tag, end);
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
