/**
 * LightningRL end to end: trajectories → selected LLM calls → episode rewards → credit →
 * advantages → single-call transitions (docs/export.md), and the OpenAI fine-tuning
 * chat format for supervised training on the best rollouts.
 */
import {
  noSkippedCalls,
  type AdvantageOptions,
  type CallOutcome,
  type CreditOptions,
  type ExportReport,
  type Json,
  type RewardPolicy,
  type Transition,
} from '../protocol';
import type { Trajectory } from '../protocol/lightningrl';
import { extractCalls, type LlmCall } from './adapter';
import { aggregateRollout, type AggregationStats } from './aggregate';
import { creditRewards, filledReward, givenEpisodeReward, rolloutAdvantages } from './credit';
import { wholeAnswers, type KeptCall } from './wholeAnswers';

export interface LightningRlOptions {
  readonly reward: RewardPolicy;
  readonly credit: CreditOptions;
  readonly advantage: AdvantageOptions;
  /** Train only the calls of agents whose name matches (multi-agent selective training). */
  readonly agentMatch?: RegExp;
  /** Several policies: train only the calls this policy's adapter answered (their span's `lightning.policy`). */
  readonly policy?: string;
  /** Leave out rollouts whose episode reward is below this. */
  readonly minReward?: number;
  /** Join consecutive calls whose prompt extends the previous sequence (needs engine token ids). */
  readonly aggregate?: boolean;
  /** Keep calls that were not whole answers (upstream errors, cancelled, truncated), each flagged with its outcome. */
  readonly includeFailed?: boolean;
}

interface Selected {
  readonly trajectory: Trajectory;
  readonly reward: number;
  readonly calls: KeptCall[];
}

/** A rollout its group's advantages compare: rewarded, with a call of the agents (policy) trained. */
export interface GroupMember {
  readonly id: string;
  /** Its dataset's task (`groupKey`), null for a rollout without a task (a group of its own). */
  readonly group: string | null;
  readonly reward: number;
}

export function buildTransitions(
  trajectories: Iterable<Trajectory>,
  options: LightningRlOptions,
): { transitions: Transition[]; report: ExportReport; members: readonly GroupMember[] } {
  const report: ExportReport = {
    rollouts: 0,
    exported: 0,
    transitions: 0,
    excludedNoReward: 0,
    filledNoReward: 0,
    excludedBelowMinReward: 0,
    excludedNoCalls: 0,
    skipped: noSkippedCalls(),
    otherChoices: 0,
    singletonGroups: 0,
    zeroVarianceGroups: 0,
    aggregated: null,
  };
  const aggregation: AggregationStats = {
    merged: 0,
    mismatches: 0,
    withoutTokenIds: 0,
    notWhole: 0,
    advantageDiffers: 0,
  };
  const rewarded: GroupMember[] = [];
  const selected: Selected[] = [];
  for (const trajectory of trajectories) {
    report.rollouts += 1;
    const given = givenEpisodeReward(trajectory.rewards, options.reward.name);
    const reward = filledReward(given, options.reward);
    if (reward === null) {
      report.excludedNoReward += 1;
      continue;
    }
    // The calls of the agents (policy) trained, whole or not: a rollout without any is no sample of theirs.
    const selectedCalls = extractCalls(
      trajectory.spans,
      trajectory.rewards,
      options.reward.name,
      options.agentMatch,
      options.policy,
    );
    if (selectedCalls.length === 0) {
      report.excludedNoCalls += 1;
      continue;
    }
    rewarded.push({ id: trajectory.rollout.id, group: groupKey(trajectory.rollout), reward });
    if (options.minReward !== undefined && reward < options.minReward) {
      report.excludedBelowMinReward += 1;
      continue;
    }
    // Counted for the rollouts exported only: `--include-failed` would keep exactly these.
    const calls = wholeAnswers(selectedCalls, options.includeFailed ?? false, report.skipped);
    if (calls.length === 0) {
      report.excludedNoCalls += 1;
      continue;
    }
    if (given === null) report.filledNoReward += 1;
    selected.push({ trajectory, reward, calls });
  }

  // Groups are a task of a dataset (ids like task-1 repeat across datasets). Advantages compare every rewarded
  // rollout of the group with a call of the agents (policy) trained: whether those calls were whole answers, and
  // --min-reward, only pick the rows exported, never the group a row is compared with.
  const { advantages, stats } = rolloutAdvantages(rewarded, options.advantage);
  report.singletonGroups = stats.singletonGroups;
  report.zeroVarianceGroups = stats.zeroVarianceGroups;

  const transitions: Transition[] = [];
  for (const { trajectory, reward, calls } of selected) {
    const credited = creditRewards(
      reward,
      calls.map((c) => c.call.stepReward),
      options.credit,
    );
    const rolloutAdvantage = advantages?.get(trajectory.rollout.id);
    for (const { call } of calls) report.otherChoices += Math.max(0, call.choices - 1);
    const samples = calls.map(({ call, outcome }, step) =>
      transition(trajectory, call, outcome, {
        step,
        episodeReward: reward,
        reward: credited[step]!,
        advantage: rolloutAdvantage ?? credited[step]!,
      }),
    );
    transitions.push(...(options.aggregate ? aggregateRollout(samples, aggregation) : samples));
    report.exported += 1;
  }
  report.transitions = transitions.length;
  if (options.aggregate) report.aggregated = aggregation;
  return { transitions, report, members: rewarded };
}

/** The group a rollout's advantage compares it within: its dataset's task (task ids repeat across datasets). */
export function groupKey(rollout: Trajectory['rollout']): string | null {
  return rollout.task?.id === undefined ? null : `${rollout.datasetId ?? ''}\u0000${rollout.task.id}`;
}

/** A call's numbers as a training row: its step in the trajectory, the episode's reward, its credit, its advantage. */
interface CallNumbers {
  readonly step: number;
  readonly episodeReward: number;
  readonly reward: number;
  readonly advantage: number;
}

function transition(
  trajectory: Trajectory,
  call: LlmCall,
  outcome: CallOutcome,
  { step, episodeReward, reward, advantage }: CallNumbers,
): Transition {
  const tokenIds = call.responseTokenIds;
  return {
    rolloutId: trajectory.rollout.id,
    taskId: trajectory.rollout.task?.id ?? null,
    step,
    spanId: call.span.spanId,
    spanIds: [call.span.spanId],
    agentName: call.agentName,
    model: call.model,
    api: call.api,
    prompt: { messages: call.messages, input: call.input, tools: call.tools },
    response: { message: call.message, output: call.output, text: call.text },
    promptTokenIds: call.promptTokenIds,
    responseTokenIds: tokenIds,
    needsTokenization: call.promptTokenIds === null || tokenIds === null,
    logprobs: call.logprobs,
    // The whole response is the action; environment tokens only appear once calls are aggregated.
    lossMask: tokenIds ? tokenIds.map(() => 1) : null,
    episodeReward,
    reward,
    advantage,
    // Only a call kept by --include-failed carries it: every other row is a whole answer.
    ...(outcome.kind === 'ok' ? {} : { outcome }),
    ...(notChatOf(call) === null ? {} : { notChat: notChatOf(call)! }),
    // A whole answer only: a failed call (kept by --include-failed) says how it ended in `outcome`.
    ...(call.stoppedAtTokenCap && outcome.kind === 'ok' ? { stoppedAtTokenCap: true as const } : {}),
  };
}

/** Why a chat row leaves out a reply cut at its token cap (`--include-failed` keeps it, flagged). */
export const TOKEN_CAP_REASON =
  'the reply stopped at its output-token cap (finish reason length / max_tokens): a cut reply is no demonstration';
const NO_MESSAGES = 'the call records no chat messages (an OTLP span without gen_ai prompt attributes)';
const NO_REPLY = 'the call records no reply';

/** Why a call has no chat form (its reader's reason, no messages, no reply), or null: a transition carries it. */
function notChatOf(call: LlmCall): string | null {
  return call.notChat ?? (call.messages ? (call.message ? null : NO_REPLY) : NO_MESSAGES);
}

/** An OpenAI fine-tuning chat example: the prompt messages, the model's reply (with its tool calls), its tools. */
export type ChatExample = {
  readonly messages: Json[];
  readonly tools?: Json[];
};

/**
 * A transition as an OpenAI fine-tuning chat example, or why it cannot be one. Every API's call is
 * read as chat (Responses items, legacy functions as tools, Anthropic, Gemini); what is left has its
 * reason: a legacy /completions text prompt, a hosted tool's item, no reply recorded, a reply cut at its token cap
 * (unless `keepCapped`: `--include-failed`).
 */
export function toChatExample(
  transition: Transition,
  keepCapped = false,
): { example: ChatExample } | { reason: string } {
  const { messages, tools } = transition.prompt;
  const reply = transition.response.message;
  if (transition.notChat !== undefined) return { reason: transition.notChat };
  if (transition.stoppedAtTokenCap && !keepCapped) return { reason: TOKEN_CAP_REASON };
  if (!messages) return { reason: NO_MESSAGES };
  if (!reply) return { reason: NO_REPLY };
  const assistant: { [key: string]: Json } = { role: 'assistant', content: reply.content ?? null };
  if (Array.isArray(reply.tool_calls) && reply.tool_calls.length > 0) assistant.tool_calls = reply.tool_calls;
  return { example: { messages: [...messages, assistant], ...(tools && tools.length > 0 ? { tools } : {}) } };
}
