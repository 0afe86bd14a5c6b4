/**
 * What the editor says about a training run while it is followed: the progress line (GRPO: iteration k of N,
 * the sampled and validation reward; SFT: epoch k of N, the loss, the validation loss and accuracy; APO: round k of
 * N, the best validation score, the calls and rollouts spent), the end message, and whether a failure means the
 * trainer's Python is missing (then **Set Up Trainer** is offered). Pure: unit-tested.
 */
import type { TrainingRunSummary } from '../../trainer-daemon/protocol';
import { assertNever } from '../../trainer-daemon/protocol/assert';

const number = (value: number | undefined): string =>
  value === undefined || !Number.isFinite(value) ? '–' : Number(value.toFixed(3)).toString();

/** The steps a run is configured for: GRPO's iterations, SFT's epochs, APO's rounds. */
function configuredIterations(run: TrainingRunSummary): number | undefined {
  switch (run.algorithm) {
    case 'grpo':
      return run.config.iterations;
    case 'sft':
      return run.config.epochs;
    case 'apo':
      return run.config.rounds;
    default:
      return assertNever(run);
  }
}

/** "epoch 2/3 · loss 0.41 · val loss 0.52 · val accuracy 0.75" (before the first epoch: "loading the model…"). */
function sftProgressText(run: TrainingRunSummary, total: number | undefined): string {
  const val = [
    run.latest['val/loss'] === undefined ? undefined : `val loss ${number(run.latest['val/loss'])}`,
    run.latest['val/accuracy'] === undefined ? undefined : `val accuracy ${number(run.latest['val/accuracy'])}`,
  ].filter(Boolean);
  if (run.step === 0)
    return val.length ? `before training: ${val.join(' · ')}` : 'loading the model and the rated rollouts…';
  return [`epoch ${run.step}${total ? `/${total}` : ''}`, `loss ${number(run.latest.loss)}`, ...val].join(' · ');
}

/** "round 1/2 · best validation score 1 (original 0.5) · 12 LLM calls · 40 rollouts" (before: scoring the original). */
function apoProgressText(run: TrainingRunSummary, total: number | undefined): string {
  const best = run.latest.best_val_score;
  if (best === undefined) return 'scoring the original prompt…';
  const spent = `${run.latest.llm_calls ?? 0} LLM calls · ${run.latest.rollouts ?? 0} rollouts`;
  if (run.step === 0)
    return `the original prompt scores ${number(best)} on validation; round 1${total ? `/${total}` : ''}…`;
  return [`round ${run.step}${total ? `/${total}` : ''}`, `best validation score ${number(best)}`, spent].join(' · ');
}

/** A run's progress line, by its algorithm. */
export function progressText(run: TrainingRunSummary): string {
  if (run.cancelRequested && run.status === 'running') return 'cancelling…';
  const total = configuredIterations(run);
  switch (run.algorithm) {
    case 'sft':
      return sftProgressText(run, total);
    case 'grpo':
      return iterationProgressText(run, total);
    case 'apo':
      return apoProgressText(run, total);
    default:
      return assertNever(run);
  }
}

/** "iteration 2/10 · reward 0.25 ± 0.1 · val 0.5" (before the first iteration: "starting the trainer…"). */
function iterationProgressText(run: TrainingRunSummary, total: number | undefined): string {
  if (run.step === 0 || run.latest['reward/mean'] === undefined)
    return run.latest['val/reward'] === undefined
      ? 'starting the trainer and the first rollouts…'
      : `validation before training: ${number(run.latest['val/reward'])}`;
  const parts = [
    `iteration ${run.step}${total ? `/${total}` : ''}`,
    `reward ${number(run.latest['reward/mean'])} ± ${number(run.latest['reward/std'])}`,
  ];
  if (run.latest['val/reward'] !== undefined) parts.push(`val ${number(run.latest['val/reward'])}`);
  return parts.join(' · ');
}

/** The fraction of the run done (0–1), from its step and configured iterations. */
export function progressFraction(run: TrainingRunSummary): number {
  const total = configuredIterations(run);
  return total ? Math.min(1, run.step / total) : 0;
}

/** One line for the notification at the end of a run. */
export function endText(run: TrainingRunSummary): string {
  switch (run.status) {
    case 'succeeded':
      return `training run ${run.id} finished after ${run.step} ${stepNoun(run)}(s): ${outcomeText(run)}.`;
    case 'cancelled':
      return `training run ${run.id} cancelled after ${run.step} ${stepNoun(run)}(s); ${keptText(run)}.`;
    case 'failed':
      return `training run ${run.id} failed: ${run.error ?? 'no message'}`;
    case 'queued':
    case 'running':
      return `training run ${run.id} is ${run.status}.`;
  }
}

/** What a stopped run keeps: GRPO's and SFT's checkpoints (it resumes from the last); APO's candidates. */
function keptText(run: TrainingRunSummary): string {
  switch (run.algorithm) {
    case 'grpo':
    case 'sft':
      return 'its checkpoints are kept and it can be resumed';
    case 'apo':
      return 'its candidates and best prompt so far are kept';
    default:
      return assertNever(run);
  }
}

/** What a run counts its steps in: SFT's epochs, GRPO's iterations, APO's rounds. */
function stepNoun(run: TrainingRunSummary): string {
  switch (run.algorithm) {
    case 'sft':
      return 'epoch';
    case 'grpo':
      return 'iteration';
    case 'apo':
      return 'round';
    default:
      return assertNever(run);
  }
}

/** A finished run's outcome: SFT's loss and validation; GRPO's sampled and validation reward; APO's scores. */
function outcomeText(run: TrainingRunSummary): string {
  const latest = run.latest;
  switch (run.algorithm) {
    case 'sft':
      return `loss ${number(latest.loss)}${latest['val/loss'] !== undefined ? `, validation loss ${number(latest['val/loss'])}, accuracy ${number(latest['val/accuracy'])}` : ''}`;
    case 'grpo':
      return `reward ${number(latest['reward/mean'])}${latest['val/reward'] !== undefined ? `, validation ${number(latest['val/reward'])}` : ''}`;
    case 'apo':
      return run.result
        ? `validation score ${number(run.result.seed.valScore)} → ${number(run.result.best.valScore)}`
        : `best validation score ${number(latest.best_val_score)}`;
    default:
      return assertNever(run);
  }
}
