/**
 * A run's checkpoint retention (docs/training.md, "Checkpoints on disk"), decided as each checkpoint lands: keep
 * the best checkpoint (by validation reward, else by validation loss (SFT), else by the reward of the rollouts it
 * served), the last N
 * (`keepCheckpoints`, default 3) and whatever is in use (served now, being exported); delete the rest. Optimizer
 * state is only kept in the newest checkpoint, the one the run resumes from. Pure: the caller deletes the files.
 */
import type { Checkpoint, KeepCheckpoints, MetricPoint } from '../protocol';

export interface RetentionPlan {
  /** Checkpoints to delete, folder and record. */
  readonly remove: Checkpoint[];
  /** Kept checkpoints whose optimizer state goes (every kept one but the newest). */
  readonly dropOptimizer: Checkpoint[];
  /**
   * The checkpoint kept as the best, and the score it was kept for (val/loss negated: higher is better; undefined:
   * nothing scored yet).
   */
  readonly best: { readonly checkpoint: Checkpoint; readonly by: ScoredBy; readonly score: number } | undefined;
}

/** What the best checkpoint is chosen by: GRPO's rewards (higher is better), SFT's held-out loss (lower is better). */
export type ScoredBy = 'val/reward' | 'val/loss' | 'reward/mean';

/**
 * A checkpoint's score: `val/reward` at its own step (validation runs right after the update that saved it), else
 * `val/loss` at its own step (an SFT run's held-out loss, as TRL's `metric_for_best_model` default, negated so that
 * higher is better), else the `reward/mean` of the next step, whose rollouts it served. Validation wins for the whole
 * run once any step has it.
 */
function scores(
  checkpoints: readonly Checkpoint[],
  metrics: readonly Pick<MetricPoint, 'step' | 'name' | 'value'>[],
): { by: ScoredBy; of: Map<string, number> } {
  const at = (name: string): Map<number, number> =>
    new Map(metrics.filter((m) => m.name === name && Number.isFinite(m.value)).map((m) => [m.step, m.value]));
  const atOwnStep = (name: string, sign: 1 | -1): Map<string, number> => {
    const values = at(name);
    return new Map(
      checkpoints.flatMap((c) => (values.has(c.step) ? [[c.id, sign * values.get(c.step)!] as const] : [])),
    );
  };
  const byVal = atOwnStep('val/reward', 1);
  if (byVal.size > 0) return { by: 'val/reward', of: byVal };
  const byLoss = atOwnStep('val/loss', -1);
  if (byLoss.size > 0) return { by: 'val/loss', of: byLoss };
  const reward = at('reward/mean');
  return {
    by: 'reward/mean',
    of: new Map(checkpoints.flatMap((c) => (reward.has(c.step + 1) ? [[c.id, reward.get(c.step + 1)!] as const] : []))),
  };
}

/**
 * `groupOf`: a run with several policies keeps each policy's checkpoints as a run of one policy keeps its own (the
 * best, the last N, optimizer state in the newest); the plan's `best` is then the first group's.
 */
export function planRetention(
  checkpoints: readonly Checkpoint[],
  metrics: readonly Pick<MetricPoint, 'step' | 'name' | 'value'>[],
  keep: KeepCheckpoints,
  inUse: ReadonlySet<string> = new Set(),
  groupOf: (checkpoint: Checkpoint) => string | null = () => null,
): RetentionPlan {
  const groups = new Map<string | null, Checkpoint[]>();
  for (const checkpoint of checkpoints)
    groups.set(groupOf(checkpoint), [...(groups.get(groupOf(checkpoint)) ?? []), checkpoint]);
  const plans = [...groups.values()].map((group) => planGroup(group, metrics, keep, inUse));
  return {
    remove: plans.flatMap((p) => p.remove),
    dropOptimizer: plans.flatMap((p) => p.dropOptimizer),
    best: plans[0]?.best,
  };
}

function planGroup(
  checkpoints: readonly Checkpoint[],
  metrics: readonly Pick<MetricPoint, 'step' | 'name' | 'value'>[],
  keep: KeepCheckpoints,
  inUse: ReadonlySet<string>,
): RetentionPlan {
  const ordered = [...checkpoints].sort((a, b) => a.step - b.step || a.createdAt - b.createdAt);
  const newest = ordered.at(-1);
  const { by, of } = scores(ordered, metrics);
  let best: RetentionPlan['best'];
  for (const checkpoint of ordered) {
    const score = of.get(checkpoint.id);
    // Ties go to the later checkpoint: as good, trained longer, and more likely among the last N anyway.
    if (score !== undefined && (best === undefined || score >= best.score)) best = { checkpoint, by, score };
  }
  const kept = new Set<string>(inUse);
  if (best) kept.add(best.checkpoint.id);
  const last = keep === 'all' ? ordered : ordered.slice(-keep);
  for (const checkpoint of last) kept.add(checkpoint.id);
  return {
    remove: ordered.filter((c) => !kept.has(c.id)),
    dropOptimizer: ordered.filter((c) => kept.has(c.id) && c.id !== newest?.id && c.optimizerState !== false),
    best,
  };
}
