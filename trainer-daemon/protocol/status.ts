/**
 * What "finished" means, in one place. A rollout has *ended* when it no longer runs (a failed or
 * timed-out one may still be queued again for a retry); it *ran to an outcome* when it ended other than
 * cancelled: what rewards score, training learns from, export reads and the unrated count counts. A
 * training run is final once it succeeded, failed or was cancelled (a resume starts it again).
 */
import type { RolloutStatus, TrainingRunStatus } from './records';

/** The statuses of an ended rollout. */
export const ENDED_STATUSES = ['succeeded', 'failed', 'cancelled', 'timeout'] as const satisfies readonly RolloutStatus[];
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
