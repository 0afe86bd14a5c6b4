/**
 * Pure text for the panel's training runs, whatever the algorithm: what a run works on (its
 * resource or model, and dataset, read from its configuration) and its outcome line (APO: the
 * seed's validation score against the best's). Unit-tested in Node.
 */
import type { TrainingAlgorithm, TrainingRun } from '../training';

import { placementOf } from '../placement';
import { runLabel, trainedTarget } from '../runLabel';
import { assertNever } from '../assert';
import { inEditorWords } from '../setupAdvice';
import { formatTime } from './rolloutText';

/**
 * "GRPO tiny on sums · 14:03:12": a run by what it trains and when it was made (a tab's title, a header), never its id.
 */
export function runTitle(run: TrainingRun, now = Date.now()): string {
  return `${runLabel(run)} · ${formatTime(run.createdAt, now)}`;
}

/** "prompt · sums": the trained resource (or model) and what it learns from, and where it runs unless here. */
export function runSubject(run: TrainingRun): string {
  const where = placementOf(run);
  return (
    [trainedTarget(run), ...trainedOn(run), where === 'local' ? undefined : where].filter(Boolean).join(' · ') || run.id
  );
}

/**
 * APO and GRPO run a dataset's tasks; SFT learns from the rollouts rated at least its threshold (of a dataset, if
 * given).
 */
function trainedOn(run: TrainingRun): Array<string | null> {
  switch (run.algorithm) {
    case 'apo':
    case 'grpo':
      return [run.config.dataset];
    case 'sft':
      return [run.config.dataset, `rollouts rated ≥ ${run.config.minReward}`];
    default:
      return assertNever(run);
  }
}

/** "val 0.50 → 1.00" once an APO run has a result; otherwise the error of a failed run, or ''. */
export function runOutcome(run: TrainingRun): string {
  switch (run.algorithm) {
    case 'apo':
      if (run.result) return `val ${run.result.seed.valScore.toFixed(2)} → ${run.result.best.valScore.toFixed(2)}`;
      break;
    case 'grpo':
    case 'sft':
      break;
    default:
      return assertNever(run);
  }
  return inEditorWords(run.error ?? '');
}

/** The metric series a run's chart shows first: an algorithm's scores, else everything it recorded. */
export function chartedMetrics(algorithm: TrainingAlgorithm): readonly string[] | undefined {
  switch (algorithm) {
    case 'apo':
      return ['best_val_score', 'leader_val_score', 'mean_batch_score'];
    case 'grpo':
    case 'sft':
      return undefined;
    default:
      return assertNever(algorithm);
  }
}

/** "0.750" for a score, "–" for none. */
export function scoreText(value: number | null): string {
  return value === null ? '–' : value.toFixed(3);
}
