/**
 * LightningRL's output (docs/export.md): single-call training transitions with their
 * credit and advantage, and the options that decide them. `lightning export` writes these records
 * one per line; the trainer worker reads them.
 */
import { z } from 'zod';
import { Json, type Reward, type Rollout, type Span } from './records';
import { CallOutcome, SkippedCalls } from './outcomeSchema';

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
  /** The group's std: `sample` (Bessel's correction, n − 1: torch.std, as TRL's GRPOTrainer) or `population` (n). */
  std: z.enum(['sample', 'population']).default('sample'),
  /** Added to the std (TRL: 1e-4). */
  epsilon: z.number().positive().default(1e-4),
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
  prompt: z.object({
    messages: z.array(ChatMessage).nullable(),
    input: Json.nullable(),
    tools: z.array(Json).nullable(),
  }),
  /** Action: what the model answered (the assistant message, or the Responses output items). */
  response: z.object({
    message: ChatMessage.nullable(),
    output: z.array(Json).nullable(),
    text: z.string().nullable(),
  }),
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
  /** Only with `--include-failed`, on a call that was not a whole answer: how it ended. */
  outcome: CallOutcome.optional(),
  /** Only on a call with no chat form (`prompt.messages` or `response.message` null): why, e.g. legacy /completions. */
  notChat: z.string().optional(),
  /**
   * Only on a reply that stopped at the request's output-token cap (finish reason `length`, `max_tokens`,
   * `MAX_TOKENS`): trained on as sampled; a chat row leaves it out unless `--include-failed`.
   */
  stoppedAtTokenCap: z.literal(true).optional(),
});
export type Transition = z.infer<typeof Transition>;

/** What happened to each rollout considered, for the export summary. */
export const ExportReport = z.object({
  rollouts: z.number().int().nonnegative(),
  exported: z.number().int().nonnegative(),
  transitions: z.number().int().nonnegative(),
  excludedNoReward: z.number().int().nonnegative(),
  /** Rollouts exported without an episode reward, given the fill value (`--missing-reward fill`; 0 from older ones). */
  filledNoReward: z.number().int().nonnegative().default(0),
  excludedBelowMinReward: z.number().int().nonnegative(),
  excludedNoCalls: z.number().int().nonnegative(),
  /** LLM calls left out because they were not whole answers (upstream errors, cancelled, truncated). */
  skipped: SkippedCalls,
  /** Choices after the first of answers with n > 1: one sample per call, of its first choice; the rest left out. */
  otherChoices: z.number().int().nonnegative(),
  /** Task groups with one rollout, or all rewards equal: their GRPO advantages are 0, said so here. */
  singletonGroups: z.number().int().nonnegative(),
  zeroVarianceGroups: z.number().int().nonnegative(),
  /** With aggregation: samples made of several calls, calls that could not be joined, calls without token ids. */
  aggregated: z
    .object({
      merged: z.number().int(),
      mismatches: z.number().int(),
      withoutTokenIds: z.number().int(),
      /** Calls that were not whole answers (`--include-failed`), left samples of their own (0 from older daemons). */
      notWhole: z.number().int().default(0),
      /** Neighbouring calls not joined because their advantages differ (0 from older daemons). */
      advantageDiffers: z.number().int().default(0),
    })
    .nullable(),
});
export type ExportReport = z.infer<typeof ExportReport>;

/** `transitions/forRollout`: the options training would use (the `lightning export` defaults when absent). */
export const RolloutTransitionsParams = z.strictObject({
  rolloutId: z.string().min(1).max(200),
  reward: RewardPolicy.default({ name: 'reward', missing: 'exclude', fillValue: 0 }),
  credit: CreditOptions.default({ kind: 'identical' }),
  advantage: AdvantageOptions.default({ kind: 'grpo', normalizeStd: true, std: 'sample', epsilon: 1e-4 }),
  /** Train only the calls of agents whose name matches this regular expression. */
  agent: z.string().max(1_000).optional(),
});
export type RolloutTransitionsParams = z.input<typeof RolloutTransitionsParams>;

/** One LLM call of the rollout as training sees it. */
export const CallTraining = z.object({
  spanId: z.string(),
  name: z.string(),
  agentName: z.string().nullable(),
  /** Whether this call is a training sample; `why` says why not. */
  included: z.boolean(),
  why: z.string().nullable(),
  /** Its position among the samples, the reward credited to it, its advantage (null when excluded). */
  step: z.number().int().nonnegative().nullable(),
  reward: z.number().nullable(),
  advantage: z.number().nullable(),
  promptTokens: z.number().int().nullable(),
  completionTokens: z.number().int().nullable(),
  /** Exact token ids from the serving engine (prompt, response), when recorded. */
  promptTokenIds: z.number().int().nullable(),
  responseTokenIds: z.number().int().nullable(),
  /** True when the trainer must re-tokenize the text (no engine token ids). */
  retokenized: z.boolean(),
});
export type CallTraining = z.infer<typeof CallTraining>;

/** The rollout's task group: the rollouts advantages are computed against. */
export const TrainingGroup = z.object({
  /**
   * Which rollouts were considered, as `lightning export --batch/--dataset` would: the rollout's batch, else its
   * dataset, else itself.
   */
  scope: z.enum(['batch', 'dataset', 'rollout']),
  scopeId: z.string().nullable(),
  taskId: z.string().nullable(),
  /** Rollouts of the group with an episode reward, their mean and std (as the advantage options: sample by default). */
  rewarded: z.number().int().nonnegative(),
  mean: z.number().nullable(),
  std: z.number().nullable(),
  /** Why the group's advantages are 0 (a group of one, all rewards equal), or null. */
  note: z.string().nullable(),
});
export type TrainingGroup = z.infer<typeof TrainingGroup>;

export const RolloutTransitions = z.object({
  rolloutId: z.string(),
  /** Whether any of the rollout's calls is a training sample; `why` says why not. */
  included: z.boolean(),
  why: z.string().nullable(),
  episodeReward: z.number().nullable(),
  advantage: z.number().nullable(),
  group: TrainingGroup,
  options: z.object({
    reward: RewardPolicy,
    credit: CreditOptions,
    advantage: AdvantageOptions,
    agent: z.string().nullable(),
  }),
  calls: z.array(CallTraining),
});
export type RolloutTransitions = z.infer<typeof RolloutTransitions>;

/** What LightningRL reads of a span. */
export type TrainingSpan = Pick<
  Span,
  | 'spanId'
  | 'parentSpanId'
  | 'traceId'
  | 'sequence'
  | 'category'
  | 'startMs'
  | 'endMs'
  | 'attributes'
  | 'name'
  | 'statusCode'
  | 'statusMessage'
>;

/** A rollout with its spans and rewards: what LightningRL (and the reward scorers) read of a recorded run. */
export interface Trajectory {
  readonly rollout: Rollout;
  readonly spans: TrainingSpan[];
  readonly rewards: Reward[];
}
