/**
 * Protobuf's wire format, read (protobuf.ts reads OTLP's messages with it): varints, fixed-size numbers, strings and
 * bytes, each bounded by the end of the message it is in; unknown fields skipped, groups too. A body that breaks the
 * format is an InvalidInputError that says where (an offset), never what the bytes hold (a prompt, a key).
 */
import v8 from 'node:v8';
import { resourceLimits } from 'node:worker_threads';
import { InvalidInputError, PayloadTooLargeError } from '../protocol/errors';

/**
 * Messages nested deeper than this are refused, as OTLP/JSON deeper than 256 levels is (decode.ts). A value inside an
 * attribute's value is two or three messages further down (AnyValue, ArrayValue; AnyValue, KeyValueList, KeyValue);
 * the store keeps 64 levels of values.
 */
export const MAX_PROTOBUF_DEPTH = 256;

/**
 * The heap one decoded entry of an export takes at most, in bytes: an entry is a resource's or a scope's group, a span
 * or an event, each 2 bytes on the wire when empty. Measured on Node 20: read from protobuf, an empty group took
 * 139–163 bytes and an empty event 115; parsed from JSON and checked (schema.ts fills in the defaults), ~400.
 * Protobuf attributes are not counted: they cost bytes on the wire, which the body's cap and the decode pool's size
 * check bound (not tightly: many with distinct keys can still reach the worker's limit). JSON's are (decode.ts).
 */
export const DECODED_ENTRY_BYTES = { protobuf: 160, json: 400 } as const;

/**
 * The heap one export may decode into, in bytes: half of this thread's (a decode worker's old generation,
 * LIGHTNING_OTLP_WORKER_HEAP_MB; V8's heap limit elsewhere).
 */
export function decodeHeapBytes(): number {
  const heap = resourceLimits.maxOldGenerationSizeMb
    ? resourceLimits.maxOldGenerationSizeMb * 1024 * 1024
    : v8.getHeapStatistics().heap_size_limit;
  return heap / 2;
}

/**
 * How many things of `bytesEach` one export may decode into (decodeHeapBytes). At the default 1 GiB: 3.3 million
 * protobuf entries, 1.3 million JSON ones less its attributes (decode.ts) — 200,000 spans of five events each are under
 * both. Past it an export is refused (413) as they are counted, instead of its worker running out of memory a minute
 * later.
 */
export function decodeBudget(bytesEach: number): number {
  return Math.floor(decodeHeapBytes() / bytesEach);
}

export function tooManyEntries(budget: number): PayloadTooLargeError {
  return new PayloadTooLargeError(
    `this OTLP export holds more than ${budget} resource and scope groups, spans and events, more than its decoder's heap holds decoded; export smaller batches (or raise LIGHTNING_OTLP_WORKER_HEAP_MB)`,
  );
}

export const VARINT = 0;
export const I64 = 1;
export const LEN = 2;
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
export class Reader {
  pos = 0;
  private readonly slices: Slices;
  /** The entries decoded so far (a small integer: counting down from Infinity was slower). */
  private entries = 0;
  constructor(
    readonly buf: Buffer,
    /** Past this many entries the body is refused (decodeBudget). */
    private readonly maxEntries = Infinity,
  ) {
    this.slices = slicesOf(buf);
  }

  /** Counts one entry (a group, a span, an event): throws PayloadTooLargeError past the budget. */
  entry(): void {
    if (++this.entries > this.maxEntries) throw tooManyEntries(this.maxEntries);
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

export function tooDeep(): InvalidInputError {
  return new InvalidInputError(
    `OTLP protobuf body is nested deeper than ${MAX_PROTOBUF_DEPTH} levels; flatten the attributes`,
  );
}

/** Wire types of a message's known fields, by field number. */
export type WireTypes = Readonly<Record<number, number>>;
