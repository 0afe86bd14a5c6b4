/**
 * From a recorded trajectory to its LLM calls, in order, each attributed to the agent that made it
 * (LightningRL's first step). Works for any agent: calls come from the proxy's records
 * (exact request and response) or from OTLP spans; the span tree gives the enclosing agent, with
 * missing parents repaired by time containment.
 */
import {
  POLICY_ATTRIBUTE,
  stoppedAtTokenCap,
  TrainingChatReader,
  textOf,
  type Json,
  type JsonObject,
  type Reward,
  type TrainingChat,
} from '../protocol';
import type { TrainingSpan as Span } from '../protocol/lightningrl';
import { asJsonObject } from '../protocol/json';

export interface LlmCall {
  readonly span: Span;
  readonly agentName: string | null;
  readonly api: string;
  readonly model: string | null;
  readonly messages: JsonObject[] | null;
  readonly input: Json | null;
  readonly tools: Json[] | null;
  readonly message: JsonObject | null;
  readonly output: Json[] | null;
  readonly text: string | null;
  readonly promptTokenIds: number[] | null;
  readonly responseTokenIds: number[] | null;
  readonly logprobs: number[] | null;
  /** How many choices the answer had: only the first is trained on (n > 1). */
  readonly choices: number;
  /** Why the call has no chat form (messages or reply null), e.g. a legacy /completions call. */
  readonly notChat: string | null;
  /** The reply stopped at the request's output-token cap (protocol/outcome.ts `stoppedAtTokenCap`). */
  readonly stoppedAtTokenCap: boolean;
  /** Step rewards credited to this call (annotations on it, reward spans after it). */
  stepReward: number;
}

const AGENT_NAME_KEYS = [
  'gen_ai.agent.name',
  'agent.name',
  'ai.telemetry.functionId',
  'langgraph.node',
  'openinference.agent.name',
];

function ints(value: Json | undefined): number[] | null {
  return Array.isArray(value) && value.every((v) => typeof v === 'number' && Number.isInteger(v))
    ? (value as number[])
    : null;
}

/**
 * Logprobs one per token, or none: an entry without a finite value (null, a string) makes the list null rather than
 * shorter, which would pair each later logprob with the wrong token (the worker recomputes missing ones).
 */
function allFinite(values: number[]): number[] | null {
  return values.every(Number.isFinite) ? values : null;
}

function numbers(value: Json | undefined): number[] | null {
  return Array.isArray(value) && value.every((v) => typeof v === 'number') ? value : null;
}

function agentNameOf(span: Span): string | null {
  for (const key of AGENT_NAME_KEYS) {
    const value = span.attributes[key];
    if (typeof value === 'string' && value !== '') return value;
  }
  return null;
}

/**
 * Each span's parent: as recorded, or — when the recorded parent never arrived (an exporter that
 * dropped it, a crash) — the tightest span of the same trace whose time range contains it.
 */
export function repairParents(spans: readonly Span[]): Map<string, Span | null> {
  const byId = new Map(spans.map((span) => [span.spanId, span]));
  const parents = new Map<string, Span | null>();
  for (const span of spans) {
    const recorded = span.parentSpanId === null ? undefined : byId.get(span.parentSpanId);
    if (recorded || span.parentSpanId === null) {
      parents.set(span.spanId, recorded ?? null);
      continue;
    }
    let best: Span | null = null;
    for (const candidate of spans) {
      if (candidate === span || candidate.traceId !== span.traceId || candidate.endMs === null || span.endMs === null)
        continue;
      if (candidate.startMs > span.startMs || candidate.endMs < span.endMs) continue;
      if (!best || candidate.endMs - candidate.startMs < best.endMs! - best.startMs) best = candidate;
    }
    parents.set(span.spanId, best);
  }
  return parents;
}

/** The nearest enclosing agent's name (or the span's own), walking up the repaired tree. */
function enclosingAgent(span: Span, parents: ReadonlyMap<string, Span | null>): string | null {
  const seen = new Set<string>();
  for (
    let current: Span | null | undefined = span;
    current && !seen.has(current.spanId);
    current = parents.get(current.spanId)
  ) {
    seen.add(current.spanId);
    const name = agentNameOf(current);
    if (name && (current === span || current.category === 'agent')) return name;
  }
  return null;
}

/**
 * Messages from the older flattened GenAI attributes (OpenLLMetry's): `gen_ai.prompt.N.role/content`, an assistant
 * turn's calls as `….N.tool_calls.J.id/name/arguments`, a tool result's `….N.tool_call_id`.
 */
function flattenedMessages(attributes: JsonObject, prefix: 'gen_ai.prompt' | 'gen_ai.completion'): JsonObject[] | null {
  const messages: JsonObject[] = [];
  for (let i = 0; `${prefix}.${i}.role` in attributes || `${prefix}.${i}.content` in attributes; i += 1) {
    const at = (field: string): Json | undefined => attributes[`${prefix}.${i}.${field}`];
    const message: JsonObject = { role: at('role') ?? 'user', content: at('content') ?? null };
    const calls: JsonObject[] = [];
    for (let j = 0; `${prefix}.${i}.tool_calls.${j}.name` in attributes; j += 1) {
      const args = at(`tool_calls.${j}.arguments`);
      calls.push({
        id: textOf(at(`tool_calls.${j}.id`)),
        type: 'function',
        function: {
          name: textOf(at(`tool_calls.${j}.name`)),
          arguments: typeof args === 'string' ? args : JSON.stringify(args ?? {}),
        },
      });
    }
    if (calls.length > 0) message.tool_calls = calls;
    const toolCallId = at('tool_call_id');
    if (typeof toolCallId === 'string') message.tool_call_id = toolCallId;
    messages.push(message);
  }
  return messages.length ? messages : null;
}

function callOf(span: Span, agentName: string | null, chat: TrainingChat): LlmCall {
  const attributes = span.attributes as JsonObject;
  // Every API is read as chat completions (protocol/llmApis.ts, openaiChat.ts); Responses and legacy
  // completions keep what they sent and got as `input` and `output` too.
  const request = chat.request ?? undefined;
  const response = chat.response ?? undefined;
  const recordedRequest = asJsonObject(attributes['lightning.request']);
  const recordedResponse = asJsonObject(attributes['lightning.response']);
  const choice = asJsonObject(Array.isArray(response?.choices) ? response.choices[0] : undefined);
  const message = asJsonObject(choice?.message) ?? flattenedMessages(attributes, 'gen_ai.completion')?.[0] ?? null;
  const output = Array.isArray(recordedResponse?.output) ? recordedResponse.output : null;
  const content = message?.content;
  const outputText = output
    ?.flatMap((item) =>
      asJsonObject(item)?.type === 'message' && Array.isArray(asJsonObject(item)!.content)
        ? (asJsonObject(item)!.content as Json[])
        : [],
    )
    .map((part) => textOf(asJsonObject(part)?.text))
    .join('');
  const logprobContent = asJsonObject(choice?.logprobs)?.content;
  // Legacy completions: one number (null for the first prompt token under `echo`) per token.
  const tokenLogprobs = asJsonObject(choice?.logprobs)?.token_logprobs;
  return {
    span,
    agentName,
    api:
      typeof attributes['lightning.api'] === 'string'
        ? attributes['lightning.api']
        : textOf(attributes['gen_ai.operation.name'], 'llm'),
    model:
      typeof attributes['gen_ai.response.model'] === 'string'
        ? attributes['gen_ai.response.model']
        : typeof attributes['gen_ai.request.model'] === 'string'
          ? attributes['gen_ai.request.model']
          : null,
    messages: Array.isArray(request?.messages)
      ? (request.messages.filter((m) => asJsonObject(m)) as JsonObject[])
      : chat.issue === null
        ? flattenedMessages(attributes, 'gen_ai.prompt')
        : null,
    input: recordedRequest?.input ?? recordedRequest?.prompt ?? null,
    tools: Array.isArray(request?.tools) ? request.tools : null,
    message,
    output,
    text: typeof content === 'string' ? content : typeof choice?.text === 'string' ? choice.text : outputText || null,
    promptTokenIds: ints(attributes['lightning.prompt_token_ids']),
    responseTokenIds: ints(attributes['lightning.response_token_ids']),
    logprobs: Array.isArray(logprobContent)
      ? allFinite(logprobContent.map((entry) => Number(asJsonObject(entry)?.logprob ?? Number.NaN)))
      : Array.isArray(tokenLogprobs)
        ? allFinite(tokenLogprobs.map((value) => (typeof value === 'number' ? value : Number.NaN)))
        : numbers(attributes['lightning.response_logprobs']),
    choices: chat.choices,
    notChat: chat.issue,
    stoppedAtTokenCap: stoppedAtTokenCap(attributes),
    stepReward: 0,
  };
}

/** A finite number, also written as text (some agents set `str(score)`). */
function finiteNumber(value: Json | undefined): number | null {
  const number = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  return typeof number === 'number' && Number.isFinite(number) ? number : null;
}

/**
 * A reward span's value for the reward trained (`rewardName`). Agent Lightning's current spans
 * (`agentlightning.annotation`) carry named rewards as `agentlightning.reward.N.name/value`: the one named
 * `rewardName`, else its `primary` (what `emit_reward(x)` writes), else a lone one. Older spans carry one value
 * (`agentlightning.reward`, `reward`, their `.value`).
 */
function rewardSpanValue(span: Span, rewardName: string): number | null {
  for (const key of ['agentlightning.reward', 'agentlightning.reward.value', 'reward', 'reward.value']) {
    const value = finiteNumber(span.attributes[key]);
    if (value !== null) return value;
  }
  const named: Array<{ name: Json | undefined; value: number | null }> = [];
  for (let i = 0; `agentlightning.reward.${i}.value` in span.attributes; i += 1)
    named.push({
      name: span.attributes[`agentlightning.reward.${i}.name`],
      value: finiteNumber(span.attributes[`agentlightning.reward.${i}.value`]),
    });
  const chosen =
    named.find((r) => r.name === rewardName) ??
    named.find((r) => r.name === 'primary') ??
    (named.length === 1 ? named[0] : undefined);
  return chosen?.value ?? null;
}

/**
 * The agent an LLM call of these spans belongs to, as training attributes it: the nearest enclosing agent span (its
 * OTLP twin's chain first: it carries the framework's parents for the proxy's record of the same call), else the
 * call's own name (the baggage's, recorded by the proxy); null when none names one.
 */
export function callAgent(spans: readonly Span[]): (call: Span) => string | null {
  const parents = repairParents(spans);
  const twinOf = new Map<string, Span>();
  for (const span of spans) {
    const same = span.attributes['lightning.same_call_as'];
    if (typeof same === 'string') twinOf.set(same, span);
  }
  return (call) => enclosingAgent(twinOf.get(call.spanId) ?? call, parents) ?? enclosingAgent(call, parents);
}

/**
 * The rollout's LLM calls (category `llm`, in sequence order — the proxy's twin of an OTLP span
 * is already the only `llm` one), those of agents matching `agentMatch` (and, with several policies, those `policy`'s
 * adapter answered: their `lightning.policy`), with step rewards
 * attached: annotations on a call's span, and reward spans or step annotations on other spans go
 * to the call that precedes them.
 */
export function extractCalls(
  spans: readonly Span[],
  rewards: readonly Reward[],
  rewardName: string,
  agentMatch?: RegExp,
  policy?: string,
): LlmCall[] {
  const agentOf = callAgent(spans);
  const ordered = [...spans].sort((a, b) => a.sequence - b.sequence);
  const calls: LlmCall[] = [];
  // A step's annotation: its latest human one, else its latest of any source (annotations are append-only).
  const stepRewards = new Map<string, Reward>();
  for (const reward of rewards) {
    if (reward.spanId === null || reward.name !== rewardName) continue;
    const current = stepRewards.get(reward.spanId);
    if (!current || reward.source === 'human' || current.source !== 'human') stepRewards.set(reward.spanId, reward);
  }
  // The call that rewards on later spans belong to; null after a call of an agent not trained.
  let current: LlmCall | null = null;
  // Every LLM call so far, trained (its call) or not (null): a reward after another agent's call is that call's.
  const seen: Array<{ readonly span: Span; readonly call: LlmCall | null }> = [];
  // Every call is read, trained or not: a later Responses call may continue its conversation.
  const reader = new TrainingChatReader();
  for (const span of ordered) {
    if (span.category === 'llm') {
      const chat = reader.read(span.attributes);
      const agentName = agentOf(span);
      const trained =
        (!agentMatch || (agentName !== null && agentMatch.test(agentName))) &&
        (policy === undefined || span.attributes[POLICY_ATTRIBUTE] === policy);
      current = trained ? callOf(span, agentName, chat) : null;
      seen.push({ span, call: current });
      if (current) calls.push(current);
    }
    if (span.category === 'llm') {
      if (current) current.stepReward += stepRewards.get(span.spanId)?.value ?? 0;
      continue;
    }
    // A span written after its attempt ended (store/spans.ts) is kept to read, not to train: its reward is no step's.
    if ('lightning.late' in span.attributes) continue;
    const value =
      (span.category === 'reward' ? (rewardSpanValue(span, rewardName) ?? 0) : 0) +
      (stepRewards.get(span.spanId)?.value ?? 0);
    if (value === 0) continue;
    // Reward spans may arrive late (OTLP batches): credit the last call that ended before the reward — dropped when
    // that call is of an agent not trained, never moved to a trained one.
    const before = seen.filter((c) => c.span.endMs !== null && c.span.endMs <= span.startMs).at(-1);
    const target = before ? before.call : current;
    if (target) target.stepReward += value;
  }
  return calls;
}
