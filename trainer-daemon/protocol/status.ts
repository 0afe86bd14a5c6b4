/**
 * What "finished" means, in one place. A rollout has *ended* when it no longer runs (a failed or
 * timed-out one may still be queued again for a retry); it *ran to an outcome* when it ended other than
 * cancelled: what rewards score, training learns from, export reads and the unrated count counts. A
 * training run is final once it succeeded, failed or was cancelled (a resume starts it again). A failed or
 * timed-out rollout with attempts left runs again; a failed or cancelled GRPO or SFT run can be resumed.
 */
import type { Rollout, RolloutStatus, TrainingRunStatus } from './records';
import type { TrainingRun } from './training';
import { assertNever } from './assert';

/** The statuses of an ended rollout. */
export const ENDED_STATUSES = [
  'succeeded',
  'failed',
  'cancelled',
  'timeout',
] as const satisfies readonly RolloutStatus[];
/** The statuses of a rollout that ran to an outcome: ended, not cancelled. */
export const OUTCOME_STATUSES = ['succeeded', 'failed', 'timeout'] as const satisfies readonly RolloutStatus[];
/** The statuses of a final training run. */
export const FINAL_RUN_STATUSES = ['succeeded', 'failed', 'cancelled'] as const satisfies readonly TrainingRunStatus[];

export function hasEnded(status: RolloutStatus): boolean {
  return (ENDED_STATUSES as readonly RolloutStatus[]).includes(status);
}

export function hasOutcome(status: RolloutStatus): boolean {
  return (OUTCOME_STATUSES as readonly RolloutStatus[]).includes(status);
}

export function isFinal(status: TrainingRunStatus): boolean {
  return (FINAL_RUN_STATUSES as readonly TrainingRunStatus[]).includes(status);
}

/** An attempt that failed or timed out, of a rollout with attempts left: the retry policy queues it again. */
export function canRetry(rollout: Pick<Rollout, 'status' | 'attemptCount' | 'maxAttempts'>): boolean {
  return (rollout.status === 'failed' || rollout.status === 'timeout') && rollout.attemptCount < rollout.maxAttempts;
}

/**
 * A GRPO or SFT run that stopped early (failed or cancelled): it continues from its last checkpoint
 * (`training/start {resume}`).
 */
export function isResumable(run: Pick<TrainingRun, 'algorithm' | 'status'>): boolean {
  return resumesFromCheckpoints(run.algorithm) && (run.status === 'failed' || run.status === 'cancelled');
}

/**
 * Whether runs of this algorithm resume (from their last checkpoint). APO's beam search keeps its state in memory
 * only, so an APO run is started again instead; its candidates and best prompt so far stay.
 */
export function resumesFromCheckpoints(algorithm: TrainingRun['algorithm']): boolean {
  switch (algorithm) {
    case 'grpo':
    case 'sft':
      return true;
    case 'apo':
      return false;
    default:
      return assertNever(algorithm);
  }
}
