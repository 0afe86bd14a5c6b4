/**
 * Automatic rewards: what a reward source is (a rule, the user's own function, an LLM judge, an
 * ONNX reward model), how several combine, the workspace file that attaches them to datasets, what
 * a reward function receives, and the `rewards/score` RPC's shapes. One discriminated union per
 * kind of thing, so the pipeline's switches are exhaustive.
 */
import { z } from 'zod';
import { Json } from './records';

const Weight = z.number().finite().default(1);
/** The reward dimension a source writes (its own row), e.g. `exact` or `judge`. */
const SourceName = z
  .string()
  .regex(/^[A-Za-z0-9_.:-]{1,100}$/, 'name must be 1–100 letters, digits or _ . : -')
  .optional();
/** A dotted path into a JSON value (`answer.value`, `items.0`); empty means the whole value. */
const JsonPath = z.string().max(500).default('');

/** Where the expected answer is found in the task's `expected` value. */
const ExpectedPath = { expectedPath: JsonPath };

/** Rules compare the rollout's final answer with the task's expected answer, or check its record. */
export const RuleConfig = z.discriminatedUnion('rule', [
  /** 1 when the final answer equals the expected answer exactly (after trimming), else 0. */
  z.strictObject({ rule: z.literal('exact'), caseSensitive: z.boolean().default(true), ...ExpectedPath }),
  /**
   * SQuAD-style normalization (case, punctuation, articles, whitespace); `contains` accepts an answer that includes the
   * expected one as whole words.
   */
  z.strictObject({ rule: z.literal('normalized'), contains: z.boolean().default(false), ...ExpectedPath }),
  /** The last number in the final answer against the expected number: |a − e| ≤ absTol + relTol·|e|. */
  z.strictObject({
    rule: z.literal('numeric'),
    absTol: z.number().nonnegative().default(1e-6),
    relTol: z.number().nonnegative().default(0),
    ...ExpectedPath,
  }),
  /** The final answer matches `pattern` (or, without one, the expected answer read as a pattern). */
  z
    .strictObject({
      rule: z.literal('regex'),
      pattern: z.string().max(10_000).optional(),
      flags: z
        .string()
        .regex(/^[imsu]*$/, 'flags may only use i, m, s, u')
        .default(''),
      ...ExpectedPath,
    })
    // A fixed pattern is checked as the file is read, not first met per answer (where each would score 0).
    .refine(
      ({ pattern, flags }) => {
        if (pattern === undefined) return true;
        try {
          new RegExp(pattern, flags);
          return true;
        } catch {
          return false;
        }
      },
      { message: 'pattern is not a regular expression', path: ['pattern'] },
    ),
  /** The final answer parsed as JSON (or its first {…}/[…] block): the value at `path` deep-equals the expected one. */
  z.strictObject({ rule: z.literal('json'), path: JsonPath, ...ExpectedPath }),
  /** 1 when the agent called the tool `tool` at least `min` times (tool calls in LLM responses, or tool spans). */
  z.strictObject({
    rule: z.literal('tool-called'),
    tool: z.string().min(1).max(200),
    min: z.number().int().positive().default(1),
  }),
  /** `value` (a penalty, e.g. −1) when the rollout failed or has error spans, else 0. */
  z.strictObject({ rule: z.literal('error-penalty'), value: z.number().finite().default(-1) }),
  /** `value` when the rollout timed out, else 0. */
  z.strictObject({ rule: z.literal('timeout-penalty'), value: z.number().finite().default(-1) }),
  /** `value` when the rollout made more than `max` LLM calls, else 0. */
  z.strictObject({
    rule: z.literal('steps-penalty'),
    max: z.number().int().nonnegative(),
    value: z.number().finite().default(-1),
  }),
  /** `value` when prompt + completion tokens exceed `max`, else 0. */
  z.strictObject({
    rule: z.literal('tokens-penalty'),
    max: z.number().int().nonnegative(),
    value: z.number().finite().default(-1),
  }),
]);
export type RuleConfig = z.infer<typeof RuleConfig>;

export const JudgeMode = z.enum(['absolute', 'relative']);
export type JudgeMode = z.infer<typeof JudgeMode>;

/** One reward source of a spec. Its `name` is the dimension of its own reward row. */
export const RewardSourceConfig = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('rule'), name: SourceName, weight: Weight, rule: RuleConfig }),
  z.strictObject({
    type: z.literal('function'),
    name: SourceName,
    weight: Weight,
    /**
     * A JS or TS module (relative to the config file) whose default export is
     * `(trajectory, task) => number | {value, reason}`.
     */
    module: z.string().min(1).max(4096),
    timeoutMs: z.number().int().min(10).max(600_000).default(5_000),
    /** The worker thread's heap cap. */
    memoryMb: z.number().int().min(8).max(4096).default(128),
  }),
  z.strictObject({
    type: z.literal('judge'),
    name: SourceName,
    weight: Weight,
    /** An OpenAI-compatible base URL (…/v1); without one, the daemon's upstream. */
    baseUrl: z
      .string()
      .regex(/^https?:\/\/[^\s/?#]+/i, 'baseUrl must be an http(s) URL, e.g. https://api.openai.com/v1')
      .optional(),
    model: z.string().min(1).max(200),
    /** The environment variable holding the API key (read when scoring, never stored). */
    apiKeyEnv: z
      .string()
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'apiKeyEnv must be an environment variable name')
      .default('LIGHTNING_UPSTREAM_API_KEY'),
    rubric: z.string().min(1).max(20_000),
    /**
     * `absolute`: each rollout scored on its own; `relative`: the rollouts of one task ranked together (RULER), for
     * GRPO.
     */
    mode: JudgeMode.default('absolute'),
    /** How often a malformed reply is asked for again (scores are asked for in [0, 1]). */
    maxRetries: z.number().int().min(0).max(5).default(2),
    temperature: z.number().min(0).max(2).default(0),
    /** Judge calls in flight at once. */
    concurrency: z.number().int().min(1).max(64).default(4),
  }),
  z.strictObject({
    type: z.literal('model'),
    name: SourceName,
    weight: Weight,
    /**
     * A sequence-classification model in ONNX (inputs input_ids, attention_mask; output logits), relative to the config
     * file.
     */
    path: z.string().min(1).max(4096),
    /** Its tokenizer.json (default: next to the model). */
    tokenizer: z.string().min(1).max(4096).optional(),
    /** What the model reads; `{task}` and `{answer}` are replaced. */
    template: z.string().max(10_000).default('{task}\n{answer}'),
    batchSize: z.number().int().min(1).max(1024).default(32),
    /** With several labels: the probability (softmax) of this label; with one: the logit. */
    label: z.number().int().nonnegative().optional(),
    device: z.enum(['cpu', 'cuda', 'auto']).default('cpu'),
  }),
]);
export type RewardSourceConfig = z.infer<typeof RewardSourceConfig>;
export type RewardSourceType = RewardSourceConfig['type'];

/** Several sources and how they make the episode reward. */
export const RewardSpec = z.strictObject({
  /** The dimension the combined reward is written as; `reward` is the episode reward. */
  name: z.string().min(1).max(100).default('reward'),
  /**
   * `weighted-sum`: Σ weight·value over sources that gave one; `first-available`: the first source (in order) that gave
   * one.
   */
  combine: z.enum(['weighted-sum', 'first-available']).default('weighted-sum'),
  sources: z.array(RewardSourceConfig).min(1, 'sources must name at least one reward source').max(50),
});
export type RewardSpec = z.infer<typeof RewardSpec>;
export type RewardSpecInput = z.input<typeof RewardSpec>;

/** The workspace file `.lightning/rewards.json`: a default spec, and specs per dataset (by name or id). */
export const RewardsFile = z
  .strictObject({
    default: RewardSpec.optional(),
    datasets: z.record(z.string().min(1), RewardSpec).default({}),
  })
  .refine(
    (file) => file.default !== undefined || Object.keys(file.datasets).length > 0,
    'give a `default` spec or at least one entry in `datasets`',
  );
export type RewardsFile = z.infer<typeof RewardsFile>;

export const ToolCall = z.object({ name: z.string(), arguments: z.string() });
export type ToolCall = z.infer<typeof ToolCall>;

/** What a reward function, judge or reward model sees of one rollout. */
export const ScoringTrajectory = z.object({
  rolloutId: z.string(),
  status: z.string(),
  error: z.string().nullable(),
  /**
   * The agent's reported answer (the latest span attribute `lightning.answer`), else the last LLM
   * call's assistant content; null when neither exists (e.g. the last call only asked for a tool).
   */
  finalAnswer: z.string().nullable(),
  calls: z.array(
    z.object({
      model: z.string().nullable(),
      messages: z.array(Json).nullable(),
      content: z.string().nullable(),
      toolCalls: z.array(ToolCall),
    }),
  ),
  /**
   * Every tool the agent called, in order: from its LLM calls' tool calls, or from tool spans when none were recorded.
   */
  toolCalls: z.array(ToolCall),
  steps: z.number().int().nonnegative(),
  promptTokens: z.number().int().nonnegative(),
  completionTokens: z.number().int().nonnegative(),
  errorSpans: z.number().int().nonnegative(),
});
export type ScoringTrajectory = z.infer<typeof ScoringTrajectory>;

export const ScoringTask = z.object({ id: z.string().nullable(), input: Json, expected: Json.nullable() });
export type ScoringTask = z.infer<typeof ScoringTask>;

/** What one source made of one rollout. */
export const SourceOutcome = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('scored'), name: z.string(), value: z.number().finite(), reason: z.string().nullable() }),
  /** Not applicable (e.g. the task has no expected answer); not an error. */
  z.object({ kind: z.literal('skipped'), name: z.string(), reason: z.string() }),
  z.object({ kind: z.literal('error'), name: z.string(), error: z.string() }),
]);
export type SourceOutcome = z.infer<typeof SourceOutcome>;

export const RolloutScore = z.object({
  rolloutId: z.string(),
  /** The combined reward written, or null when no source gave a value. */
  value: z.number().nullable(),
  sources: z.array(SourceOutcome),
});
export type RolloutScore = z.infer<typeof RolloutScore>;

export const ScoreRolloutsParams = z.strictObject({
  /**
   * The spec to score with; without one, the daemon reads `rewardsFile` (default `.lightning/rewards.json` beside the
   * store).
   */
  spec: RewardSpec.optional(),
  rewardsFile: z.string().min(1).max(4096).optional(),
  /** Module and model paths in `spec` are relative to this folder (the config file's). */
  baseDir: z.string().min(1).max(4096).optional(),
  rollouts: z.array(z.string().min(1).max(200)).min(1).max(100_000).optional(),
  /** A dataset's rollouts (id or name). */
  dataset: z.string().min(1).max(200).optional(),
  /** Only rollouts with no reward of any source yet. */
  unrated: z.boolean().default(false),
  /**
   * Leave out the rollouts that hold an automatically scored reward (a rule's, a judge's or a model's): checked when
   * they are chosen, and again in the commit that writes their rows, so that of two jobs scoring one rollout at once
   * only the first writes. Each rollout left out is reported with the value its rows hold, as a `skipped` source. A
   * dataset run's (`lightning dataset run`, and its `--resume`).
   */
  skipScored: z.boolean().default(false),
  /** A client-chosen id for `rewards/progress` notifications and `rewards/cancel`. */
  jobId: z.string().min(1).max(100).optional(),
  /**
   * Judge API keys from the caller's environment, by variable name (the CLI sends the judge's
   * `apiKeyEnv`); used for this call only, never stored or logged. The daemon's own environment
   * is the fallback.
   */
  apiKeys: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/), z.string().max(10_000)).default({}),
});
export type ScoreRolloutsParams = z.input<typeof ScoreRolloutsParams>;

export const ScoreRolloutsResult = z.object({
  scored: z.number().int().nonnegative(),
  /** Rollouts no source could score (each source skipped or failed). */
  unscored: z.number().int().nonnegative(),
  /** Source errors over all rollouts. */
  errors: z.number().int().nonnegative(),
  cancelled: z.boolean(),
  results: z.array(RolloutScore),
});
export type ScoreRolloutsResult = z.infer<typeof ScoreRolloutsResult>;

export const ScoreProgress = z.object({
  jobId: z.string(),
  done: z.number().int().nonnegative(),
  total: z.number().int().nonnegative(),
  errors: z.number().int().nonnegative(),
});
export type ScoreProgress = z.infer<typeof ScoreProgress>;
