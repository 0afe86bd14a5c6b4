/**
 * LightningRL's output (DESIGN.md, "LightningRL"): single-call training transitions with their
 * credit and advantage, and the options that decide them. `lightning export` writes these records
 * one per line; the trainer worker reads them.
 */
import { z } from 'zod';
import { Json } from './records';

/** Which reward is a rollout's episode reward. */
export const RewardPolicy = z.object({
  /** Reward dimension used as the episode reward. */
  name: z.string().default('reward'),
  /** Rollouts without any episode reward: left out, or given `fillValue`. */
  missing: z.enum(['exclude', 'fill']).default('exclude'),
  fillValue: z.number().finite().default(0),
});
export type RewardPolicy = z.infer<typeof RewardPolicy>;

/** How the episode reward is credited to the rollout's LLM calls. */
export const CreditOptions = z.discriminatedUnion('kind', [
  /** The paper's default: every transition gets the episode reward R. */
  z.object({ kind: z.literal('identical') }),
  /** γ^(T−t)·R: later calls get more of the credit. */
  z.object({ kind: z.literal('discounted'), gamma: z.number().gt(0).lte(1) }),
  /** Each call gets the step rewards annotated on it (or reward spans after it), the last call also R. */
  z.object({ kind: z.literal('step') }),
]);
export type CreditOptions = z.infer<typeof CreditOptions>;

/** How advantages are computed from episode rewards, per group of rollouts of the same task. */
export const AdvantageOptions = z.object({
  /** grpo: (R − mean) / (std + ε) or (R − mean); baseline: R − mean of all rollouts; none: the credited reward. */
  kind: z.enum(['grpo', 'baseline', 'none']).default('grpo'),
  normalizeStd: z.boolean().default(true),
  epsilon: z.number().positive().default(1e-6),
});
export type AdvantageOptions = z.infer<typeof AdvantageOptions>;

export const ChatMessage = z.record(z.string(), Json);

export const Transition = z.object({
  rolloutId: z.string(),
  taskId: z.string().nullable(),
  /** 0-based position of this call among the rollout's selected calls. */
  step: z.number().int().nonnegative(),
  spanId: z.string(),
  /** Every LLM call in this sample: one, or several when aggregated into one sequence. */
  spanIds: z.array(z.string()).min(1),
  agentName: z.string().nullable(),
  model: z.string().nullable(),
  api: z.string(),
  /** State: what the model was given. */
  prompt: z.object({ messages: z.array(ChatMessage).nullable(), input: Json.nullable(), tools: z.array(Json).nullable() }),
  /** Action: what the model answered (the assistant message, or the Responses output items). */
  response: z.object({ message: ChatMessage.nullable(), output: z.array(Json).nullable(), text: z.string().nullable() }),
  /** Exact token ids from the serving engine; null when it gave none (the trainer then re-tokenizes). */
  promptTokenIds: z.array(z.number().int()).nullable(),
  responseTokenIds: z.array(z.number().int()).nullable(),
  /** True when token ids are missing here and must be produced by re-tokenizing the text. */
  needsTokenization: z.boolean(),
  logprobs: z.array(z.number()).nullable(),
  /** Loss mask over responseTokenIds (1 = trained, 0 = tokens the environment inserted); null without token ids. */
  lossMask: z.array(z.number().int().min(0).max(1)).nullable(),
  /** The episode reward and the reward credited to this call. */
  episodeReward: z.number(),
  reward: z.number(),
  advantage: z.number(),
});
export type Transition = z.infer<typeof Transition>;

/** What happened to each rollout considered, for the export summary. */
export const ExportReport = z.object({
  rollouts: z.number().int().nonnegative(),
  exported: z.number().int().nonnegative(),
  transitions: z.number().int().nonnegative(),
  excludedNoReward: z.number().int().nonnegative(),
  excludedBelowMinReward: z.number().int().nonnegative(),
  excludedNoCalls: z.number().int().nonnegative(),
  /** Task groups with one rollout, or all rewards equal: their GRPO advantages are 0, said so here. */
  singletonGroups: z.number().int().nonnegative(),
  zeroVarianceGroups: z.number().int().nonnegative(),
  /** With aggregation: samples made of several calls, calls that could not be joined, calls without token ids. */
  aggregated: z.object({ merged: z.number().int(), mismatches: z.number().int(), withoutTokenIds: z.number().int() }).nullable(),
});
export type ExportReport = z.infer<typeof ExportReport>;
