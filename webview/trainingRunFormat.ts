/**
 * Pure text for the panel's training runs, whatever the algorithm: what a run works on (its
 * resource or model, and dataset, read from its configuration) and its outcome line (APO: the
 * seed's validation score against the best's). Unit-tested in Node.
 */
import type { Json, TrainingRun, TrainingRunStatus } from '../trainer-daemon/protocol/records';

import { runPlacement } from '../trainer-daemon/protocol/placement';
import { STATUS_ICON } from './format';

/** A run's statuses are a subset of a rollout's, and show the same glyphs. */
export const RUN_STATUS_ICON: Record<TrainingRunStatus, string> = STATUS_ICON;

const field = (value: Json | null, key: string): Json | undefined => (value !== null && typeof value === 'object' && !Array.isArray(value) ? value[key] : undefined);
const text = (value: Json | undefined): string | undefined => (typeof value === 'string' ? value : undefined);
const number = (value: Json | undefined): number | undefined => (typeof value === 'number' ? value : undefined);

/** "prompt · sums": the trained resource (or model) and the dataset. */
export function runSubject(run: TrainingRun): string {
  // GRPO's model is a spec: the tiny built-in one, or a Hugging Face name.
  const model = field(run.config, 'model') ?? null;
  const target = text(field(run.config, 'resource')) ?? text(model ?? undefined) ?? text(field(model, 'name')) ?? text(field(model, 'kind'));
  const dataset = text(field(run.config, 'dataset'));
  const where = runPlacement(run.config);
  return [target, dataset, where === 'local' ? undefined : where].filter(Boolean).join(' · ') || run.id;
}

/** "val 0.50 → 1.00" once an APO run has a result; otherwise the error of a failed run, or ''. */
export function runOutcome(run: TrainingRun): string {
  const seed = number(field(field(run.result, 'seed') ?? null, 'valScore'));
  const best = number(field(field(run.result, 'best') ?? null, 'valScore'));
  if (seed !== undefined && best !== undefined) return `val ${seed.toFixed(2)} → ${best.toFixed(2)}`;
  return run.error ?? '';
}

/** The metric series a run's chart shows first: an algorithm's scores, else everything it recorded. */
export function chartedMetrics(algorithm: string): readonly string[] | undefined {
  return algorithm === 'apo' ? ['best_val_score', 'leader_val_score', 'mean_batch_score'] : undefined;
}

/** "0.750" for a score, "–" for none. */
export function scoreText(value: number | null): string {
  return value === null ? '–' : value.toFixed(3);
}
