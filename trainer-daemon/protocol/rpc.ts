/**
 * The editor-facing JSON-RPC 2.0 protocol (docs/daemon.md, "Editor RPC"): every method and
 * notification declared once, with zod schemas for params and result, imported by both ends
 * (the daemon's RPC server and the CLI today, the extension's client later).
 */
import { z } from 'zod';
import {
  Attempt,
  Dataset,
  Task,
  Json,
  Reward,
  RewardSource,
  Rollout,
  RolloutMode,
  RolloutSource,
  RolloutStatus,
  Span,
  Stats,
  TaskRef,
} from './records';
import {
  ApoCandidate,
  GetResourceParams,
  PutResourceParams,
  ResourceName,
  ResourceSummary,
  ResourceVersions,
} from './apo';
import { Checkpoint, EpochMs, RayNode, Resource } from './records';
import { ScoreProgress, ScoreRolloutsParams, ScoreRolloutsResult } from './rewards';
import { RolloutTransitions, RolloutTransitionsParams } from './lightningrl';
import {
  GetTrainingRunParams,
  StartTrainingParams,
  TrainingAlgorithm,
  TrainingRun,
  TrainingRunDetail,
  TrainingRunSummary,
} from './training';
import { PolicyChanged, PolicyRef, ServedPolicy, ServePolicyParams } from './policy';
import { DatasetAgents, DatasetAgentsParams } from './policies';
import {
  DeleteCheckpointParams,
  DeleteCheckpointResult,
  ExportCheckpointParams,
  ExportCheckpointResult,
} from './checkpoints';
import {
  CancelWorkerBatchParams,
  OpenWorkerBatchParams,
  WorkerBatch,
  WorkerBatchEvents,
  WorkerBatchEventsParams,
  WorkerExited,
  WorkerExitedParams,
  WorkerPlacedParams,
} from './runner';
import { ProviderUpstreams } from './agentEnv';
import { ImportDatasetParams } from './datasets';
import { FILTER_TEXT_MAX } from './rolloutValues';

export interface MethodSpec<P extends z.ZodType, R extends z.ZodType> {
  readonly method: string;
  readonly params: P;
  readonly result: R;
}

function method<P extends z.ZodType, R extends z.ZodType>(name: string, params: P, result: R): MethodSpec<P, R> {
  return { method: `lightning/${name}`, params, result };
}

export interface NotificationSpec<P extends z.ZodType> {
  readonly method: string;
  readonly params: P;
}

function notification<P extends z.ZodType>(name: string, params: P): NotificationSpec<P> {
  return { method: `lightning/${name}`, params };
}

const RolloutId = z.string().min(1, 'rollout id must not be empty').max(200);

export const RolloutOrder = z.enum(['newest', 'oldest']);

export const ListRolloutsParams = z.strictObject({
  status: z.array(RolloutStatus).min(1).optional(),
  mode: RolloutMode.optional(),
  /** Exact label. */
  label: z.string().optional(),
  /** Exact task id. */
  taskId: z.string().optional(),
  datasetId: z.string().optional(),
  batchId: z.string().optional(),
  /** false: only rollouts outside any batch (debug runs, `lightning run`, API clients); true: only a batch's. */
  inBatch: z.boolean().optional(),
  /** Case-insensitive text search in the label and the task (id and input). */
  search: z.string().min(1).max(FILTER_TEXT_MAX).optional(),
  /** Only rollouts with no reward of any source. */
  unrated: z.boolean().optional(),
  order: RolloutOrder.default('newest'),
  limit: z.number().int().min(1).max(500).default(50),
  /** Opaque cursor from a previous page's `nextCursor`. */
  cursor: z.string().max(200).optional(),
});
export type ListRolloutsParams = z.input<typeof ListRolloutsParams>;

export const RolloutPage = z.object({
  items: z.array(Rollout),
  /** Pass as `cursor` to get the next page; null on the last page. */
  nextCursor: z.string().nullable(),
});
export type RolloutPage = z.infer<typeof RolloutPage>;

/** What `rollouts/groups` counts: the list's filters, without paging. */
export const RolloutGroupsParams = ListRolloutsParams.pick({
  status: true,
  mode: true,
  label: true,
  taskId: true,
  datasetId: true,
  batchId: true,
  search: true,
  unrated: true,
}).extend({
  /** The newest runs returned (a training run with its batches counts once); `more` says whether others exist. */
  limit: z.number().int().min(1).max(1_000).default(200),
});
export type RolloutGroupsParams = z.input<typeof RolloutGroupsParams>;

/** What a group's rollouts that match the filter come to. */
const GroupCounts = {
  /** Its rollouts that match the filter. */
  count: z.number().int().nonnegative(),
  /** …of which failed or timed out. */
  failed: z.number().int().nonnegative(),
  /** …of which are queued or running. */
  active: z.number().int().nonnegative(),
  /** Its oldest matching rollout's creation, and its latest change. */
  createdAt: EpochMs,
  updatedAt: EpochMs,
};

/** One batch's rollouts counted: a dataset run, a training iteration's sampled or validation set, an APO evaluation. */
export const RolloutBatchGroup = z.object({
  batchId: z.string(),
  ...GroupCounts,
  mode: RolloutMode,
  /** The rollouts' label (a dataset run's, or the training run's id). */
  label: z.string().nullable(),
  datasetId: z.string().nullable(),
  /** The dataset's name, when the batch ran one. */
  datasetName: z.string().nullable(),
  /** GRPO: its policy step (`<run>-train-<step>` is iteration step + 1); APO: the evaluation's number; else null. */
  step: z.number().int().nonnegative().nullable(),
});
export type RolloutBatchGroup = z.infer<typeof RolloutBatchGroup>;

/**
 * The rollouts of one run, counted: a training run's (its batches inside, newest first), or a batch no training
 * run made (a `dataset run`, or a client's own batch).
 */
export const RolloutRunGroup = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('training'),
    runId: z.string(),
    algorithm: TrainingAlgorithm,
    /** What it trains: the model (`tiny`, a Hugging Face name) for GRPO and SFT, the prompt resource for APO. */
    target: z.string(),
    /** The dataset it trains on, as its configuration names it (an SFT run may have none). */
    dataset: z.string().nullable(),
    /** When the run was created. */
    startedAt: EpochMs,
    ...GroupCounts,
    batches: z.array(RolloutBatchGroup),
  }),
  RolloutBatchGroup.extend({ kind: z.literal('batch') }),
]);
export type RolloutRunGroup = z.infer<typeof RolloutRunGroup>;

export const RolloutGroups = z.object({
  /** Every rollout that matches the filter: the one count the panel and the status bar show. */
  total: z.number().int().nonnegative(),
  /** …of which are outside any batch (listed with `inBatch: false`). */
  ungrouped: z.number().int().nonnegative(),
  /** The newest `limit` runs, newest first (by their newest rollout). */
  runs: z.array(RolloutRunGroup),
  /** Every run that matches: more than `runs` when the limit cut some off. */
  runCount: z.number().int().nonnegative(),
  /** More runs than `limit` exist (`runCount > runs.length`); their rollouts are in `total`, not in `runs`. */
  more: z.boolean(),
});
export type RolloutGroups = z.infer<typeof RolloutGroups>;

export const RolloutDetail = z.object({
  rollout: Rollout,
  attempts: z.array(Attempt),
  spans: z.array(Span),
  rewards: z.array(Reward),
  /** The resource versions the rollout ran with, by name (those current when it was created, unless given). */
  resources: z.record(z.string(), z.number().int().positive()),
  /** The policy that served its LLM calls (pinned `policy` resource): a training iteration or checkpoint; else null. */
  servedBy: PolicyRef.nullable(),
  /** Spans past `spanLimit` not sent (read them with `lightning export`, or a larger spanLimit). */
  spansLeftOut: z.number().int().nonnegative().optional(),
});
export type RolloutDetail = z.infer<typeof RolloutDetail>;

export const CreateRolloutParams = z.strictObject({
  mode: RolloutMode.default('debug'),
  label: z.string().max(500).nullable().default(null),
  task: TaskRef.nullable().default(null),
  source: RolloutSource.default({ kind: 'api' }),
  maxAttempts: z.number().int().min(1).max(100).default(1),
  datasetId: z.string().nullable().default(null),
  batchId: z.string().nullable().default(null),
  resourcesVersion: z.number().int().positive().nullable().default(null),
  /** Resource versions this rollout runs with (by name); every other resource is pinned at its current version. */
  resources: z.record(ResourceName, z.number().int().positive()).default({}),
});
export type CreateRolloutParams = z.input<typeof CreateRolloutParams>;

export const StartAgentRunParams = CreateRolloutParams.extend({
  /** Where this rollout's LLM calls go: the user's own OPENAI_BASE_URL, or null for the daemon's upstream. */
  upstream: z
    .string()
    .regex(/^https?:\/\/[^\s/?#]+/i, 'upstream must be an http(s) URL, e.g. http://127.0.0.1:11434/v1')
    .nullable()
    .default(null),
  /** Anthropic and Gemini calls go to the user's ANTHROPIC_BASE_URL / GOOGLE_GEMINI_BASE_URL, else to the provider. */
  providerUpstreams: ProviderUpstreams.default({}),
  /**
   * Ask the serving engine for exact token ids and logprobs on every chat/completions call
   * (vLLM's `return_token_ids`, OpenAI's `logprobs`): what training a local model needs.
   */
  tokenIds: z.boolean().default(false),
  /** Start this queued rollout (a batch's) instead of creating one; the creation fields are then ignored. */
  rolloutId: z.string().min(1).max(200).optional(),
  /**
   * Give the new rollout this capability key, one this daemon issued for a rollout that has ended: a program relaunched
   * with its first run's environment (a restarted debug session) is then recorded as a rollout of its own. A key still
   * open is refused (conflict).
   */
  key: z
    .string()
    .regex(/^[A-Za-z0-9_-]{32}$/, 'key must be a rollout capability key: the 32 characters after /r/ in its URL')
    .optional(),
});
export type StartAgentRunParams = z.input<typeof StartAgentRunParams>;

export const AgentRun = z.object({
  rollout: Rollout,
  /** The rollout's capability URL (`LIGHTNING_URL`): give it to the agent process only. */
  url: z.string().url(),
});
export type AgentRun = z.infer<typeof AgentRun>;

export const TransitionRolloutParams = z.strictObject({
  id: RolloutId,
  to: RolloutStatus,
  error: z.string().max(10_000).nullable().default(null),
  exitCode: z.number().int().nullable().default(null),
  /** Where the attempt that ends ran (a Ray node, `--ray`): recorded with the attempt. */
  node: RayNode.optional(),
});
export type TransitionRolloutParams = z.input<typeof TransitionRolloutParams>;

/** Spans are checked one by one so that one bad span never fails the whole batch. */
export const AddSpansParams = z.strictObject({
  rolloutId: RolloutId,
  spans: z.array(z.unknown()).min(1).max(10_000),
});
export type AddSpansParams = z.input<typeof AddSpansParams>;

export const SpanResult = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('stored'), spanId: z.string(), sequence: z.number().int().positive() }),
  z.object({ kind: z.literal('duplicate'), spanId: z.string() }),
  z.object({ kind: z.literal('invalid'), index: z.number().int().nonnegative(), error: z.string() }),
]);
export type SpanResult = z.infer<typeof SpanResult>;

export const AddSpansResult = z.object({ results: z.array(SpanResult) });
export type AddSpansResult = z.infer<typeof AddSpansResult>;

export const AddRewardParams = z.strictObject({
  rolloutId: RolloutId,
  /** Annotate one step (an LLM call) instead of the whole rollout. */
  spanId: z
    .string()
    .regex(/^[0-9a-f]{16}$/, 'spanId must be 16 lowercase hex characters')
    .nullable()
    .default(null),
  name: z.string().min(1).max(100).default('reward'),
  value: z.number().finite(),
  source: RewardSource.default('human'),
  author: z.string().max(200).nullable().default(null),
  comment: z.string().max(10_000).nullable().default(null),
  reason: z.string().max(10_000).nullable().default(null),
});
export type AddRewardParams = z.input<typeof AddRewardParams>;

export const DaemonInfo = z.object({
  version: z.string(),
  pid: z.number().int(),
  store: z.string(),
  schemaVersion: z.number().int(),
  startedAt: z.number(),
});
export type DaemonInfo = z.infer<typeof DaemonInfo>;

export const SpanRange = z.object({
  rolloutId: z.string(),
  /** Sequence numbers of the new spans, inclusive. */
  fromSequence: z.number().int().positive(),
  toSequence: z.number().int().positive(),
});
export type SpanRange = z.infer<typeof SpanRange>;

export const ListSpansParams = z.strictObject({
  rolloutId: RolloutId,
  /** Only spans after this sequence number (what a live view already has). */
  afterSequence: z.number().int().nonnegative().default(0),
  limit: z.number().int().min(1).max(10_000).default(1_000),
  /** Spans slimmed for timelines and comparisons (./slimSpan.ts: long message lists, strings cut; `lightning.slim`). */
  slim: z.boolean().default(false),
});
export type ListSpansParams = z.input<typeof ListSpansParams>;

export const Methods = {
  daemonInfo: method('daemon/info', z.strictObject({}), DaemonInfo),
  listRollouts: method('rollouts/list', ListRolloutsParams, RolloutPage),
  /** Matching rollouts counted: in all, outside any batch, per run and batch (newest first): the panel's groups. */
  rolloutGroups: method('rollouts/groups', RolloutGroupsParams, RolloutGroups),
  /** `spans: false` leaves the spans out (`spans: []`): what a header needs of a 2,000-span rollout. */
  // At most `spanLimit` spans (the first, in order) come back: a 300k-span rollout is not one 800 MB answer.
  getRollout: method(
    'rollouts/get',
    z.strictObject({
      id: RolloutId,
      spans: z.boolean().default(true),
      spanLimit: z.number().int().min(1).max(100_000).default(10_000),
    }),
    RolloutDetail,
  ),
  createRollout: method('rollouts/create', CreateRolloutParams, Rollout),
  transitionRollout: method('rollouts/transition', TransitionRolloutParams, Rollout),
  /** Creates a running rollout for an agent process and returns its capability URL. */
  startAgentRun: method('agentRuns/start', StartAgentRunParams, AgentRun),
  addSpans: method('spans/add', AddSpansParams, AddSpansResult),
  listSpans: method('spans/list', ListSpansParams, z.object({ items: z.array(Span) })),
  addReward: method('rewards/add', AddRewardParams, Reward),
  listRewards: method('rewards/list', z.strictObject({ rolloutId: RolloutId }), z.object({ items: z.array(Reward) })),
  getStats: method('stats/get', z.strictObject({}), Stats),
  importDataset: method('datasets/import', ImportDatasetParams, Dataset),
  listDatasets: method('datasets/list', z.strictObject({}), z.object({ items: z.array(Dataset) })),
  /** A dataset's tasks (by id or name), optionally one split, in file order. */
  listTasks: method(
    'datasets/tasks',
    z.strictObject({ dataset: z.string().min(1), split: z.enum(['train', 'val', 'test']).optional() }),
    z.object({ dataset: Dataset, items: z.array(Task) }),
  ),
  /** The agent names and models of its newest rollouts' LLM calls (protocol/policies.ts): Start Training's policies. */
  datasetAgents: method('datasets/agents', DatasetAgentsParams, DatasetAgents),
  /** Every resource with its current and latest version. */
  listResources: method('resources/list', z.strictObject({}), z.object({ items: z.array(ResourceSummary) })),
  /** One version of a resource (default: the current one) and the list of all its versions. */
  getResource: method('resources/get', GetResourceParams, ResourceVersions),
  /** Stores the next version of a resource (current by default). */
  putResource: method('resources/put', PutResourceParams, Resource),
  /** Makes an existing version the current one (e.g. keep APO's best prompt as the resource). */
  setCurrentResource: method(
    'resources/setCurrent',
    z.strictObject({ name: ResourceName, version: z.number().int().positive() }),
    Resource,
  ),
  /**
   * Training runs of every algorithm (protocol/training.ts), started with `training/start`. The newest runs, each with
   * its last step and latest metrics.
   */
  listTrainingRuns: method(
    'trainingRuns/list',
    z.strictObject({ limit: z.number().int().min(1).max(500).default(50) }),
    z.object({ items: z.array(TrainingRunSummary) }),
  ),
  /** A run, its metrics (after `afterStep`) and its algorithm's part: checkpoints (GRPO, SFT), leaderboard (APO). */
  getTrainingRun: method('trainingRuns/get', GetTrainingRunParams, TrainingRunDetail),
  /**
   * Stops a run now, its agents and worker with it: it is cancelled (the request recorded as `cancelRequested`);
   * GRPO's and SFT's last checkpoint stays for `training/start` with `resume`, APO's candidates and result so far stay.
   */
  cancelTrainingRun: method('trainingRuns/cancel', z.strictObject({ id: z.string().min(1) }), TrainingRun),
  /** Scores finished rollouts with automatic reward sources, appending reward rows; `rewards/progress` reports. */
  scoreRollouts: method('rewards/score', ScoreRolloutsParams, ScoreRolloutsResult),
  /** Stops a `rewards/score` job after its current chunk; its answer then has `cancelled: true`. */
  cancelScore: method(
    'rewards/cancel',
    z.strictObject({ jobId: z.string().min(1).max(100) }),
    z.object({ cancelled: z.boolean() }),
  ),
  /**
   * One rollout as training sees it: each LLM call included or not (and why), credited reward, advantage (against its
   * batch's task group), tokens.
   */
  rolloutTransitions: method('transitions/forRollout', RolloutTransitionsParams, RolloutTransitions),
  /** Worker-mode batches (runner.ts) for long-lived agent workers: open one, follow it, report dead workers, cancel. */
  openWorkerBatch: method('workerBatches/open', OpenWorkerBatchParams, WorkerBatch),
  workerBatchEvents: method('workerBatches/events', WorkerBatchEventsParams, WorkerBatchEvents),
  workerExited: method('workerBatches/workerExited', WorkerExitedParams, WorkerExited),
  /** Where a worker runs (a Ray node, `--ray`): the attempts it ends record it. */
  workerPlaced: method('workerBatches/workerPlaced', WorkerPlacedParams, z.object({ placed: z.boolean() })),
  cancelWorkerBatch: method(
    'workerBatches/cancel',
    CancelWorkerBatchParams,
    z.object({ cancelled: z.number().int().nonnegative() }),
  ),
  /**
   * Starts a training run in the daemon, any algorithm (or resumes a GRPO or SFT one from its last checkpoint); returns
   * at once.
   */
  startTraining: method('training/start', StartTrainingParams, TrainingRun),
  listCheckpoints: method(
    'checkpoints/list',
    z.strictObject({ runId: z.string().min(1).optional() }),
    z.object({ items: z.array(Checkpoint) }),
  ),
  /** Writes a checkpoint as a PEFT adapter or a Hugging Face model folder, in a trainer worker of its own. */
  exportCheckpoint: method('checkpoints/export', ExportCheckpointParams, ExportCheckpointResult),
  /** Deletes a checkpoint's folder and record; refused for the one served now and one a running run continues from. */
  deleteCheckpoint: method('checkpoints/delete', DeleteCheckpointParams, DeleteCheckpointResult),
  /** Serves a checkpoint in a trainer worker of its own (stopping the one served before); answers once it serves. */
  servePolicy: method('policy/serve', ServePolicyParams, ServedPolicy),
  /** The checkpoint served now, if any. */
  currentPolicy: method('policy/current', z.strictObject({}), z.object({ served: ServedPolicy.nullable() })),
  /** Stops serving; answers what was served. */
  stopPolicy: method('policy/stop', z.strictObject({}), z.object({ stopped: ServedPolicy.nullable() })),
} as const;

export type Methods = typeof Methods;
export type MethodName = keyof Methods;
export type ParamsOf<M extends MethodName> = z.input<Methods[M]['params']>;
export type ParsedParamsOf<M extends MethodName> = z.output<Methods[M]['params']>;
export type ResultOf<M extends MethodName> = z.infer<Methods[M]['result']>;

export const Notifications = {
  /** Rollouts created or changed (status, counters, reward), at most every 100 ms, latest state only. */
  rolloutsChanged: notification('rollouts/changed', z.object({ rollouts: z.array(Rollout) })),
  /**
   * Which rollouts got spans since the last notification (at most every 100 ms), as sequence
   * ranges: a client showing one of them fetches the new spans with `spans/list` (afterSequence),
   * so no window is sent the spans of rollouts it does not show.
   */
  spansAdded: notification('spans/added', z.object({ rollouts: z.array(SpanRange) })),
  /**
   * A training run changed: status, a cancel request, metrics or checkpoints (GRPO), or a round recorded
   * (APO, `round`); with its latest metrics and its leaderboard. Fetch the series with trainingRuns/get.
   */
  trainingRunChanged: notification(
    'trainingRuns/changed',
    z.object({ run: TrainingRunSummary, round: z.number().int().nullable(), candidates: z.array(ApoCandidate) }),
  ),
  /** A `rewards/score` job's progress, after each chunk of rollouts. */
  scoreProgress: notification('rewards/progress', ScoreProgress),
  /** The served checkpoint changed: started, stopped, or its worker crashed (`error`, with the traceback). */
  policyChanged: notification('policy/changed', PolicyChanged),
} as const;

export type Notifications = typeof Notifications;
export type NotificationName = keyof Notifications;
export type NotificationParamsOf<N extends NotificationName> = z.infer<Notifications[N]['params']>;

export { Json };
