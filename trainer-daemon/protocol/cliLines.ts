/**
 * The `lightning` CLI's machine-readable lines, the contract between the CLI and the programs that
 * run it as a child (the extension): `serve` prints `ready` or `startup-failed` first on stdout, after
 * `store-upgrading` when it upgrades a store an earlier Lightning wrote;
 * `dataset run --progress json` prints one JSON line per event on stderr (`batch-started`, `rollout-finished`,
 * `rollout-scored`) and `batch-finished` on stdout (with `--json`); `train --json` prints `training-started` and
 * `training-finished` on stdout. The CLI writes these types, and programs that run it read them with
 * `parseCliLine` (the extension: `serve`'s first line, `dataset run`'s); nobody reads the human lines.
 */
import { z } from 'zod';
import { ReadyMessage } from './daemon';
import { ErrorKind } from './errors';
import { formatDuration } from './format';
import { RolloutStatus } from './records';

/**
 * `lightning serve` could not start. `reason` says what the starter should do: `store_owned`,
 * another daemon holds the store (find it and connect); `runtime`, a native module built for another
 * runtime, and `configuration`, a bad option or setting (a restart will not help: tell the user);
 * `other`, anything else.
 */
export const StartupFailed = z.object({
  event: z.literal('startup-failed'),
  reason: z.enum(['store_owned', 'runtime', 'configuration', 'other']),
  kind: ErrorKind,
  message: z.string(),
});
export type StartupFailed = z.infer<typeof StartupFailed>;

/**
 * `lightning serve` is upgrading a store an earlier Lightning wrote (schema `from` to `to`) before it is ready: a store
 * of millions of spans takes a while (~9 s a million here), so a starter waits longer for the ready line after this.
 */
export const StoreUpgrading = z.object({
  event: z.literal('store-upgrading'),
  from: z.number().int(),
  to: z.number().int(),
  spans: z.number().int(),
});
export type StoreUpgrading = z.infer<typeof StoreUpgrading>;

/** A batch was created: `total` rollouts; `scored` when a rewards file scores them. */
export const BatchStarted = z.object({
  event: z.literal('batch-started'),
  batchId: z.string(),
  total: z.number().int().nonnegative(),
  scored: z.boolean(),
});
export type BatchStarted = z.infer<typeof BatchStarted>;

/** An attempt ended; `done` counts rollouts that will not run again (a retried attempt does not count). */
export const RolloutFinished = z.object({
  event: z.literal('rollout-finished'),
  done: z.number().int().nonnegative(),
  total: z.number().int().nonnegative(),
  rolloutId: z.string(),
  taskId: z.string().nullable(),
  status: RolloutStatus,
  retrying: z.boolean(),
  reward: z.number().nullable(),
  durationMs: z.number().nullable(),
  error: z.string().nullable(),
});
export type RolloutFinished = z.infer<typeof RolloutFinished>;

/** A rollout's automatic reward arrived; `errors` names the sources that failed. */
export const RolloutScored = z.object({
  event: z.literal('rollout-scored'),
  rolloutId: z.string(),
  reward: z.number().nullable(),
  errors: z.string().nullable(),
});
export type RolloutScored = z.infer<typeof RolloutScored>;

export const TaskSummary = z.object({
  task: z.string(),
  rollouts: z.number(),
  succeeded: z.number(),
  meanReward: z.number().nullable(),
  p50Ms: z.number().nullable(),
  p95Ms: z.number().nullable(),
  meanTokens: z.number(),
  scoreErrors: z.number(),
});
export type TaskSummary = z.infer<typeof TaskSummary>;

export const ScoringSummary = z.object({
  rewardsFile: z.string(),
  scored: z.number(),
  errors: z.array(z.object({ rolloutId: z.string(), task: z.string().nullable(), error: z.string() })),
});

/** The batch's summary: a row per task, then `(all)`. */
export const BatchFinished = z.object({
  event: z.literal('batch-finished'),
  batchId: z.string(),
  tasks: z.array(TaskSummary).min(1),
  scoring: ScoringSummary.optional(),
});
export type BatchFinished = z.infer<typeof BatchFinished>;

export const TrainingStarted = z.object({
  event: z.literal('training-started'),
  algorithm: z.string().optional(),
  runId: z.string(),
});
export type TrainingStarted = z.infer<typeof TrainingStarted>;

/** The run's outcome; its fields are the algorithm's result (APO: `ApoResult`; GRPO: `run`, `checkpoints`). */
export const TrainingFinished = z
  .object({ event: z.literal('training-finished'), algorithm: z.string().optional() })
  .passthrough();
export type TrainingFinished = z.infer<typeof TrainingFinished>;

export const CliLine = z.discriminatedUnion('event', [
  ReadyMessage,
  StartupFailed,
  StoreUpgrading,
  BatchStarted,
  RolloutFinished,
  RolloutScored,
  BatchFinished,
  TrainingStarted,
  TrainingFinished,
]);
export type CliLine = z.infer<typeof CliLine>;

/** One line the CLI printed, or undefined when it is not one of its JSON lines (a human line, a log line). */
export function parseCliLine(line: string): CliLine | undefined {
  if (!line.startsWith('{')) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch {
    return undefined;
  }
  const parsed = CliLine.safeParse(json);
  return parsed.success ? parsed.data : undefined;
}

const rewardText = (value: number | null): string => (value === null ? '-' : String(Math.round(value * 1000) / 1000));

/** `ro-… task-2 succeeded reward 1 1.20 s`: an attempt as the CLI's progress and the editor's notification say it. */
export function describeAttempt(line: RolloutFinished): string {
  return `${line.rolloutId} ${line.taskId ?? ''} ${line.status}${line.retrying ? ' (retrying)' : ''} reward ${rewardText(line.reward)} ${formatDuration(line.durationMs, '-')}`;
}

/** `scored ro-…: reward 1[ (errors: …)]`. */
export function describeScore(line: RolloutScored): string {
  return `scored ${line.rolloutId}: reward ${rewardText(line.reward)}${line.errors ? ` (errors: ${line.errors})` : ''}`;
}
