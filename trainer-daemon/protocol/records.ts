/**
 * Records of Lightning's data model (ARCHITECTURE.md's glossary), as zod schemas.
 *
 * These are the shapes that cross process boundaries: the daemon's RPC, the CLI's `--json`
 * output, and (later) the webview. The store maps its rows onto them. A schema and its type share
 * a name; never hand-write an interface that repeats one.
 */
import { z } from 'zod';
import { ErrorKind } from './errors';
import { ROLLOUT_MODES, ROLLOUT_STATUSES } from './rolloutValues';
import type { Json as JsonValue } from './json';

/** Milliseconds since the Unix epoch (fractional for sub-millisecond span times). */
export const EpochMs = z.number().finite().nonnegative();

export type { JsonObject } from './json';
export { textOf } from './json';
/** A JSON value (task inputs, span attributes, resource values, configs): json.ts's type, and its schema. */
export type Json = JsonValue;
export const Json: z.ZodType<Json> = z.lazy(() =>
  z.union([z.string(), z.number(), z.boolean(), z.null(), z.array(Json), z.record(z.string(), Json)]),
);

export const RolloutStatus = z.enum(ROLLOUT_STATUSES);
export type RolloutStatus = z.infer<typeof RolloutStatus>;

/** `optimizer`: the LLM calls a training algorithm (APO) made itself, recorded so they can be inspected. */
export const RolloutMode = z.enum(ROLLOUT_MODES);
export type RolloutMode = z.infer<typeof RolloutMode>;

/** Where a rollout came from: a debug launch configuration, a command line, or an API client. */
export const RolloutSource = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('launch'), name: z.string(), workspaceFolder: z.string().optional() }),
  z.object({ kind: z.literal('command'), argv: z.array(z.string()).min(1), cwd: z.string().optional() }),
  z.object({ kind: z.literal('api'), client: z.string().optional() }),
]);
export type RolloutSource = z.infer<typeof RolloutSource>;

/** The task a rollout works on: an optional id (from a dataset or the user) and its input. */
export const TaskRef = z.object({
  id: z.string().min(1).max(512).optional(),
  input: Json,
});
export type TaskRef = z.infer<typeof TaskRef>;

/** A Ray node that ran agents (`--ray`): its Ray node id, IP address and host name. */
export const RayNode = z.object({
  nodeId: z.string().min(1).max(200),
  ip: z.string().min(1).max(200),
  host: z.string().max(300),
});
export type RayNode = z.infer<typeof RayNode>;

export const Attempt = z.object({
  /** 1-based attempt number within the rollout. */
  number: z.number().int().positive(),
  status: RolloutStatus,
  startedAt: EpochMs,
  endedAt: EpochMs.nullable(),
  error: z.string().nullable(),
  exitCode: z.number().int().nullable(),
  /** The Ray node it ran on (`--ray`); absent when it ran on the runner's own machine, or before it ended. */
  node: RayNode.optional(),
});
export type Attempt = z.infer<typeof Attempt>;

/** What the side panel's list needs about one rollout (denormalized counters included). */
export const Rollout = z.object({
  id: z.string(),
  status: RolloutStatus,
  mode: RolloutMode,
  label: z.string().nullable(),
  task: TaskRef.nullable(),
  datasetId: z.string().nullable(),
  batchId: z.string().nullable(),
  source: RolloutSource,
  resourcesVersion: z.number().int().nullable(),
  maxAttempts: z.number().int().positive(),
  attemptCount: z.number().int().nonnegative(),
  createdAt: EpochMs,
  updatedAt: EpochMs,
  startedAt: EpochMs.nullable(),
  endedAt: EpochMs.nullable(),
  error: z.string().nullable(),
  exitCode: z.number().int().nullable(),
  spanCount: z.number().int().nonnegative(),
  llmCalls: z.number().int().nonnegative(),
  promptTokens: z.number().int().nonnegative(),
  completionTokens: z.number().int().nonnegative(),
  /**
   * The rollout's episode reward: the latest human annotation, else the latest the agent posted, else the latest
   * automatic one (rule, judge, model).
   */
  reward: z.number().nullable(),
});
export type Rollout = z.infer<typeof Rollout>;

export const SpanCategory = z.enum(['llm', 'tool', 'agent', 'reward', 'other']);
export type SpanCategory = z.infer<typeof SpanCategory>;

export const SpanStatusCode = z.enum(['unset', 'ok', 'error']);
export type SpanStatusCode = z.infer<typeof SpanStatusCode>;

export const SpanEvent = z.object({
  name: z.string(),
  timeMs: EpochMs,
  attributes: z.record(z.string(), Json).default({}),
});
export type SpanEvent = z.infer<typeof SpanEvent>;

/** An OpenTelemetry-shaped span as given to the store (before it is numbered). */
export const SpanInput = z.object({
  traceId: z.string().regex(/^[0-9a-f]{32}$/, 'traceId must be 32 lowercase hex characters'),
  spanId: z.string().regex(/^[0-9a-f]{16}$/, 'spanId must be 16 lowercase hex characters'),
  parentSpanId: z
    .string()
    .regex(/^[0-9a-f]{16}$/)
    .nullable()
    .default(null),
  name: z.string().min(1).max(1024),
  /** OTel span kind: internal, server, client, producer, consumer. */
  kind: z.enum(['internal', 'server', 'client', 'producer', 'consumer']).default('internal'),
  category: SpanCategory,
  startMs: EpochMs,
  endMs: EpochMs.nullable(),
  statusCode: SpanStatusCode.default('unset'),
  statusMessage: z.string().nullable().default(null),
  attributes: z.record(z.string(), Json).default({}),
  events: z.array(SpanEvent).default([]),
  /** Token usage, when the span is an LLM call that reported it. */
  promptTokens: z.number().int().nonnegative().nullable().default(null),
  completionTokens: z.number().int().nonnegative().nullable().default(null),
});
export type SpanInput = z.infer<typeof SpanInput>;

/** A stored span: numbered in arrival order within its rollout. */
export const Span = SpanInput.extend({
  rolloutId: z.string(),
  attempt: z.number().int().nonnegative(),
  /** 1-based position of the span in its rollout, in the order the daemon received it. */
  sequence: z.number().int().positive(),
});
export type Span = z.infer<typeof Span>;

export const RewardSource = z.enum(['human', 'agent', 'rule', 'judge', 'model']);
export type RewardSource = z.infer<typeof RewardSource>;

export const Reward = z.object({
  id: z.number().int().positive(),
  rolloutId: z.string(),
  /** The step (an LLM call's span id) the reward is about; null for the whole rollout. */
  spanId: z.string().nullable(),
  /** The reward dimension; `reward` is the episode reward. */
  name: z.string(),
  value: z.number().finite(),
  source: RewardSource,
  author: z.string().nullable(),
  comment: z.string().nullable(),
  reason: z.string().nullable(),
  createdAt: EpochMs,
});
export type Reward = z.infer<typeof Reward>;

export const Resource = z.object({
  name: z.string(),
  version: z.number().int().positive(),
  kind: z.string(),
  value: Json,
  createdAt: EpochMs,
  /** The training run that made this version (an APO candidate); null for a version a person put. */
  runId: z.string().nullable(),
  /** Whether this is the version agents get now (`GET $LIGHTNING_URL/resources`). */
  current: z.boolean(),
});
export type Resource = z.infer<typeof Resource>;

export const Dataset = z.object({
  id: z.string(),
  name: z.string(),
  source: z.string().nullable(),
  taskCount: z.number().int().nonnegative(),
  createdAt: EpochMs,
});
export type Dataset = z.infer<typeof Dataset>;

export const Task = z.object({
  datasetId: z.string(),
  id: z.string(),
  index: z.number().int().nonnegative(),
  split: z.enum(['train', 'val', 'test']),
  input: Json,
  expected: Json.nullable(),
});
export type Task = z.infer<typeof Task>;

export const TrainingRunStatus = z.enum(['queued', 'running', 'succeeded', 'failed', 'cancelled']);
export type TrainingRunStatus = z.infer<typeof TrainingRunStatus>;
/**
 * Where a training run really ran, as it ran (not its configuration): the Ray nodes its agents ran
 * on, and the torchrun ranks that joined its trainer worker. Recorded as the run goes.
 */
export const RunPlacement = z.object({
  /** Each Ray node that ran attempts of its rollouts, with how many; in the order of the nodes' IPs. */
  rayNodes: z.array(RayNode.extend({ attempts: z.number().int().nonnegative() })),
  /** The ranks of its trainer worker's last start under torchrun, by rank, as each reported itself. */
  ranks: z.array(
    z.object({ rank: z.number().int().nonnegative(), localRank: z.number().int().nonnegative(), host: z.string() }),
  ),
});
export type RunPlacement = z.infer<typeof RunPlacement>;

/**
 * What every training run records whatever its algorithm; the run itself (`TrainingRun`, a union on
 * `algorithm` with each algorithm's typed configuration) is in training.ts, beside the configurations.
 */
export const TrainingRunRecord = z.object({
  id: z.string(),
  status: TrainingRunStatus,
  createdAt: EpochMs,
  startedAt: EpochMs.nullable(),
  endedAt: EpochMs.nullable(),
  error: z.string().nullable(),
  /**
   * What kind of error ended it (`trainer_unavailable`: Set Up Trainer fixes it); null without one, or when its loop
   * did not say.
   */
  errorKind: ErrorKind.nullable(),
  /** Someone asked the run to stop (`trainingRuns/cancel`); the daemon stops it, its agents with it. */
  cancelRequested: z.boolean(),
  /** What the run produced (for APO: the best prompt and its scores), once it ended. */
  result: Json.nullable(),
  /** Where its agents and ranks ran (GRPO with `--ray` or torchrun); absent until something was recorded. */
  placement: RunPlacement.optional(),
});

export const MetricPoint = z.object({
  runId: z.string(),
  step: z.number().int().nonnegative(),
  name: z.string(),
  value: z.number(),
  timeMs: EpochMs,
});
export type MetricPoint = z.infer<typeof MetricPoint>;

export const Checkpoint = z.object({
  id: z.string(),
  runId: z.string(),
  step: z.number().int().nonnegative(),
  path: z.string(),
  metrics: z.record(z.string(), z.number()),
  createdAt: EpochMs,
  /** Bytes on disk now (null: its folder is gone); absent where it was not measured. */
  bytes: z.number().int().nonnegative().nullable().optional(),
  /** Whether it keeps optimizer state (only the checkpoint a run resumes from needs it: retention drops the rest). */
  optimizerState: z.boolean().optional(),
});
export type Checkpoint = z.infer<typeof Checkpoint>;

/** Counts for the status bar and the panel header. */
export const Stats = z.object({
  rollouts: z.number().int().nonnegative(),
  byStatus: z.record(RolloutStatus, z.number().int().nonnegative()),
  spans: z.number().int().nonnegative(),
  rewards: z.number().int().nonnegative(),
  unrated: z.number().int().nonnegative(),
  schemaVersion: z.number().int().positive(),
});
export type Stats = z.infer<typeof Stats>;
