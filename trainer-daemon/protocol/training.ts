/**
 * Training runs of every algorithm over the editor-facing RPC: how a run is started (`training/start`: the daemon
 * runs GRPO, SFT and APO alike) and what the panel and the CLI read back: the run with its latest metrics, the
 * metric time series, and each algorithm's own part — GRPO's and SFT's checkpoints, APO's leaderboard. The records
 * themselves (TrainingRun, MetricPoint, Checkpoint) are in records.ts; APO's configuration and candidates in apo.ts.
 */
import { z } from 'zod';
import { ApoCandidate, ApoConfig, ApoResult } from './apo';
import { Checkpoint, MetricPoint, TrainingRunRecord } from './records';
import { AdapterSpec, LossType, ModelSpec } from './trainer';
import { DEFAULT_KEEP_CHECKPOINTS, KeepCheckpoints } from './checkpoints';
import { RunCommand, StartEnv } from './runCommand';
import { SftConfig } from './sft';
import { PolicySpec, policyIssues, RegexSource } from './policies';
import { assertNever } from './assert';

/** The fields of a GRPO configuration (GrpoConfig adds the checks across fields). */
const GrpoFields = z.strictObject({
  algorithm: z.literal('grpo').default('grpo'),
  model: ModelSpec,
  /** Full fine-tuning for the tiny model, LoRA for Hugging Face models, unless given. */
  adapter: AdapterSpec.optional(),
  /** Dataset name or id; its `train` split is sampled every iteration. */
  dataset: z.string().min(1),
  /** Dataset for evaluation (its `val` split, else all its tasks); default: the training dataset's `val` split. */
  valDataset: z.string().min(1).nullable().default(null),
  iterations: z.number().int().min(1).max(100_000).default(10),
  /** Rollouts per task (the GRPO group size); ≥ 2, or every advantage is 0. */
  samples: z
    .number()
    .int()
    .min(2, 'samples must be at least 2: GRPO compares the rollouts of a task')
    .max(256)
    .default(8),
  /** Train tasks per iteration (a random subset when the split is larger); null: all of them. */
  tasksPerIteration: z.number().int().min(1).nullable().default(null),
  lr: z.number().positive().max(1).default(3e-4),
  /** Agent processes running at once (process mode), or long-lived agent workers (worker mode). */
  workers: z.number().int().min(1).max(1024).default(8),
  /**
   * `process`: one agent process per rollout; `worker`: long-lived agent processes that take rollouts
   * from LIGHTNING_RUNNER_URL (docs/datasets.md, "Worker mode").
   */
  agentMode: z.enum(['process', 'worker']).default('process'),
  /** Worker mode: rollouts one agent worker holds at once (LIGHTNING_RUNNER_CONCURRENCY). */
  perWorker: z.number().int().min(1).max(10_000).default(16),
  command: RunCommand,
  /** Evaluate on the validation tasks every this many iterations (and before the first and after the last). */
  evalEvery: z.number().int().min(1).default(5),
  seed: z.number().int().default(0),
  /** Per-rollout time limit (`lightning train --timeout` takes at most a week, as the runner's batches do). */
  timeoutSeconds: z.number().int().min(1).default(120),
  epochs: z.number().int().min(1).max(100).default(2),
  minibatch: z.number().int().min(1).default(128),
  /** PPO ratio clipping: the ratio is kept in [1 − clip, 1 + (clipHigh ?? clip)]. */
  clip: z.number().positive().max(10).default(0.2),
  /** DAPO's clip-higher: a wider upper bound (e.g. 0.28); null: the same as clip. */
  clipHigh: z.number().positive().max(10).nullable().default(null),
  /**
   * How per-token losses are averaged, named as TRL's GRPOTrainer names them: `grpo` (per-sequence mean, then
   * mean over sequences), `bnpo` (token mean per micro-batch), `dr_grpo` (token sum / (sequences × the longest
   * response)), `dapo` (token mean over the minibatch).
   */
  lossType: LossType.default('dapo'),
  /**
   * TRL's scale_rewards: `group` divides each group's advantages by its reward std (GRPO); `none` only subtracts the
   * mean (Dr. GRPO).
   */
  scaleRewards: z.enum(['group', 'none']).default('group'),
  /**
   * The group's reward std that `scaleRewards: group` divides by: `sample` (Bessel's correction, n − 1: torch.std,
   * as TRL's GRPOTrainer) or `population` (n: ≈ 1.07× larger advantages at 8 samples).
   */
  std: z.enum(['sample', 'population']).default('sample'),
  /**
   * dr_grpo's constant divisor per sequence, TRL's `max_completion_length`; null: what TRL would use, the generation
   * cap: the largest `max_tokens` the iteration's trained calls asked for (never below the longest response; the
   * longest response when no call named one). Only `lossType: dr_grpo` reads it.
   */
  maxResponseLength: z.number().int().min(1).max(1_048_576).nullable().default(null),
  /** Weight of the k3 KL to the reference (base) policy; the KL is measured and shown also when 0. */
  klCoef: z.number().min(0).default(0),
  /**
   * TRL's use_bias_correction_kl: the KL term weighted by the importance ratio π/π_behaviour, so its gradient is the
   * unbiased reverse-KL gradient (DeepSeek-V3.2); on, as TRL 1.13's default. Matters only with klCoef > 0.
   */
  klBiasCorrection: z.boolean().default(true),
  /**
   * Transitions whose advantage is 0 (a group whose rewards are all equal): `keep` (TRL's GRPOTrainer) trains on
   * them, so they count in the loss's normaliser and the KL and entropy terms act on them; `drop` leaves them out
   * of the update (cheaper; no policy-gradient signal is lost, but the other rows then weigh more).
   */
  zeroAdvantage: z.enum(['keep', 'drop']).default('keep'),
  entropyCoef: z.number().min(0).default(0),
  /** Supervised warm start before RL: a chat JSONL file (`lightning export --format chat`). */
  warmStart: z
    .strictObject({
      file: z.string().min(1),
      steps: z.number().int().min(1).default(200),
      lr: z.number().positive().max(1).default(1e-3),
      /** Stop early once this fraction of sampled completions equals the demonstrations. */
      untilSampledAccuracy: z.number().min(0).max(1).nullable().default(null),
    })
    .nullable()
    .default(null),
  device: z.enum(['auto', 'cpu', 'cuda']).default('auto'),
  /** The Python that runs the worker; null: found as `lightning doctor` does. */
  python: z.string().nullable().default(null),
  /**
   * Retention (training/retention.ts): the run keeps its best checkpoint (by validation reward, else reward), its
   * last N, and optimizer state only in the newest (the one it resumes from); `all` keeps every checkpoint.
   */
  keepCheckpoints: KeepCheckpoints.default(DEFAULT_KEEP_CHECKPOINTS),
  /**
   * The rewards config every rollout is scored with before LightningRL builds transitions (absolute
   * path); null: `.lightning/rewards.json` beside the store when it exists, else no automatic rewards.
   */
  rewardsFile: z.string().min(1).nullable().default(null),
  /**
   * Data-parallel updates under torchrun (docs/scale-out.md): `nprocPerNode` ranks here, and with
   * `rdzvEndpoint` (HOST:PORT of this machine, reachable from the others) `nnodes` machines in all;
   * null: one trainer process.
   */
  distributed: z
    .strictObject({
      nprocPerNode: z.number().int().min(1).max(64),
      /**
       * Shard the policy's parameters, gradients and optimizer state across the ranks (FSDP2, torch ≥ 2.6;
       * python/lightning_trainer/fsdp.py) instead of a full replica per rank; rank 0 serves a gathered copy.
       */
      fsdp: z.boolean().default(false),
      nnodes: z.number().int().min(1).max(1024).default(1),
      rdzvEndpoint: z
        .string()
        .regex(/^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, 'rdzvEndpoint must be HOST:PORT, e.g. 10.0.0.5:29500')
        .nullable()
        .default(null),
    })
    .refine((d) => d.nnodes === 1 || d.rdzvEndpoint !== null, {
      message: 'nnodes > 1 needs rdzvEndpoint (HOST:PORT of this machine, where the other nodes connect)',
    })
    .nullable()
    .default(null),
  /** The agents as Ray tasks on this existing cluster (runner/rayPool.ts); null: on the daemon's machine. */
  ray: z
    .strictObject({
      address: z.string().min(1),
      /** A Python with ray; null: LIGHTNING_RAY_PYTHON, else python3. */
      python: z.string().min(1).nullable().default(null),
      workingDir: z.string().min(1).nullable().default(null),
    })
    .nullable()
    .default(null),
  /**
   * Train only the LLM calls of agents whose name matches (LightningRL's agentMatch, `--agent REGEX`); the policy
   * still answers every call. null: every call trains.
   */
  agent: RegexSource.nullable().default(null),
  /**
   * Several policies (`--policy NAME=REGEX`, protocol/policies.ts): one LoRA adapter each on the one base model, each
   * call routed to its policy as it is made; empty: one policy. Hugging Face + LoRA only.
   */
  policies: z.array(PolicySpec).max(16).default([]),
});
/** `lightning train --algorithm grpo …`: everything a run needs to start again from its record. */
export const GrpoConfig = GrpoFields.superRefine((config, ctx) => {
  for (const { path, message } of policyIssues(config)) ctx.addIssue({ code: 'custom', path: [path], message });
});
export type GrpoConfig = z.infer<typeof GrpoConfig>;
export type GrpoConfigInput = z.input<typeof GrpoConfig>;

/**
 * A run of each algorithm with its own configuration: callers switch on `algorithm` (ending in
 * `assertNever`). A stored configuration is read back leniently at its top level: a field a later
 * version dropped is ignored and one it added gets its default, so old runs still list.
 */
export const GrpoTrainingRun = TrainingRunRecord.extend({
  algorithm: z.literal('grpo'),
  config: z.object(GrpoConfig.shape),
  /** A GRPO run's outcome is its metrics and checkpoints; it records no result object. */
  result: z.null().catch(null),
});
export type GrpoTrainingRun = z.infer<typeof GrpoTrainingRun>;
export const ApoTrainingRun = TrainingRunRecord.extend({
  algorithm: z.literal('apo'),
  config: z.object({
    ...ApoConfig.shape,
    // Runs recorded while APO ran in a CLI process of its own kept neither (their configs still list).
    algorithm: ApoConfig.shape.algorithm.default('apo'),
    /** null: a run recorded before the daemon ran APO (its command was not stored). */
    command: RunCommand.nullable().catch(null),
  }),
  /** The seed and best prompts with their validation scores and the diff, once the run ended with one. */
  result: ApoResult.nullable().catch(null),
});
export type ApoTrainingRun = z.infer<typeof ApoTrainingRun>;
export const SftTrainingRun = TrainingRunRecord.extend({
  algorithm: z.literal('sft'),
  config: z.object(SftConfig.shape),
  /** An SFT run's outcome is its metrics and checkpoints, as GRPO's. */
  result: z.null().catch(null),
});
export type SftTrainingRun = z.infer<typeof SftTrainingRun>;
export const TrainingRun = z.discriminatedUnion('algorithm', [GrpoTrainingRun, ApoTrainingRun, SftTrainingRun]);
export type TrainingRun = z.infer<typeof TrainingRun>;
/**
 * Every algorithm, for the places that list them (the RPC's run groups, the CLI's choices): the object must name each
 * of TrainingRun's variants, and nothing else, or this does not compile.
 */
export const TrainingAlgorithm = z.enum({ grpo: 'grpo', apo: 'apo', sft: 'sft' } as const satisfies {
  [A in TrainingRun['algorithm']]: A;
});
export type TrainingAlgorithm = z.infer<typeof TrainingAlgorithm>;
/** What a new run is recorded with: an algorithm and its parsed configuration. */
export type NewTrainingRun =
  | { readonly algorithm: 'grpo'; readonly config: GrpoConfig }
  | { readonly algorithm: 'apo'; readonly config: ApoConfig }
  | { readonly algorithm: 'sft'; readonly config: SftConfig };
/** The runs that train weights in the daemon's trainer worker (and so keep checkpoints and resume from them). */
export type WeightsTrainingRun = GrpoTrainingRun | SftTrainingRun;

/** The configuration of a run that trains weights (its model, adapter, device, Python); undefined for APO. */
export function weightsConfig(run: TrainingRun): GrpoConfig | SftConfig | undefined {
  switch (run.algorithm) {
    case 'grpo':
    case 'sft':
      return run.config;
    case 'apo':
      return undefined;
    default:
      return assertNever(run);
  }
}

/**
 * The policies a run trains (`--policy`, GRPO only): none for a run of one policy, for a configuration stored before
 * policies existed, and for SFT and APO.
 */
export function runPolicies(run: TrainingRun): readonly PolicySpec[] {
  switch (run.algorithm) {
    case 'grpo':
      return run.config.policies ?? [];
    case 'sft':
    case 'apo':
      return [];
    default:
      return assertNever(run);
  }
}

/** A run the daemon starts: GRPO (`algorithm` may be left out: the default), SFT or APO. */
export const DaemonTrainingConfig = z.discriminatedUnion('algorithm', [GrpoConfig, SftConfig, ApoConfig]);
export type DaemonTrainingConfig = z.infer<typeof DaemonTrainingConfig>;

/**
 * Exactly one of: a new run's `config`, or `resume` (a cancelled or failed GRPO or SFT run's id, continued from its
 * last checkpoint; an APO run is not resumed: start it again). `env`: variables for this start's agents, never
 * stored (runCommand.ts).
 */
export const StartTrainingParams = z
  .strictObject({
    config: DaemonTrainingConfig.optional(),
    resume: z.string().min(1).optional(),
    env: StartEnv.default({}),
  })
  .refine((p) => (p.config === undefined) !== (p.resume === undefined), {
    message: 'give either config (a new run) or resume (a run id)',
  });
export type StartTrainingParams = z.input<typeof StartTrainingParams>;

/** A run with where it is: for lists and the `trainingRuns/changed` notification. */
const Progress = {
  /** The last step (GRPO: iteration, APO: round) with metrics (0 before the first). */
  step: z.number().int().nonnegative(),
  /** The latest value of each metric. */
  latest: z.record(z.string(), z.number()),
};
export const GrpoTrainingRunSummary = GrpoTrainingRun.extend(Progress);
export const ApoTrainingRunSummary = ApoTrainingRun.extend(Progress);
export const SftTrainingRunSummary = SftTrainingRun.extend(Progress);
export const TrainingRunSummary = z.discriminatedUnion('algorithm', [
  GrpoTrainingRunSummary,
  ApoTrainingRunSummary,
  SftTrainingRunSummary,
]);
export type TrainingRunSummary = z.infer<typeof TrainingRunSummary>;

/** Metric points in step order (GRPO: reward/mean, val/reward, loss, kl, …; APO: best_val_score, …). */
export const MetricSeries = z.array(MetricPoint.omit({ runId: true }));
export type MetricSeries = z.infer<typeof MetricSeries>;

/** One metric's points out of a series, in step order. */
export function metricPoints(metrics: MetricSeries, name: string): MetricSeries {
  return metrics.filter((point) => point.name === name);
}

/**
 * A run with its metric series and its algorithm's own part (`algorithm` repeats the run's, so a switch on it narrows
 * both): GRPO's and SFT's checkpoints (the saved policies, by step), APO's leaderboard (candidates scored on the full
 * validation set first, best first; then the others by batch score).
 */
export const TrainingRunDetail = z.discriminatedUnion('algorithm', [
  z.object({
    algorithm: z.literal('grpo'),
    run: GrpoTrainingRunSummary,
    metrics: MetricSeries,
    checkpoints: z.array(Checkpoint),
  }),
  z.object({
    algorithm: z.literal('apo'),
    run: ApoTrainingRunSummary,
    metrics: MetricSeries,
    candidates: z.array(ApoCandidate),
  }),
  z.object({
    algorithm: z.literal('sft'),
    run: SftTrainingRunSummary,
    metrics: MetricSeries,
    checkpoints: z.array(Checkpoint),
  }),
]);
export type TrainingRunDetail = z.infer<typeof TrainingRunDetail>;

/** A run's checkpoints: GRPO's and SFT's; an APO run keeps prompt versions instead (none). */
export function checkpointsOf(detail: TrainingRunDetail): Checkpoint[] {
  switch (detail.algorithm) {
    case 'grpo':
    case 'sft':
      return detail.checkpoints;
    case 'apo':
      return [];
    default:
      return assertNever(detail);
  }
}

/** A run's leaderboard: APO's candidates, best first; GRPO and SFT have none. */
export function candidatesOf(detail: TrainingRunDetail): ApoCandidate[] {
  switch (detail.algorithm) {
    case 'apo':
      return detail.candidates;
    case 'grpo':
    case 'sft':
      return [];
    default:
      return assertNever(detail);
  }
}

export const GetTrainingRunParams = z.strictObject({
  id: z.string().min(1),
  /** Only metric points after this step (what a live chart already has). */
  afterStep: z.number().int().min(-1).default(-1),
});

/**
 * A GRPO run's batch of rollouts: `mode` rollouts made with the policy of `policyStep` (0: the
 * starting model). Iteration s trains on the batch of policy step s − 1 and is validated on that of s.
 */
export function grpoBatchId(runId: string, mode: 'train' | 'val', policyStep: number): string {
  return `${runId}-${mode}-${policyStep}`;
}

/** The batch iteration `iteration` of a GRPO run trained on (its sampled reward's rollouts). */
export function grpoIterationBatchId(runId: string, iteration: number): string {
  return grpoBatchId(runId, 'train', iteration - 1);
}
