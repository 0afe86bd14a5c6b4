/** OTLP request bodies made by the real OpenTelemetry SDK and its own serializers. */
import zlib from 'node:zlib';
import { SpanKind, type Attributes, type Tracer } from '@opentelemetry/api';
import { JsonTraceSerializer, ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import otlpRoot from '@opentelemetry/otlp-transformer/build/src/generated/root';
import { resourceFromAttributes, type Resource } from '@opentelemetry/resources';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';

export type Encoding = 'protobuf' | 'json';

/** An export request as the collector's protobuf messages hold it (the fields the tests edit). */
export interface WireRequest {
  resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<Record<string, unknown> & { attributes: unknown[] }> }> }>;
}

/**
 * The collector's messages from the SDK's own generated protobuf code: to edit a real encoded request where the SDK
 * cannot produce a case, and to read a receiver's answer.
 */
export const { ExportTraceServiceRequest, ExportTraceServiceResponse } = (
  otlpRoot as unknown as {
    opentelemetry: {
      proto: {
        collector: {
          trace: {
            v1: {
              ExportTraceServiceRequest: {
                decode(bytes: Uint8Array): WireRequest;
                encode(message: WireRequest): { finish(): Uint8Array };
              };
              ExportTraceServiceResponse: {
                decode(bytes: Uint8Array): { partialSuccess?: { rejectedSpans?: unknown; errorMessage?: string } };
              };
            };
          };
        };
      };
    };
  }
).opentelemetry.proto.collector.trace.v1;

export const BIG_EXPORT_SPANS = 24_000;

/** Records spans with the real OpenTelemetry SDK and returns what an exporter would be handed. */
export function recordSpans(
  build: (tracer: Tracer) => void,
  resource: Resource = resourceFromAttributes({ 'service.name': 'agent' }),
): ReadableSpan[] {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ resource, spanProcessors: [new SimpleSpanProcessor(exporter)] });
  build(provider.getTracer('test-agent', '1.2.3'));
  return exporter.getFinishedSpans();
}

export function oneSpan(
  name: string,
  attributes: Attributes,
  kind = SpanKind.INTERNAL,
  resource?: Resource,
): ReadableSpan[] {
  return recordSpans((tracer) => tracer.startSpan(name, { kind, attributes }).end(), resource);
}

export function encode(spans: ReadableSpan[], encoding: Encoding): Buffer {
  const serializer = encoding === 'protobuf' ? ProtobufTraceSerializer : JsonTraceSerializer;
  return Buffer.from(serializer.serializeRequest(spans)!);
}

/**
 * OTLP/JSON of BIG_EXPORT_SPANS spans with a 5,000-character prompt each (~121 MB), gzipped as it is written: this
 * process never holds it inflated (a stall of its own would fail the /health probe).
 */
export async function bigGzipExport(): Promise<{ gzip: Buffer; inflated: number }> {
  const prompt = 'p'.repeat(5_000);
  const gzip = zlib.createGzip({ level: 1 });
  const out: Buffer[] = [];
  gzip.on('data', (chunk: Buffer) => out.push(chunk));
  const ended = new Promise((resolve) => gzip.on('end', resolve));
  let inflated = 0;
  const write = (text: string): void => {
    inflated += Buffer.byteLength(text);
    gzip.write(text);
  };
  write('{"resourceSpans":[{"resource":{"attributes":[]},"scopeSpans":[{"spans":[');
  for (let i = 1; i <= BIG_EXPORT_SPANS; i += 1)
    write(
      `${i > 1 ? ',' : ''}{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"${i.toString(16).padStart(16, '0')}",` +
        `"name":"chat m","kind":3,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000100000000",` +
        `"attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},` +
        `{"key":"gen_ai.prompt","value":{"stringValue":"${prompt}"}}]}`,
    );
  write(']}]}]}');
  gzip.end();
  await ended;
  return { gzip: Buffer.concat(out), inflated };
}
