/** OTLP request bodies made by the real OpenTelemetry SDK and its own serializers. */
import { SpanKind, type Attributes, type Tracer } from '@opentelemetry/api';
import { JsonTraceSerializer, ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes, type Resource } from '@opentelemetry/resources';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';

export type Encoding = 'protobuf' | 'json';

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
