/**
 * What the editor says about a GRPO or SFT run while it is followed: the progress line (GRPO: iteration k of N,
 * the sampled and validation reward; SFT: epoch k of N, the loss, the validation loss and accuracy), the end
 * message, and whether a failure means the trainer's Python is missing (then **Set Up Trainer** is offered).
 * Pure: unit-tested.
 */
import type { TrainingRunSummary } from '../../trainer-daemon/protocol';
import type { ErrorKind } from '../../trainer-daemon/protocol/errors';
import { assertNever } from '../../trainer-daemon/protocol/assert';

const number = (value: number | undefined): string =>
  value === undefined || !Number.isFinite(value) ? '–' : Number(value.toFixed(3)).toString();

/** The iterations a run is configured for: GRPO's, SFT's epochs; an APO run counts rounds, which these lines do not follow. */
function configuredIterations(run: TrainingRunSummary): number | undefined {
  switch (run.algorithm) {
    case 'grpo':
      return run.config.iterations;
    case 'sft':
      return run.config.epochs;
    case 'apo':
      return undefined;
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

/** "iteration 2/10 · reward 0.25 ± 0.1 · val 0.5" (before the first iteration: "starting the trainer…"). */
export function progressText(run: TrainingRunSummary): string {
  if (run.cancelRequested && run.status === 'running') return 'cancelling…';
  const total = configuredIterations(run);
  if (run.algorithm === 'sft') return sftProgressText(run, total);
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

/** The daemon's error kind says no Python here can run the trainer (none with PyTorch, or it cannot start): Set Up Trainer fixes it. */
export function needsTrainerSetup(kind: ErrorKind | null): boolean {
  return kind === 'trainer_unavailable';
}

/** One line for the notification at the end of a run. */
export function endText(run: TrainingRunSummary): string {
  switch (run.status) {
    case 'succeeded':
      return run.algorithm === 'sft'
        ? `training run ${run.id} finished after ${run.step} epoch(s): loss ${number(run.latest.loss)}${run.latest['val/loss'] !== undefined ? `, validation loss ${number(run.latest['val/loss'])}, accuracy ${number(run.latest['val/accuracy'])}` : ''}.`
        : `training run ${run.id} finished after ${run.step} iteration(s): reward ${number(run.latest['reward/mean'])}${run.latest['val/reward'] !== undefined ? `, validation ${number(run.latest['val/reward'])}` : ''}.`;
    case 'cancelled':
      return `training run ${run.id} cancelled after ${run.step} ${run.algorithm === 'sft' ? 'epoch' : 'iteration'}(s); its checkpoints are kept and it can be resumed.`;
    case 'failed':
      return `training run ${run.id} failed: ${run.error ?? 'no message'}`;
    case 'queued':
    case 'running':
      return `training run ${run.id} is ${run.status}.`;
  }
}
