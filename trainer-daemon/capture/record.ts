/**
 * Turns one proxied LLM call into a span, named and attributed by the OpenTelemetry GenAI
 * conventions (`gen_ai.*`), with the full request and (reassembled) response kept under
 * `lightning.request` / `lightning.response` for the trajectory view and for training. Secrets are
 * scrubbed (protocol/secrets.ts) before anything is stored.
 */
import crypto from 'node:crypto';
import type { Json, SpanInput } from '../protocol';
import { scrubSecrets } from '../protocol/secrets';
import type { Api } from './reassemble';

type JsonObject = { [key: string]: Json };

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
  /** Whether the proxy asked the engine for token ids and logprobs the agent did not ask for. */
  readonly tokenIdsRequested: boolean;
  /** From a W3C `traceparent` request header, when the agent's HTTP client is instrumented. */
  readonly traceparent: string | undefined;
}

const OPERATION: Record<Api, string> = {
  'chat.completions': 'chat',
  completions: 'text_completion',
  responses: 'chat',
  embeddings: 'embeddings',
};

function traceIds(record: CallRecord): { traceId: string; parentSpanId: string | null } {
  const match = /^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/.exec(record.traceparent ?? '');
  if (match && !/^0+$/.test(match[1]!)) return { traceId: match[1]!, parentSpanId: match[2]! };
  // Without a traceparent, all of a rollout's proxied calls share one trace derived from its id.
  return { traceId: crypto.createHash('sha256').update(record.rolloutId).digest('hex').slice(0, 32), parentSpanId: null };
}

function usageOf(api: Api, response: JsonObject | null): { input: number | null; output: number | null } {
  const usage = response?.usage;
  if (usage === null || typeof usage !== 'object' || Array.isArray(usage)) return { input: null, output: null };
  const pick = (...keys: string[]): number | null => {
    for (const key of keys) if (typeof usage[key] === 'number') return usage[key] as number;
    return null;
  };
  return api === 'responses' ? { input: pick('input_tokens'), output: pick('output_tokens') } : { input: pick('prompt_tokens'), output: pick('completion_tokens') };
}

function finishReasons(api: Api, response: JsonObject | null): string[] {
  if (!response) return [];
  if (api === 'responses') return typeof response.status === 'string' ? [response.status] : [];
  const choices = Array.isArray(response.choices) ? response.choices : [];
  return choices.flatMap((choice) => (choice && typeof choice === 'object' && !Array.isArray(choice) && typeof choice.finish_reason === 'string' ? [choice.finish_reason] : []));
}

/** Exact token ids when the serving engine returned them (vLLM `return_token_ids`, `prompt_token_ids`). */
function tokenIds(response: JsonObject | null): { prompt: Json | undefined; completion: Json | undefined } {
  if (!response) return { prompt: undefined, completion: undefined };
  const first = Array.isArray(response.choices) ? response.choices[0] : undefined;
  const choice = first && typeof first === 'object' && !Array.isArray(first) ? first : undefined;
  return { prompt: response.prompt_token_ids ?? choice?.prompt_token_ids, completion: choice?.token_ids };
}

export function callToSpan(record: CallRecord): SpanInput {
  const model = typeof record.request.model === 'string' ? record.request.model : 'unknown';
  const usage = usageOf(record.api, record.response);
  const ids = tokenIds(record.response);
  const attributes: JsonObject = {
    'gen_ai.operation.name': OPERATION[record.api],
    'gen_ai.provider.name': 'openai',
    'gen_ai.request.model': model,
    'lightning.api': record.api,
    'lightning.call_index': record.callIndex,
    'lightning.streamed': record.streamed,
    'lightning.upstream': record.upstream,
    'lightning.request': scrubSecrets(record.request),
  };
  for (const [key, attribute] of [['temperature', 'temperature'], ['top_p', 'top_p'], ['max_tokens', 'max_tokens'], ['max_completion_tokens', 'max_tokens'], ['max_output_tokens', 'max_tokens']] as const) {
    if (typeof record.request[key] === 'number') attributes[`gen_ai.request.${attribute}`] = record.request[key];
  }
  if (record.response) {
    attributes['lightning.response'] = scrubSecrets(record.response);
    if (typeof record.response.id === 'string') attributes['gen_ai.response.id'] = record.response.id;
    if (typeof record.response.model === 'string') attributes['gen_ai.response.model'] = record.response.model;
  }
  const reasons = finishReasons(record.api, record.response);
  if (reasons.length > 0) attributes['gen_ai.response.finish_reasons'] = reasons;
  if (usage.input !== null) attributes['gen_ai.usage.input_tokens'] = usage.input;
  if (usage.output !== null) attributes['gen_ai.usage.output_tokens'] = usage.output;
  if (ids.prompt !== undefined) attributes['lightning.prompt_token_ids'] = ids.prompt;
  if (ids.completion !== undefined) attributes['lightning.response_token_ids'] = ids.completion;
  if (record.status !== null) attributes['http.response.status_code'] = record.status;
  if (record.tokenIdsRequested) attributes['lightning.engine_token_ids_requested'] = true;
  if (record.firstByteMs !== null) attributes['lightning.time_to_first_byte_ms'] = Math.round((record.firstByteMs - record.startMs) * 1000) / 1000;
  const { traceId, parentSpanId } = traceIds(record);
  return {
    traceId,
    spanId: crypto.randomBytes(8).toString('hex'),
    parentSpanId,
    name: `${OPERATION[record.api]} ${model}`,
    kind: 'client',
    // An embedding is not an action of the policy: it is recorded, but not as an LLM call to train.
    category: record.api === 'embeddings' ? 'other' : 'llm',
    startMs: record.startMs,
    endMs: record.endMs,
    statusCode: record.error === null ? 'ok' : 'error',
    statusMessage: record.error,
    attributes,
    events: [],
    promptTokens: usage.input,
    completionTokens: usage.output,
  };
}
