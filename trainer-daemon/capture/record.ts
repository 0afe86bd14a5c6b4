/**
 * Turns one proxied LLM call into a span, named and attributed by the OpenTelemetry GenAI
 * conventions (`gen_ai.*`), with the full request and (reassembled) response kept under
 * `lightning.request` / `lightning.response` for the trajectory view and for training. Secrets are
 * scrubbed, and deep or huge bodies cut, where the store takes the span (recordScrub.ts#scrubSpan).
 */
import crypto from 'node:crypto';
import {
  outcomeAttributes,
  RETRY_OF_ATTRIBUTE,
  type CallOutcome,
  type Json,
  type JsonObject,
  type SpanInput,
} from '../protocol';
import type { Api } from './reassemble';
import { anthropicUsage } from './anthropic';
import { geminiUsage } from './gemini';

export interface CallRecord {
  readonly api: Api;
  readonly rolloutId: string;
  readonly callIndex: number;
  readonly upstream: string;
  readonly request: JsonObject;
  readonly response: JsonObject | null;
  readonly status: number | null;
  readonly streamed: boolean;
  readonly startMs: number;
  readonly endMs: number;
  readonly firstByteMs: number | null;
  /** Why the call failed (upstream error, cancelled, unreachable); null on success. */
  readonly error: string | null;
  /** How the call ended: training takes only `ok` calls by default. */
  readonly outcome: CallOutcome;
  /** The span id of the failed attempt this call repeats (capture/retries.ts). */
  readonly retryOf?: string | null;
  /** The SDK's `x-stainless-retry-count`, when it sent one. */
  readonly sdkRetryCount?: number | null;
  /** Whether the proxy asked the engine for token ids and logprobs the agent did not ask for. */
  readonly tokenIdsRequested: boolean;
  /** From a W3C `traceparent` request header, when the agent's HTTP client is instrumented. */
  readonly traceparent: string | undefined;
  /** The model, where the API names it outside the body (Gemini: in the URL). */
  readonly model?: string;
  /**
   * An Anthropic or Gemini call answered through chat completions (a checkpoint or the trainer's
   * policy): that completion, whose token ids and logprobs the record keeps.
   */
  readonly translated?: JsonObject | null;
}

const OPERATION: Record<Api, string> = {
  'chat.completions': 'chat',
  completions: 'text_completion',
  responses: 'chat',
  embeddings: 'embeddings',
  'anthropic.messages': 'chat',
  'gemini.generate_content': 'generate_content',
};

/** `gen_ai.provider.name`, as the OpenTelemetry GenAI conventions name providers. */
const PROVIDER: Record<Api, string> = {
  'chat.completions': 'openai',
  completions: 'openai',
  responses: 'openai',
  embeddings: 'openai',
  'anthropic.messages': 'anthropic',
  'gemini.generate_content': 'gcp.gemini',
};

function traceIds(record: CallRecord): { traceId: string; parentSpanId: string | null } {
  const match = /^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/.exec(record.traceparent ?? '');
  if (match && !/^0+$/.test(match[1]!)) return { traceId: match[1]!, parentSpanId: match[2]! };
  // Without a traceparent, all of a rollout's proxied calls share one trace derived from its id.
  let traceId = rolloutTraceIds.get(record.rolloutId);
  if (traceId === undefined) {
    traceId = crypto.createHash('sha256').update(record.rolloutId).digest('hex').slice(0, 32);
    rolloutTraceIds.set(record.rolloutId, traceId);
    if (rolloutTraceIds.size > 10_000) rolloutTraceIds.delete(rolloutTraceIds.keys().next().value!);
  }
  return { traceId, parentSpanId: null };
}
/** Each rollout's trace id (a hash per call otherwise). */
const rolloutTraceIds = new Map<string, string>();

/** Random span ids from a pool refilled 4 KiB at a time: one call into the random source per 512 ids, not per call. */
let randomPool = Buffer.alloc(0);
let randomOffset = 0;
function randomSpanId(): string {
  if (randomOffset + 8 > randomPool.length) {
    randomPool = crypto.randomBytes(4096);
    randomOffset = 0;
  }
  randomOffset += 8;
  return randomPool.toString('hex', randomOffset - 8, randomOffset);
}

function usageOf(
  api: Api,
  response: JsonObject | null,
): { input: number | null; output: number | null; cacheRead?: number | null; cacheCreation?: number | null } {
  if (api === 'anthropic.messages') return anthropicUsage(response);
  if (api === 'gemini.generate_content') return geminiUsage(response);
  const usage = response?.usage;
  if (usage === null || typeof usage !== 'object' || Array.isArray(usage)) return { input: null, output: null };
  const pick = (...keys: string[]): number | null => {
    for (const key of keys) if (typeof usage[key] === 'number') return usage[key];
    return null;
  };
  return api === 'responses'
    ? { input: pick('input_tokens'), output: pick('output_tokens') }
    : { input: pick('prompt_tokens'), output: pick('completion_tokens') };
}

function finishReasons(api: Api, response: JsonObject | null): string[] {
  if (!response) return [];
  if (api === 'responses') return typeof response.status === 'string' ? [response.status] : [];
  if (api === 'anthropic.messages') return typeof response.stop_reason === 'string' ? [response.stop_reason] : [];
  if (api === 'gemini.generate_content') {
    const candidates = Array.isArray(response.candidates) ? response.candidates : [];
    return candidates.flatMap((c) =>
      c && typeof c === 'object' && !Array.isArray(c) && typeof c.finishReason === 'string' ? [c.finishReason] : [],
    );
  }
  const choices = Array.isArray(response.choices) ? response.choices : [];
  return choices.flatMap((choice) =>
    choice && typeof choice === 'object' && !Array.isArray(choice) && typeof choice.finish_reason === 'string'
      ? [choice.finish_reason]
      : [],
  );
}

/** Exact token ids when the serving engine returned them (vLLM `return_token_ids`, `prompt_token_ids`). */
function tokenIds(response: JsonObject | null): { prompt: Json | undefined; completion: Json | undefined } {
  if (!response) return { prompt: undefined, completion: undefined };
  const first = Array.isArray(response.choices) ? response.choices[0] : undefined;
  const choice = first && typeof first === 'object' && !Array.isArray(first) ? first : undefined;
  return { prompt: response.prompt_token_ids ?? choice?.prompt_token_ids, completion: choice?.token_ids };
}

function responseIdOf(api: Api, response: JsonObject): Json | undefined {
  return api === 'gemini.generate_content' ? response.responseId : response.id;
}

function responseModelOf(api: Api, response: JsonObject): Json | undefined {
  return api === 'gemini.generate_content' ? response.modelVersion : response.model;
}

/** Logprobs of a chat completion's first choice (a translated call's), as numbers. */
function logprobsOf(completion: JsonObject | null | undefined): number[] | undefined {
  const choice = Array.isArray(completion?.choices) ? completion.choices[0] : undefined;
  const logprobs = choice && typeof choice === 'object' && !Array.isArray(choice) ? choice.logprobs : undefined;
  const content = logprobs && typeof logprobs === 'object' && !Array.isArray(logprobs) ? logprobs.content : undefined;
  if (!Array.isArray(content)) return undefined;
  return content.flatMap((entry) =>
    entry && typeof entry === 'object' && !Array.isArray(entry) && typeof entry.logprob === 'number'
      ? [entry.logprob]
      : [],
  );
}

export function callToSpan(record: CallRecord): SpanInput {
  const model = record.model ?? (typeof record.request.model === 'string' ? record.request.model : 'unknown');
  const usage = usageOf(record.api, record.response);
  const ids = tokenIds(record.translated ?? record.response);
  const attributes: JsonObject = {
    'gen_ai.operation.name': OPERATION[record.api],
    'gen_ai.provider.name': PROVIDER[record.api],
    'gen_ai.request.model': model,
    'lightning.api': record.api,
    'lightning.call_index': record.callIndex,
    'lightning.streamed': record.streamed,
    'lightning.upstream': record.upstream,
    'lightning.request': record.request,
    ...outcomeAttributes(record.outcome),
  };
  if (record.retryOf) attributes[RETRY_OF_ATTRIBUTE] = record.retryOf;
  if (typeof record.sdkRetryCount === 'number') attributes['lightning.sdk_retry_count'] = record.sdkRetryCount;
  const generation = record.request.generationConfig;
  const sampling: { [key: string]: Json | undefined } =
    generation && typeof generation === 'object' && !Array.isArray(generation)
      ? {
          ...record.request,
          temperature: generation.temperature,
          top_p: generation.topP,
          max_output_tokens: generation.maxOutputTokens,
        }
      : record.request;
  for (const [key, attribute] of [
    ['temperature', 'temperature'],
    ['top_p', 'top_p'],
    ['max_tokens', 'max_tokens'],
    ['max_completion_tokens', 'max_tokens'],
    ['max_output_tokens', 'max_tokens'],
  ] as const) {
    const value = sampling[key];
    if (typeof value === 'number') attributes[`gen_ai.request.${attribute}`] = value;
  }
  if (record.response) {
    attributes['lightning.response'] = record.response;
    const id = responseIdOf(record.api, record.response);
    const responseModel = responseModelOf(record.api, record.response);
    if (typeof id === 'string') attributes['gen_ai.response.id'] = id;
    if (typeof responseModel === 'string') attributes['gen_ai.response.model'] = responseModel;
  }
  if (typeof usage.cacheRead === 'number') attributes['gen_ai.usage.cache_read.input_tokens'] = usage.cacheRead;
  if (typeof usage.cacheCreation === 'number')
    attributes['gen_ai.usage.cache_creation.input_tokens'] = usage.cacheCreation;
  if (record.translated !== undefined) {
    attributes['lightning.translated_to'] = 'chat.completions';
    const logprobs = logprobsOf(record.translated);
    if (logprobs && logprobs.length > 0) attributes['lightning.response_logprobs'] = logprobs;
  }
  const reasons = finishReasons(record.api, record.response);
  if (reasons.length > 0) attributes['gen_ai.response.finish_reasons'] = reasons;
  if (usage.input !== null) attributes['gen_ai.usage.input_tokens'] = usage.input;
  if (usage.output !== null) attributes['gen_ai.usage.output_tokens'] = usage.output;
  if (ids.prompt !== undefined) attributes['lightning.prompt_token_ids'] = ids.prompt;
  if (ids.completion !== undefined) attributes['lightning.response_token_ids'] = ids.completion;
  if (record.status !== null) attributes['http.response.status_code'] = record.status;
  if (record.tokenIdsRequested) attributes['lightning.engine_token_ids_requested'] = true;
  if (record.firstByteMs !== null)
    attributes['lightning.time_to_first_byte_ms'] = Math.round((record.firstByteMs - record.startMs) * 1000) / 1000;
  const { traceId, parentSpanId } = traceIds(record);
  return {
    traceId,
    spanId: randomSpanId(),
    parentSpanId,
    name: `${OPERATION[record.api]} ${model}`,
    kind: 'client',
    // An embedding is not an action of the policy: it is recorded, but not as an LLM call to train.
    category: record.api === 'embeddings' ? 'other' : 'llm',
    startMs: record.startMs,
    endMs: record.endMs,
    statusCode:
      record.error === null && record.outcome.kind !== 'upstream_error' && record.outcome.kind !== 'cancelled'
        ? 'ok'
        : 'error',
    statusMessage: record.error,
    attributes,
    events: [],
    promptTokens: usage.input,
    completionTokens: usage.output,
  };
}
