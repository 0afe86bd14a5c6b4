/**
 * Pure formatting for the panel: rollout summaries and the parts of an LLM call span (messages,
 * tools, tool calls, response) read from the proxy's `lightning.request` / `lightning.response`
 * attributes (OpenAI chat completions and Responses API shapes; Anthropic and Gemini calls through
 * their chat view, protocol/llmApis.ts), else from `gen_ai.*` attributes.
 */
import type { Json, JsonObject, Rollout, Span } from '../records';
import type { PolicyRef } from '../policy';
import { asChatCall } from '../llmApis';
import { formatDuration } from '../format';
import { callBadge } from '../outcome';
import type { RolloutFilter } from './panelMessages';
import type { RolloutBatchGroup, RolloutRunGroup } from '../rpc';
import type { TrainingAlgorithm } from '../training';
import { runName } from '../runLabel';
import { rolloutCount } from '../format';
import { assertNever } from '../assert';
import { isJsonObject, textOf } from '../json';

export function formatTokens(count: number): string {
  return count < 1_000
    ? String(count)
    : count < 1_000_000
      ? `${(count / 1_000).toFixed(1)}k`
      : `${(count / 1_000_000).toFixed(1)}M`;
}

/** "12:03:04" today, else "2026-11-29 12:03". */
export function formatTime(epochMs: number, now = Date.now()): string {
  const date = new Date(epochMs);
  const pad = (n: number): string => String(n).padStart(2, '0');
  const time = `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
  return new Date(now).toDateString() === date.toDateString()
    ? time
    : `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${time.slice(0, 5)}`;
}

/**
 * What a rollout is called in lists and titles: a batch's rollout (a dataset run, a training
 * iteration) by its task's text — they share one label, the run's — any other by its label.
 */
export function rolloutTitle(rollout: Rollout): string {
  if (rollout.batchId !== null && rollout.task) return taskText(rollout.task) || rollout.label || rollout.id;
  return (
    rollout.label ??
    (rollout.task ? taskText(rollout.task) : null) ??
    (rollout.source.kind === 'command' ? rollout.source.argv.join(' ') : rollout.id)
  );
}

/** The fields a task's input usually keeps its text in, in the order tried. */
const TASK_TEXT_FIELDS = [
  'question',
  'prompt',
  'task',
  'query',
  'input',
  'instruction',
  'text',
  'message',
  'goal',
  'problem',
];

/** A task as one line: its input's text (a string, or the first text field), else its compact JSON, else its id. */
export function taskText(task: { id?: string; input: Json }, max = 120): string {
  const { input } = task;
  let text: string | undefined;
  if (typeof input === 'string') text = input;
  else if (input !== null && typeof input === 'object' && !Array.isArray(input)) {
    for (const field of TASK_TEXT_FIELDS) {
      const value = input[field];
      if (typeof value === 'string' && value.trim()) {
        text = value;
        break;
      }
    }
    text ??= Object.keys(input).length > 0 ? JSON.stringify(input) : undefined;
  } else if (input !== null) text = JSON.stringify(input);
  const line = (text ?? task.id ?? '').replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/**
 * A run of the list, in words: a training run by its algorithm, what it trains and its dataset ("GRPO tiny on
 * sums"), a dataset run by its dataset ("cities · dataset run"); never by an id alone. When it started is
 * `runGroupTime`, beside it.
 */
export function runGroupTitle(run: RolloutRunGroup): string {
  switch (run.kind) {
    case 'training':
      return runName(run.algorithm, run.target, run.dataset);
    case 'batch': {
      const name = run.datasetName ?? run.label;
      return name ? `${name} · dataset run` : `Batch ${run.batchId}`;
    }
    default:
      return assertNever(run);
  }
}

/** When a run of the list started: a training run's creation, a dataset run's first rollout. */
export function runGroupTime(run: RolloutRunGroup, now = Date.now()): string {
  return formatTime(run.kind === 'training' ? run.startedAt : run.createdAt, now);
}

/**
 * A run's counts: "4 iterations · 128 rollouts · 3 failed · 2 running" (APO: its evaluations; a dataset run: its
 * rollouts).
 */
export function runGroupFacts(run: RolloutRunGroup): string {
  const parts: string[] = [];
  if (run.kind === 'training') {
    const { noun, counts } = numberedBatches(run.algorithm);
    const numbered = run.batches.filter((batch) => batch.step !== null && counts(batch)).length;
    if (numbered > 0) parts.push(`${numbered} ${noun}${numbered === 1 ? '' : 's'}`);
  }
  return [...parts, groupFacts(run)].join(' · ');
}

/**
 * What a training run's numbered batches count: APO's evaluations (train or val); GRPO's iterations, by their sampled
 * batch (its validations are beside them); SFT runs none.
 */
function numberedBatches(algorithm: TrainingAlgorithm): {
  readonly noun: string;
  readonly counts: (batch: RolloutBatchGroup) => boolean;
} {
  switch (algorithm) {
    case 'apo':
      return { noun: 'evaluation', counts: () => true };
    case 'grpo':
    case 'sft':
      return { noun: 'iteration', counts: (batch) => batch.mode === 'train' };
    default:
      return assertNever(algorithm);
  }
}

/** A training run's batch, in words: "iteration 4", "validation before training", "evaluation 2", "optimizer calls". */
export function batchTitle(batch: RolloutBatchGroup, algorithm: TrainingAlgorithm): string {
  if (batch.mode === 'optimizer') return 'Optimizer calls';
  if (batch.step === null) return `Batch ${batch.batchId}`;
  switch (algorithm) {
    case 'apo':
      return `Evaluation ${batch.step}`;
    case 'grpo':
    case 'sft':
      if (batch.mode === 'val')
        return `Validation ${batch.step === 0 ? 'before training' : `after iteration ${batch.step}`}`;
      return `Iteration ${batch.step + 1}`;
    default:
      return assertNever(algorithm);
  }
}

/** A group's counts: "128 rollouts · 3 failed · 2 running". */
export function groupFacts(group: { count: number; failed: number; active: number }): string {
  const parts = [rolloutCount(group.count)];
  if (group.failed > 0) parts.push(`${group.failed.toLocaleString('en-US')} failed`);
  if (group.active > 0) parts.push(`${group.active.toLocaleString('en-US')} running`);
  return parts.join(' · ');
}

/** The runs a list leaves out past its limit, and their rollouts: "12 more runs · 3,456 rollouts". */
export function moreRunsText(runs: number, rollouts: number): string {
  return `${runs.toLocaleString('en-US')} more run${runs === 1 ? '' : 's'} · ${rolloutCount(rollouts)}`;
}

/** The list's one count: every matching rollout, as the daemon counted them (the status bar writes it the same way). */
export function countText(total: number, filtered: boolean): string {
  return `${rolloutCount(total)}${filtered ? ' match' : ''}`;
}

/** The list's client-side filter, for rollouts that arrive live (the daemon filters the pages). */
export function matchesFilter(rollout: Rollout, filter: RolloutFilter): boolean {
  if (filter.status && rollout.status !== filter.status) return false;
  if (filter.mode && rollout.mode !== filter.mode) return false;
  if (filter.datasetId && rollout.datasetId !== filter.datasetId) return false;
  if (filter.batchId && rollout.batchId !== filter.batchId) return false;
  if (filter.search) {
    const needle = filter.search.toLowerCase();
    const haystack =
      `${rollout.label ?? ''} ${rollout.task?.id ?? ''} ${JSON.stringify(rollout.task?.input ?? '')}`.toLowerCase();
    if (!haystack.includes(needle)) return false;
  }
  return true;
}

export function rewardText(value: number | null): string {
  if (value === null) return 'unrated';
  if (value === 1) return '1 (good)';
  if (value === 0) return '0 (bad)';
  return String(Number(value.toFixed(4)));
}

export interface ToolCallView {
  readonly name: string;
  readonly arguments: string;
}

export interface MessageView {
  readonly role: string;
  readonly content: string;
  readonly toolCalls: readonly ToolCallView[];
  /** The model's reasoning (Anthropic thinking, Gemini thoughts, `reasoning_content`), shown collapsed. */
  readonly thinking?: string;
}

export interface LlmCallView {
  readonly model: string;
  readonly messages: readonly MessageView[];
  readonly tools: readonly string[];
  readonly response: MessageView | null;
  readonly promptTokens: number | null;
  readonly completionTokens: number | null;
  readonly latencyMs: number | null;
  readonly error: string | null;
}

/** Message content: a string, or an array of parts (`{type: 'text', text}`, `{type: 'input_text', text}`, …). */
function contentText(content: Json | undefined): string {
  if (Array.isArray(content))
    return content
      .map((part) => (isJsonObject(part) ? textOf(part.text ?? part.output ?? part) : textOf(part)))
      .join('\n');
  return textOf(content);
}

function chatToolCalls(calls: Json | undefined): ToolCallView[] {
  if (!Array.isArray(calls)) return [];
  return calls.filter(isJsonObject).map((call) => {
    const fn = isJsonObject(call.function) ? call.function : call;
    return { name: textOf(fn.name), arguments: textOf(fn.arguments) };
  });
}

function chatMessage(message: JsonObject): MessageView {
  const view = {
    role: textOf(message.role) || 'message',
    content: contentText(message.content),
    toolCalls: chatToolCalls(message.tool_calls),
  };
  const thinking = textOf(message.reasoning_content ?? message.reasoning);
  return thinking ? { ...view, thinking } : view;
}

/** Responses API input/output items: messages, function calls and their outputs. */
function responsesItem(item: JsonObject): MessageView {
  if (item.type === 'function_call')
    return {
      role: 'assistant',
      content: '',
      toolCalls: [{ name: textOf(item.name), arguments: textOf(item.arguments) }],
    };
  if (item.type === 'function_call_output') return { role: 'tool', content: textOf(item.output), toolCalls: [] };
  return { role: textOf(item.role) || textOf(item.type), content: contentText(item.content), toolCalls: [] };
}

function requestMessages(request: JsonObject): MessageView[] {
  if (Array.isArray(request.messages)) return request.messages.filter(isJsonObject).map(chatMessage);
  const input = request.input;
  const items: MessageView[] = [];
  if (typeof request.instructions === 'string')
    items.push({ role: 'system', content: request.instructions, toolCalls: [] });
  if (typeof input === 'string') items.push({ role: 'user', content: input, toolCalls: [] });
  else if (Array.isArray(input)) items.push(...input.filter(isJsonObject).map(responsesItem));
  if (typeof request.prompt === 'string') items.push({ role: 'prompt', content: request.prompt, toolCalls: [] });
  return items;
}

function toolNames(request: JsonObject): string[] {
  if (!Array.isArray(request.tools)) return [];
  return request.tools
    .filter(isJsonObject)
    .map((tool) => textOf(isJsonObject(tool.function) ? tool.function.name : (tool.name ?? tool.type)));
}

function responseMessage(response: JsonObject): MessageView | null {
  const choices = response.choices;
  if (Array.isArray(choices) && isJsonObject(choices[0])) {
    const choice = choices[0];
    if (isJsonObject(choice.message)) return chatMessage(choice.message);
    if (typeof choice.text === 'string') return { role: 'assistant', content: choice.text, toolCalls: [] };
  }
  if (Array.isArray(response.output)) {
    const items = response.output.filter(isJsonObject).map(responsesItem);
    return {
      role: 'assistant',
      content: items
        .map((item) => item.content)
        .filter(Boolean)
        .join('\n'),
      toolCalls: items.flatMap((item) => item.toolCalls),
    };
  }
  return null;
}

export function llmCallView(span: Span): LlmCallView {
  const attributes = span.attributes;
  // Anthropic and Gemini calls are shown as chat completions are.
  const chat = asChatCall(attributes);
  const request = chat.request ?? {};
  const response = chat.response;
  const fallback = (key: string): string => textOf(attributes[key]);
  return {
    model:
      textOf(attributes['gen_ai.response.model'] ?? attributes['gen_ai.request.model'] ?? request.model) ||
      'unknown model',
    messages: requestMessages(request),
    tools: toolNames(request),
    response: response
      ? responseMessage(response)
      : fallback('gen_ai.completion')
        ? { role: 'assistant', content: fallback('gen_ai.completion'), toolCalls: [] }
        : null,
    promptTokens: span.promptTokens,
    completionTokens: span.completionTokens,
    latencyMs: span.endMs === null ? null : span.endMs - span.startMs,
    error: span.statusCode === 'error' ? (span.statusMessage ?? 'error') : null,
  };
}

/** Depth of each span in its rollout's span tree (parents outside the rollout count as roots). */
export function spanDepths(spans: readonly Span[]): Map<string, number> {
  const parents = new Map(spans.map((span) => [span.spanId, span.parentSpanId]));
  const depths = new Map<string, number>();
  const depthOf = (id: string, seen = 0): number => {
    const known = depths.get(id);
    if (known !== undefined) return known;
    const parent = parents.get(id);
    const depth = parent && parents.has(parent) && seen < 64 ? depthOf(parent, seen + 1) + 1 : 0;
    depths.set(id, depth);
    return depth;
  };
  for (const span of spans) depthOf(span.spanId);
  return depths;
}

/** "served by checkpoint ckpt-… (run train-…, step 3)", or a training iteration's policy. */
export function servedByText(policy: PolicyRef): string {
  if (policy.checkpointId)
    return `served by checkpoint ${policy.checkpointId} (run ${policy.runId}, step ${policy.step})`;
  return `served by training run ${policy.runId}'s policy at step ${policy.step}${policy.checkpoint === null ? ' (the base model)' : ''}`;
}

/**
 * An LLM call's badge among its rollout's spans: its outcome when it was not a whole answer (`HTTP 429`,
 * `cancelled`, `truncated (…)`) or `stopped at its token cap`, and `retry of #N` when it repeats an attempt
 * (callBadge); null otherwise. `spans`
 * is read at most once, so a Map's `values()` will do.
 */
export function outcomeBadge(span: Span, spans: Iterable<Span>): string | null {
  return callBadge(span, (id) => {
    for (const other of spans) if (other.spanId === id) return other.sequence;
    return undefined;
  });
}

/** A step's one-line heading, as text: its kind and name, what follows them, its error, its outcome badge. */
export interface StepHeading {
  readonly kind: string;
  readonly name: string;
  readonly meta: string;
  readonly error: string | null;
  readonly badge: string | null;
}

/** The panel's heading of a step (its summary line): kind, name, latency and tokens, error, outcome badge. */
export function stepHeading(span: Span, spans: Iterable<Span>): StepHeading {
  const latency = span.endMs === null ? 'running' : formatDuration(span.endMs - span.startMs);
  const tokens =
    span.promptTokens !== null || span.completionTokens !== null
      ? ` · ${span.promptTokens ?? 0}→${span.completionTokens ?? 0} tok`
      : '';
  return {
    kind: span.category,
    name: span.name,
    meta: ` ${latency}${tokens}`,
    error: span.statusCode === 'error' ? ` ${span.statusMessage ?? 'error'}` : null,
    badge: outcomeBadge(span, spans),
  };
}
