/**
 * Decodes an OTLP/HTTP trace export (`POST /v1/traces`) into one internal shape, whichever of the
 * two wire encodings the agent's exporter chose: protobuf or JSON, gzip-compressed or not.
 *
 * Protobuf decoding uses the protobufjs static module that `@opentelemetry/otlp-transformer` generates
 * from the official opentelemetry-proto files (`build/src/generated/root.js`). We chose it over
 * protobufjs/@bufbuild with our own copy of the .proto files because it is the OpenTelemetry JS
 * project's own build of those definitions: nothing to vendor or regenerate, one package. It is pinned
 * at 0.216.0, the last release whose module still holds ExportTraceServiceRequest's decoder (0.217
 * dropped it when trace export moved to a hand-written writer); moving off it means protobufjs over
 * vendored .proto files, behind this same function. Its serializers are what the tests encode with.
 *
 * Both encodings end in one shape, `schema.ts`'s ExportTraceRequest: a JSON body is parsed with its
 * schemas, a protobuf message converted by `fromProtobuf.ts`.
 */
import zlib from 'node:zlib';
import otlpRoot from '@opentelemetry/otlp-transformer/build/src/generated/root';
import Long from 'long';
import protobuf from 'protobufjs/minimal';
import { InvalidInputError, PayloadTooLargeError, UnsupportedMediaTypeError } from '../protocol/errors';
import { describeIssues } from '../protocol/validation';
import { fromProtobuf, type PbRequest } from './fromProtobuf';
import { ExportTraceRequest } from './schema';

/** The body's media type is not one OTLP/HTTP defines (HTTP 415 rather than 400). */
export { UnsupportedMediaTypeError };

// protobufjs 8.0 finds `long` through an eval'd require that bundlers cannot follow, so the bundled
// daemon would run without it, and fixed64 nanosecond times would decode into doubles, off by up to
// ~256 ns. Wiring it here keeps them exact in every build.
protobuf.util.Long = Long;
protobuf.configure();

interface ProtobufType {
  decode(bytes: Uint8Array): unknown;
}
const ExportTraceServiceRequestType = (
  otlpRoot as unknown as {
    opentelemetry: { proto: { collector: { trace: { v1: { ExportTraceServiceRequest: ProtobufType } } } } };
  }
).opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;

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
 * A stack overflow while reading or converting a body (a protobuf AnyValue nested thousands deep) is the
 * body's fault: a 400 that says so, not an internal error.
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
    const message = parseProtobuf(bytes) as PbRequest;
    refuseOverSpanLimit(message, maxSpans);
    return fromProtobuf(message);
  }
  const raw = parseJson(bytes);
  refuseOverSpanLimit(raw, maxSpans);
  const parsed = ExportTraceRequest.safeParse(raw);
  if (!parsed.success)
    throw new InvalidInputError(
      `OTLP JSON body is not an ExportTraceServiceRequest: ${describeIssues(parsed.error, 'request')}`,
    );
  return parsed.data;
}

/** Counts spans in a parsed body whatever its shape (unchecked yet), and refuses more than `maxSpans`. */
function refuseOverSpanLimit(request: unknown, maxSpans: number): void {
  let count = 0;
  for (const resourceSpans of arrayAt(request, 'resourceSpans')) {
    for (const scopeSpans of arrayAt(resourceSpans, 'scopeSpans')) count += arrayAt(scopeSpans, 'spans').length;
  }
  if (count > maxSpans)
    throw new PayloadTooLargeError(
      `${count} spans in one OTLP export is over the ${maxSpans}-span limit; export smaller batches (the OpenTelemetry SDKs' batch processors send 512)`,
    );
}

function arrayAt(value: unknown, key: string): readonly unknown[] {
  const field =
    typeof value === 'object' && value !== null && Object.hasOwn(value, key)
      ? (value as Record<string, unknown>)[key]
      : undefined;
  return Array.isArray(field) ? field : [];
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

/** Refuses JSON nested deeper than `limit`, by one pass over its bytes (brackets inside strings do not count). */
function refuseDeepJson(bytes: Buffer, limit: number): void {
  let depth = 0;
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
    } else if (byte === 0x7d || byte === 0x5d) depth -= 1;
  }
}

function parseJson(bytes: Buffer): unknown {
  refuseDeepJson(bytes, MAX_OTLP_JSON_DEPTH);
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

function parseProtobuf(bytes: Buffer): unknown {
  try {
    return ExportTraceServiceRequestType.decode(bytes);
  } catch (error) {
    // protobufjs names the offset and the fault ("index out of range: 12 + 200 > 14"); never the contents.
    throw new InvalidInputError(
      `OTLP protobuf body is not a valid ExportTraceServiceRequest (${(error as Error).message})`,
    );
  }
}
