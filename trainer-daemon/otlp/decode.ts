/**
 * Decodes an OTLP/HTTP trace export (`POST /v1/traces`) into one internal shape, whichever of the
 * two wire encodings the agent's exporter chose: protobuf or JSON, gzip-compressed or not.
 *
 * Both encodings end in one shape, `schema.ts`'s ExportTraceRequest: a JSON body is parsed with its
 * schemas, a protobuf body read straight from the wire format into it by `protobuf.ts`.
 */
import zlib from 'node:zlib';
import { InvalidInputError, PayloadTooLargeError, UnsupportedMediaTypeError } from '../protocol/errors';
import { describeIssues } from '../protocol/validation';
import { countTraceSpans, readTraceRequest } from './protobuf';
import { DECODED_ENTRY_BYTES, decodeBudget, decodeHeapBytes } from './protobufWire';
import { ExportTraceRequest } from './schema';

/** The body's media type is not one OTLP/HTTP defines (HTTP 415 rather than 400). */
export { UnsupportedMediaTypeError };

// ---- The request body ----

/**
 * Decodes an OTLP/HTTP traces body. `maxBytes` caps the body after decompression (a gzip bomb stops
 * at the cap), `maxSpans` the spans in it: counted before they are checked and converted, the costly
 * part, so an export too large to store is refused (PayloadTooLargeError, 413) without that work.
 * Throws UnsupportedMediaTypeError for a content type or encoding OTLP/HTTP does not define, and
 * InvalidInputError for anything unreadable.
 */
export function decodeTraceRequest(
  body: Buffer,
  contentType: string | undefined,
  contentEncoding: string | undefined,
  maxBytes: number,
  maxSpans = Infinity,
): ExportTraceRequest {
  try {
    return decodeBody(body, contentType, contentEncoding, maxBytes, maxSpans);
  } catch (error) {
    throw asInputError(error);
  }
}

/** JSON deeper than this is refused before it is read (OTLP's own nesting is ~10 levels; the store keeps 64). */
export const MAX_OTLP_JSON_DEPTH = 256;

/**
 * A stack overflow while reading or converting a body is the body's fault (each reader refuses nesting past its depth
 * limit first; this is the net under them): a 400 that says so, not an internal error.
 */
export function asInputError(error: unknown): unknown {
  if (error instanceof RangeError && /call stack/i.test(error.message)) {
    return new InvalidInputError(
      'OTLP body is nested too deeply to read (attribute values inside values, thousands of levels); flatten the attributes',
    );
  }
  return error;
}

function decodeBody(
  body: Buffer,
  contentType: string | undefined,
  contentEncoding: string | undefined,
  maxBytes: number,
  maxSpans: number,
): ExportTraceRequest {
  const mediaType = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  if (mediaType !== 'application/x-protobuf' && mediaType !== 'application/json') {
    throw new UnsupportedMediaTypeError(
      `${mediaType ? `Content-Type ${JSON.stringify(mediaType.slice(0, 100))} is not supported` : 'Content-Type is missing'}; send OTLP traces as application/x-protobuf or application/json`,
    );
  }
  const bytes = decompress(body, contentEncoding, maxBytes);
  if (mediaType === 'application/x-protobuf') {
    const budget = decodeBudget(DECODED_ENTRY_BYTES.protobuf);
    refuseOverSpanLimit(countTraceSpans(bytes, budget), maxSpans);
    return readTraceRequest(bytes, budget);
  }
  const raw = parseJson(bytes);
  const counted = countJson(raw);
  refuseOverSpanLimit(counted.spans, maxSpans);
  refuseOverJsonBudget(counted);
  const parsed = ExportTraceRequest.safeParse(raw);
  if (!parsed.success)
    throw new InvalidInputError(
      `OTLP JSON body is not an ExportTraceServiceRequest: ${describeIssues(parsed.error, 'request')}`,
    );
  return parsed.data;
}

interface JsonCounts {
  readonly spans: number;
  /** Groups, spans and events (protobufWire.ts's entries). */
  readonly entries: number;
  /** Attributes, with the values inside their values (a list's items, a key-value list's pairs). */
  readonly attributes: number;
}

/** The key-value pairs of `owner[key]`, with every value inside their values (nested at most 256 levels: the scan). */
function attributesAt(owner: unknown, key: string): number {
  let count = 0;
  for (const pair of arrayAt(owner, key)) count += 1 + valuesIn(field(pair, 'value'));
  return count;
}

/** The items of an AnyValue's array or key-value list, and theirs. */
function valuesIn(value: unknown): number {
  let count = attributesAt(field(value, 'kvlistValue'), 'values');
  for (const item of arrayAt(field(value, 'arrayValue'), 'values')) count += 1 + valuesIn(item);
  return count;
}

/** Spans, entries and attributes in a parsed JSON body whatever its shape (unchecked yet). */
function countJson(request: unknown): JsonCounts {
  let spans = 0;
  let entries = 0;
  let attributes = 0;
  for (const resourceSpans of arrayAt(request, 'resourceSpans')) {
    entries += 1;
    attributes += attributesAt(field(resourceSpans, 'resource'), 'attributes');
    for (const scopeSpans of arrayAt(resourceSpans, 'scopeSpans')) {
      entries += 1;
      for (const span of arrayAt(scopeSpans, 'spans')) {
        spans += 1;
        entries += 1;
        attributes += attributesAt(span, 'attributes');
        for (const event of arrayAt(span, 'events')) {
          entries += 1;
          attributes += attributesAt(event, 'attributes');
        }
      }
    }
  }
  return { spans, entries, attributes };
}

/**
 * What one attribute of a JSON export takes once checked, in bytes of heap (measured on Node 20: ~200 an attribute in
 * an SDK's export of 85,000 spans of 20 attributes; an empty `{}` more).
 */
const JSON_ATTRIBUTE_BYTES = 240;

/**
 * Refuses a parsed JSON export whose groups, spans, events and attributes would take more than half the decoder's heap
 * once the schema has checked them (each given its defaults: the costly part, still to come).
 */
function refuseOverJsonBudget({ entries, attributes }: JsonCounts): void {
  const budget = Math.floor(decodeHeapBytes());
  const needs = entries * DECODED_ENTRY_BYTES.json + attributes * JSON_ATTRIBUTE_BYTES;
  if (needs > budget)
    throw new PayloadTooLargeError(
      `this OTLP JSON export's ${entries} resource and scope groups, spans and events and ${attributes} attributes and values take more than its decoder's heap holds decoded (~${Math.ceil(needs / 2 ** 20)} MiB needed, ${Math.floor(budget / 2 ** 20)} MiB allowed: half the decoder's heap); export smaller batches (or raise LIGHTNING_OTLP_WORKER_HEAP_MB)`,
    );
}

/** Refuses an export of more than `maxSpans` spans, counted before they are checked and converted. */
function refuseOverSpanLimit(count: number, maxSpans: number): void {
  if (count > maxSpans)
    throw new PayloadTooLargeError(
      `${count} spans in one OTLP export is over the ${maxSpans}-span limit; export smaller batches (the OpenTelemetry SDKs' batch processors send 512)`,
    );
}

/** `value[key]` when `value` is an object that has it as its own, else undefined. */
function field(value: unknown, key: string): unknown {
  return typeof value === 'object' && value !== null && Object.hasOwn(value, key)
    ? (value as Record<string, unknown>)[key]
    : undefined;
}

function arrayAt(value: unknown, key: string): readonly unknown[] {
  const found = field(value, key);
  return Array.isArray(found) ? found : [];
}

function decompress(body: Buffer, contentEncoding: string | undefined, maxBytes: number): Buffer {
  const encoding = (contentEncoding ?? '').trim().toLowerCase();
  if (encoding === '' || encoding === 'identity') {
    if (body.length > maxBytes)
      throw new PayloadTooLargeError(
        `OTLP body is ${body.length} bytes, over the ${maxBytes}-byte limit; export smaller batches`,
      );
    return body;
  }
  if (encoding !== 'gzip') {
    throw new UnsupportedMediaTypeError(
      `Content-Encoding ${JSON.stringify(encoding.slice(0, 100))} is not supported; send gzip or no encoding`,
    );
  }
  try {
    return zlib.gunzipSync(body, { maxOutputLength: maxBytes });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') {
      throw new PayloadTooLargeError(
        `OTLP body is over the ${maxBytes}-byte limit once decompressed; export smaller batches`,
      );
    }
    throw new InvalidInputError(`OTLP body is not valid gzip (${(error as Error).message})`);
  }
}

/**
 * What JSON.parse makes of an empty object or array, in bytes of heap (measured on Node 20: 67). A body of `{},` holds
 * a third as many as its bytes, and JSON.parse makes them all before anything can count them.
 */
const PARSED_CONTAINER_BYTES = 80;

/**
 * Refuses JSON nested deeper than `limit`, or holding more objects and arrays than half the heap holds parsed (6.7
 * million at a decode worker's default 1 GiB; an export of the 128 MiB cap made only of the smallest attributes holds
 * about as many), by one pass over its bytes (brackets inside strings do not count).
 */
function refuseJsonShape(bytes: Buffer, limit: number): void {
  const maxContainers = decodeBudget(PARSED_CONTAINER_BYTES);
  let depth = 0;
  let containers = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i += 1) {
    const byte = bytes[i]!;
    if (inString) {
      if (byte === 0x5c) i += 1;
      else if (byte === 0x22) inString = false;
    } else if (byte === 0x22) inString = true;
    else if (byte === 0x7b || byte === 0x5b) {
      depth += 1;
      if (depth > limit)
        throw new InvalidInputError(`OTLP JSON body is nested deeper than ${limit} levels; flatten the attributes`);
      if (++containers > maxContainers)
        throw new PayloadTooLargeError(
          `this OTLP JSON export holds more than ${maxContainers} objects and arrays, more than its decoder's heap holds parsed; export smaller batches (or raise LIGHTNING_OTLP_WORKER_HEAP_MB)`,
        );
    } else if (byte === 0x7d || byte === 0x5d) depth -= 1;
  }
}

function parseJson(bytes: Buffer): unknown {
  refuseJsonShape(bytes, MAX_OTLP_JSON_DEPTH);
  let textBody: string;
  try {
    textBody = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new InvalidInputError('OTLP JSON body is not valid UTF-8');
  }
  try {
    return JSON.parse(textBody) as unknown;
  } catch (error) {
    // V8's message quotes the body around the fault, which may hold a prompt or a key: keep only where.
    const where = /position \d+|line \d+ column \d+/.exec((error as Error).message)?.[0];
    throw new InvalidInputError(`OTLP JSON body is not valid JSON${where ? ` (at ${where})` : ''}`);
  }
}
