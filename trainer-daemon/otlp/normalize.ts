/**
 * Turns a decoded OTLP trace export into the daemon's spans (`SpanInput`): hex ids checked, times in
 * epoch milliseconds, a category (llm | tool | agent | reward | other) and token usage read from
 * whichever instrumentation convention the agent's framework follows (secret values are redacted as the
 * spans are prepared for the store, prepare.ts, or by the store).
 *
 * A span that cannot be stored is reported in `rejected` and the rest of the batch goes on, as OTLP's
 * partial success allows.
 */
import type { Json, SpanCategory, SpanInput } from '../protocol/records';
import type { ExportTraceRequest, OtlpSpan } from './schema';
import { OUTCOME_ATTRIBUTE, outcomeAttributes, spanOutcome } from '../protocol/outcome';

type Attributes = Record<string, Json>;

/** Resource (or span) attribute carrying the rollout id; `lightning run` sets it in OTEL_RESOURCE_ATTRIBUTES. */
export const ROLLOUT_ID_ATTRIBUTE = 'lightning.rollout_id';

export interface NormalizedSpan {
  /** From the span's resource or the span itself; null when neither says (the URL may). */
  rolloutId: string | null;
  span: SpanInput;
}

export interface RejectedSpan {
  spanId: string | null;
  error: string;
}

export interface NormalizedTraceRequest {
  spans: NormalizedSpan[];
  rejected: RejectedSpan[];
}

export function normalizeTraceRequest(request: ExportTraceRequest): NormalizedTraceRequest {
  const spans: NormalizedSpan[] = [];
  const rejected: RejectedSpan[] = [];
  for (const resourceSpans of request.resourceSpans) {
    const resourceRolloutId = rolloutIdOf(resourceSpans.resourceAttributes);
    for (const scopeSpans of resourceSpans.scopeSpans) {
      rejected.push(...scopeSpans.malformed);
      for (const otlpSpan of scopeSpans.spans) {
        const result = normalizeSpan(otlpSpan);
        if (typeof result === 'string') {
          rejected.push({ spanId: SPAN_ID.test(otlpSpan.spanId) ? otlpSpan.spanId : null, error: result });
        } else {
          spans.push({ rolloutId: resourceRolloutId ?? rolloutIdOf(otlpSpan.attributes), span: result });
        }
      }
    }
  }
  return { spans, rejected };
}

const TRACE_ID = /^[0-9a-f]{32}$/;
const SPAN_ID = /^[0-9a-f]{16}$/;
const ALL_ZERO = /^0+$/;

/** The span as SpanInput, or why it cannot be one. Messages name fields, never attribute values. */
function normalizeSpan(otlp: OtlpSpan): SpanInput | string {
  if (!TRACE_ID.test(otlp.traceId) || ALL_ZERO.test(otlp.traceId))
    return 'traceId must be 16 bytes (32 hex characters), not all zero';
  if (!SPAN_ID.test(otlp.spanId) || ALL_ZERO.test(otlp.spanId))
    return 'spanId must be 8 bytes (16 hex characters), not all zero';
  if (otlp.parentSpanId !== '' && !SPAN_ID.test(otlp.parentSpanId))
    return 'parentSpanId must be 8 bytes (16 hex characters) or empty';
  if (otlp.name === '') return 'name is missing';
  if (otlp.name.length > 1024) return 'name is longer than 1024 characters';
  if (otlp.startTimeUnixNano === '0') return 'startTimeUnixNano is missing';

  const startMs = nanosToMs(otlp.startTimeUnixNano);
  // Scrubbed and cut to size as it is prepared for the store (prepare.ts), or by the store (store/spans.ts).
  const attributes = otlp.attributes;
  const category = categorize(otlp.name, attributes);
  const usage = category === 'llm' ? tokenUsage(attributes) : { promptTokens: null, completionTokens: null };
  const statusCode = STATUS_CODES[otlp.status.code] ?? 'unset';
  const statusMessage = otlp.status.message === '' ? null : otlp.status.message;
  // An LLM span the exporter marked as an error is an upstream error: not a whole answer to train on (an ok one reads
  // as ok unmarked).
  const derived =
    category === 'llm' && statusCode === 'error' && !(OUTCOME_ATTRIBUTE in attributes)
      ? spanOutcome({ statusCode, statusMessage, attributes })
      : null;
  const outcome = derived ? outcomeAttributes(derived) : null;
  const responseId = category === 'llm' ? openInferenceResponseId(attributes) : null;
  const added = { ...outcome, ...(responseId === null ? {} : { 'gen_ai.response.id': responseId }) };
  // Built field by field from checked parts, so it is a SpanInput without a second, deep parse
  // (the unit tests hold every produced span to SpanInput.parse).
  return {
    traceId: otlp.traceId,
    spanId: otlp.spanId,
    parentSpanId: otlp.parentSpanId === '' || ALL_ZERO.test(otlp.parentSpanId) ? null : otlp.parentSpanId,
    name: otlp.name,
    kind: SPAN_KINDS[otlp.kind] ?? 'internal',
    category,
    startMs,
    endMs: otlp.endTimeUnixNano === '0' ? null : nanosToMs(otlp.endTimeUnixNano),
    statusCode,
    statusMessage,
    attributes: outcome || responseId !== null ? { ...attributes, ...added } : attributes,
    events: otlp.events.map((event) => ({
      name: event.name,
      timeMs: event.timeUnixNano === '0' ? startMs : nanosToMs(event.timeUnixNano),
      attributes: event.attributes,
    })),
    ...usage,
  };
}

/** The longest OpenInference `output.value` read for its response id. */
const MAX_OUTPUT_VALUE_CHARS = 1024 * 1024;

/**
 * An OpenInference LLM span's response id, from the provider's answer it keeps as JSON in `output.value`
 * (OpenInference has no response-id attribute): the same call's twin of the proxy's record is told by it
 * (store/spans.ts), as GenAI spans are by `gen_ai.response.id`. Null when the span has one already, or no such answer.
 */
function openInferenceResponseId(attributes: Attributes): string | null {
  if (own(attributes, 'openinference.span.kind') === undefined || 'gen_ai.response.id' in attributes) return null;
  const output = own(attributes, 'output.value');
  if (
    typeof output !== 'string' ||
    output.length > MAX_OUTPUT_VALUE_CHARS ||
    !output.trimStart().startsWith('{') ||
    !output.includes('"id"')
  )
    return null;
  try {
    const answer = JSON.parse(output) as unknown;
    const id = answer !== null && typeof answer === 'object' ? (answer as { id?: unknown }).id : undefined;
    return typeof id === 'string' && id !== '' ? id : null;
  } catch {
    return null;
  }
}

/** OTLP SpanKind by number; 0 (unspecified) reads as internal, the OTel default. */
const SPAN_KINDS: Readonly<Record<number, SpanInput['kind']>> = {
  0: 'internal',
  1: 'internal',
  2: 'server',
  3: 'client',
  4: 'producer',
  5: 'consumer',
};
const STATUS_CODES: Readonly<Record<number, SpanInput['statusCode']>> = { 0: 'unset', 1: 'ok', 2: 'error' };

const NANOS_PER_MS = 1_000_000n;

/**
 * Nanoseconds (decimal string) → fractional epoch milliseconds. Split in BigInt first: the full
 * nanosecond count (~1.7e18) is past 2^53, so converting it to a Number would round it by up to 256 ns.
 */
export function nanosToMs(nanos: string): number {
  const value = BigInt(nanos);
  return Number(value / NANOS_PER_MS) + Number(value % NANOS_PER_MS) / 1e6;
}

function rolloutIdOf(attributes: Attributes): string | null {
  const value = own(attributes, ROLLOUT_ID_ATTRIBUTE);
  if (typeof value === 'string' && value.trim() !== '') return value.trim();
  return typeof value === 'number' ? String(value) : null;
}

/** Reads an attribute without falling through to Object.prototype (`constructor`, `__proto__`). */
function own(attributes: Attributes, key: string): Json | undefined {
  return Object.hasOwn(attributes, key) ? attributes[key] : undefined;
}

// ---- Categories ----

/**
 * Embeddings are recorded but are not `llm` steps: they are not actions of the policy being trained
 * (the proxy records them the same way).
 *
 * Attributes (or the span name) that state a span's role outright, one row per convention, in the
 * order they are consulted. Values are matched after `normalize`.
 */
const EXPLICIT_ROLES: ReadonlyArray<{
  convention: string;
  read: (name: string, attributes: Attributes) => Json | undefined;
  normalize: (value: string) => string;
  roles: ReadonlyMap<string, SpanCategory>;
}> = [
  {
    convention: 'OpenInference',
    read: (_name, attributes) => own(attributes, 'openinference.span.kind'),
    normalize: (value) => value.toUpperCase(),
    roles: new Map([
      ['LLM', 'llm'],
      ['EMBEDDING', 'other'],
      ['TOOL', 'tool'],
      ['AGENT', 'agent'],
      ['CHAIN', 'agent'],
    ]),
  },
  {
    convention: 'OpenTelemetry GenAI',
    read: (_name, attributes) => own(attributes, 'gen_ai.operation.name'),
    normalize: (value) => value.toLowerCase(),
    roles: new Map([
      ['chat', 'llm'],
      ['text_completion', 'llm'],
      ['generate_content', 'llm'],
      ['embeddings', 'other'],
      ['execute_tool', 'tool'],
      ['invoke_agent', 'agent'],
      ['create_agent', 'agent'],
    ]),
  },
  {
    // The AI SDK names each span by its operation id and repeats it in `ai.operationId`.
    convention: 'Vercel AI SDK',
    read: (name, attributes) => own(attributes, 'ai.operationId') ?? name,
    normalize: (value) => value,
    roles: new Map([
      ['ai.generateText.doGenerate', 'llm'],
      ['ai.streamText.doStream', 'llm'],
      ['ai.generateObject.doGenerate', 'llm'],
      ['ai.streamObject.doStream', 'llm'],
      ['ai.embed.doEmbed', 'other'],
      ['ai.embedMany.doEmbed', 'other'],
      ['ai.toolCall', 'tool'],
      // The outer calls run the multi-step tool loop: the agent that owns the LLM calls beneath.
      ['ai.generateText', 'agent'],
      ['ai.streamText', 'agent'],
    ]),
  },
];

/** Older GenAI semantic conventions flattened messages into `gen_ai.prompt.0.content` and the like. */
const FLATTENED_GEN_AI_MESSAGE = /^gen_ai\.(prompt|completion)\.\d+\./;

/**
 * The span's category. Reward spans win (Agent Lightning's emitters mark them); then a convention's
 * explicit role; then evidence of a model call (a GenAI system/model, or flattened messages).
 */
export function categorize(name: string, attributes: Attributes): SpanCategory {
  const keys = Object.keys(attributes);
  if (name === 'agentlightning.reward' || keys.some((key) => key.startsWith('agentlightning.reward'))) return 'reward';
  for (const rule of EXPLICIT_ROLES) {
    const value = rule.read(name, attributes);
    const role = typeof value === 'string' ? rule.roles.get(rule.normalize(value)) : undefined;
    if (role) return role;
  }
  if (
    ['gen_ai.system', 'gen_ai.provider.name', 'gen_ai.request.model'].some((key) => own(attributes, key) !== undefined)
  )
    return 'llm';
  if (keys.some((key) => FLATTENED_GEN_AI_MESSAGE.test(key))) return 'llm';
  return 'other';
}

// ---- Token usage ----

/**
 * Where each convention reports usage, first match wins: GenAI current, GenAI older, OpenInference, Vercel AI SDK (v4,
 * v5).
 */
const PROMPT_TOKEN_KEYS = [
  'gen_ai.usage.input_tokens',
  'gen_ai.usage.prompt_tokens',
  'llm.token_count.prompt',
  'ai.usage.promptTokens',
  'ai.usage.inputTokens',
];
const COMPLETION_TOKEN_KEYS = [
  'gen_ai.usage.output_tokens',
  'gen_ai.usage.completion_tokens',
  'llm.token_count.completion',
  'ai.usage.completionTokens',
  'ai.usage.outputTokens',
];

/**
 * Only LLM-call spans carry usage into SpanInput: agent spans (invoke_agent, ai.generateText) report
 * the sum of their calls, and counting both would double the rollout's totals.
 */
function tokenUsage(attributes: Attributes): { promptTokens: number | null; completionTokens: number | null } {
  return {
    promptTokens: firstCount(attributes, PROMPT_TOKEN_KEYS),
    completionTokens: firstCount(attributes, COMPLETION_TOKEN_KEYS),
  };
}

function firstCount(attributes: Attributes, keys: readonly string[]): number | null {
  for (const key of keys) {
    const value = own(attributes, key);
    const count = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
    if (typeof count === 'number' && Number.isSafeInteger(count) && count >= 0) return count;
  }
  return null;
}

export { isCredentialKey } from '../protocol/secrets';
