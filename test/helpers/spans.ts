import crypto from 'node:crypto';
import type { SpanInput } from '../../trainer-daemon/protocol';

export function hex(bytes: number): string {
  return crypto.randomBytes(bytes).toString('hex');
}

/** A valid LLM-call span (the shape the proxy will record), with fresh ids. */
export function llmSpan(overrides: Partial<SpanInput> = {}): SpanInput {
  const start = Date.now();
  return {
    traceId: hex(16),
    spanId: hex(8),
    parentSpanId: null,
    name: 'chat gpt-4o-mini',
    kind: 'client',
    category: 'llm',
    startMs: start,
    endMs: start + 12.5,
    statusCode: 'ok',
    statusMessage: null,
    attributes: { 'gen_ai.request.model': 'gpt-4o-mini', 'gen_ai.usage.input_tokens': 20 },
    events: [],
    promptTokens: 20,
    completionTokens: 5,
    ...overrides,
  };
}
