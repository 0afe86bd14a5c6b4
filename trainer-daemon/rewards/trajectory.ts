/**
 * What reward sources see of a rollout: its final answer, LLM calls, tool calls and counters,
 * derived once from the recorded spans (the same call extraction LightningRL uses), so every rule,
 * reward function, judge and reward model reads the same trajectory.
 */
import {
  noSkippedCalls,
  type ScoringTask,
  type ScoringTrajectory,
  type SkippedCalls,
  type Task,
  type ToolCall,
} from '../protocol';
import { extractCalls, type LlmCall } from '../lightningrl/adapter';
import { wholeAnswers } from '../lightningrl/wholeAnswers';
import type { Trajectory } from '../protocol/lightningrl';
import { asJsonObject } from '../protocol/json';

/**
 * Tool calls an LLM response asked for: its chat reply's `tool_calls` (a Responses call's `function_call`
 * items are read into it, protocol/openaiChat.ts), else — a reply with no chat form — the `function_call` items.
 */
function toolCallsOf(call: LlmCall): ToolCall[] {
  const chat = Array.isArray(call.message?.tool_calls) ? call.message.tool_calls : [];
  const fromChat = chat.flatMap((entry) => {
    const fn = asJsonObject(asJsonObject(entry)?.function);
    return typeof fn?.name === 'string'
      ? [
          {
            name: fn.name,
            arguments: typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? null),
          },
        ]
      : [];
  });
  const fromResponses = (call.output ?? []).flatMap((item) => {
    const entry = asJsonObject(item);
    return entry?.type === 'function_call' && typeof entry.name === 'string'
      ? [{ name: entry.name, arguments: typeof entry.arguments === 'string' ? entry.arguments : '' }]
      : [];
  });
  return call.message ? fromChat : fromResponses;
}

/** Tools seen as spans (frameworks that trace tool execution): the GenAI tool name, else the span name. */
function toolSpanCalls(trajectory: Trajectory): ToolCall[] {
  return trajectory.spans
    .filter((span) => span.category === 'tool')
    .map((span) => {
      const name = span.attributes['gen_ai.tool.name'] ?? span.attributes['tool.name'];
      const args = span.attributes['gen_ai.tool.call.arguments'] ?? span.attributes['tool.arguments'];
      return { name: typeof name === 'string' ? name : span.name, arguments: typeof args === 'string' ? args : '' };
    });
}

/** The agent's own report of its answer: the latest span carrying `lightning.answer`. */
function reportedAnswer(trajectory: Trajectory): string | null {
  for (let i = trajectory.spans.length - 1; i >= 0; i -= 1) {
    const value = trajectory.spans[i]!.attributes['lightning.answer'];
    if (value !== undefined) return typeof value === 'string' ? value : JSON.stringify(value);
  }
  return null;
}

/**
 * The trajectory a reward source (and APO's critique) reads: its whole answers only — a failed
 * attempt, a cancelled stream or a truncated record is neither a step nor the final answer. The
 * calls left out are counted into `skipped`.
 */
export function toScoringTrajectory(
  trajectory: Trajectory,
  skipped: SkippedCalls = noSkippedCalls(),
): ScoringTrajectory {
  const { rollout } = trajectory;
  const llmCalls = wholeAnswers(extractCalls(trajectory.spans, [], 'reward'), false, skipped).map((kept) => kept.call);
  const calls = llmCalls.map((call) => ({
    model: call.model,
    messages: call.messages,
    content: call.text,
    toolCalls: toolCallsOf(call),
  }));
  const requested = calls.flatMap((call) => call.toolCalls);
  return {
    rolloutId: rollout.id,
    status: rollout.status,
    error: rollout.error,
    finalAnswer: reportedAnswer(trajectory) ?? calls.at(-1)?.content ?? null,
    calls,
    toolCalls: requested.length > 0 ? requested : toolSpanCalls(trajectory),
    steps: calls.length,
    promptTokens: rollout.promptTokens,
    completionTokens: rollout.completionTokens,
    errorSpans: trajectory.spans.filter((span) => span.statusCode === 'error').length,
  };
}

/**
 * The rollout's task with its expected answer: from its dataset's task when it came from one, else
 * the `expected` field of an object task input (`lightning run --task '{"q":…,"expected":…}'`).
 */
export function toScoringTask(trajectory: Trajectory, datasetTask: Task | undefined): ScoringTask {
  const task = trajectory.rollout.task;
  const expected = datasetTask?.expected ?? asJsonObject(task?.input ?? null)?.expected ?? null;
  return { id: task?.id ?? null, input: task?.input ?? null, expected };
}
