/**
 * An export as the store takes it (decoded, normalized, scrubbed), and real encoded requests edited where the SDK
 * cannot produce a case.
 */
import assert from 'node:assert/strict';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { decodeTraceRequest } from '../../trainer-daemon/otlp/decode';
import { normalizeTraceRequest, type NormalizedTraceRequest } from '../../trainer-daemon/otlp/normalize';
import { SpanInput } from '../../trainer-daemon/protocol/records';
import { scrubSpan } from '../../trainer-daemon/protocol/recordScrub';
import { encode, ExportTraceServiceRequest, type Encoding, type WireRequest } from './otlp';

export const PROTOBUF = 'application/x-protobuf';
export const JSON_TYPE = 'application/json';
export const MAX = 4 * 1024 * 1024;

/**
 * What the store keeps of an export: decoded, normalized (every produced span checked against the contract), and
 * scrubbed where the store takes each span.
 */
export function ingest(body: Buffer, encoding: Encoding, contentEncoding?: string): NormalizedTraceRequest {
  const result = normalizeTraceRequest(
    decodeTraceRequest(body, encoding === 'protobuf' ? PROTOBUF : JSON_TYPE, contentEncoding, MAX),
  );
  for (const { span } of result.spans) assert.deepEqual(SpanInput.parse(span), span);
  return { ...result, spans: result.spans.map((normalized) => ({ ...normalized, span: scrubSpan(normalized.span) })) };
}

/** Both encodings of `spans`, each passed through `edit` (protobuf re-encoded with the same generated codec). */
export function editedBodies(
  spans: ReadableSpan[],
  edit: (request: WireRequest, encoding: Encoding) => void,
): Record<Encoding, Buffer> {
  const proto = ExportTraceServiceRequest.decode(encode(spans, 'protobuf'));
  edit(proto, 'protobuf');
  const json = JSON.parse(encode(spans, 'json').toString('utf8')) as WireRequest;
  edit(json, 'json');
  return {
    protobuf: Buffer.from(ExportTraceServiceRequest.encode(proto).finish()),
    json: Buffer.from(JSON.stringify(json)),
  };
}
