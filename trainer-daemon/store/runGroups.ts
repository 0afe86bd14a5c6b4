/**
 * `rollouts/groups`: a filter's batches, counted by the rollout repository, grouped into runs — a training
 * run's batches (GRPO's iterations and validations, APO's evaluations and optimizer calls) under their run,
 * any other batch (a `dataset run`) a run of its own — newest first, cut to the first `limit` runs. Pure:
 * the store hands in the counts and how to look a run and a dataset up.
 */
import type { RolloutBatchGroup, RolloutGroups, RolloutRunGroup } from '../protocol/rpc';
import type { TrainingRun } from '../protocol/training';
import { runOfBatch, trainedTarget } from '../protocol/runLabel';
import type { BatchCount } from './rollouts';

export interface GroupLookups {
  /** A training run by id, if there is one. */
  run(id: string): TrainingRun | undefined;
  /** A dataset's name by its id, if there is one. */
  datasetName(id: string): string | undefined;
}

interface Counted {
  total: number;
  ungrouped: number;
  batches: readonly BatchCount[];
}

/** The counted batches as runs, newest first, the first `limit` of them. */
export function groupByRun(counted: Counted, limit: number, lookups: GroupLookups): RolloutGroups {
  const runs = new Map<string, { group: RolloutRunGroup; newest: number }>();
  const runOf = memo((id: string) => lookups.run(id));
  for (const { newest, ...batch } of counted.batches) {
    const named = runOfBatch(batch.batchId);
    const run = named ? runOf(named.runId) : undefined;
    const group: RolloutBatchGroup = {
      ...batch,
      datasetName: batch.datasetId === null ? null : (lookups.datasetName(batch.datasetId) ?? null),
      step: run ? named!.step : null,
    };
    if (!run) {
      runs.set(`batch:${batch.batchId}`, { group: { kind: 'batch', ...group }, newest });
      continue;
    }
    const key = `run:${run.id}`;
    const known = runs.get(key);
    if (known?.group.kind === 'training') {
      add(known.group, group);
      known.group.batches.push(group);
      known.newest = Math.max(known.newest, newest);
    } else runs.set(key, { group: trainingGroup(run, group), newest });
  }
  // Batches came newest first, so each run's batches are in that order already.
  const ordered = [...runs.values()].sort((a, b) => b.newest - a.newest).map(({ group }) => group);
  return {
    total: counted.total,
    ungrouped: counted.ungrouped,
    runs: ordered.slice(0, limit),
    runCount: ordered.length,
    more: ordered.length > limit,
  };
}

function trainingGroup(run: TrainingRun, first: RolloutBatchGroup): RolloutRunGroup {
  return {
    kind: 'training',
    runId: run.id,
    algorithm: run.algorithm,
    target: trainedTarget(run),
    dataset: run.config.dataset,
    startedAt: run.createdAt,
    count: first.count,
    failed: first.failed,
    active: first.active,
    createdAt: first.createdAt,
    updatedAt: first.updatedAt,
    batches: [first],
  };
}

function add(run: RolloutRunGroup, batch: RolloutBatchGroup): void {
  run.count += batch.count;
  run.failed += batch.failed;
  run.active += batch.active;
  run.createdAt = Math.min(run.createdAt, batch.createdAt);
  run.updatedAt = Math.max(run.updatedAt, batch.updatedAt);
}

function memo<T>(look: (id: string) => T): (id: string) => T {
  const seen = new Map<string, T>();
  return (id) => {
    if (!seen.has(id)) seen.set(id, look(id));
    return seen.get(id)!;
  };
}
