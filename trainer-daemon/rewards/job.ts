/**
 * Scoring stored rollouts: which rollouts (ids, a dataset, unrated ones), which spec each gets
 * (inline, or the rewards file's spec for its dataset, else its default), scoring in chunks with
 * progress and cancellation between chunks, and the reward rows written per chunk in one commit.
 * Rows are appended (rewards are append-only): a human annotation is never overwritten, and the
 * episode-reward policy ranks it above any automatic row (lightningrl/credit.ts).
 */
import path from 'node:path';
import type { z } from 'zod';
import {
  isAutomatic,
  type Reward,
  type Rollout,
  type RolloutScore,
  type ScoreRolloutsParams,
  type ScoreRolloutsResult,
  type Task,
} from '../protocol';
import { InvalidInputError } from '../protocol/errors';
import type { Store } from '../store/store';
import type { Trajectory } from '../protocol/lightningrl';
import type { WriteQueue } from '../store/writeQueue';
import { defaultRewardsFile, loadRewardsFile, parseSpec, specForDataset, type ResolvedSpec } from './config';
import type { JudgeTransport } from './judge';
import { ranksGroups, ROW_SOURCE, type RewardScorer, taskKey } from './scorer';
import { ScorerCache } from './scorerCache';
import { toScoringTask, toScoringTrajectory } from './trajectory';
import { hasOutcome, OUTCOME_STATUSES } from '../protocol/status';

export interface ScoringDeps {
  readonly store: Store;
  readonly writes?: WriteQueue;
  /** How judge calls are made and recorded; without one, judge sources report an error. */
  readonly judge?: JudgeTransport;
}

/** The rollouts the judge's own calls are recorded as: never scored themselves. */
export const JUDGE_CLIENT = 'lightning-judge';
const CHUNK = 256;

/** Caches each dataset's tasks, for expected answers. */
class TaskLookup {
  private readonly byDataset = new Map<string, Map<string, Task>>();
  constructor(private readonly store: Store) {}

  task(trajectory: { rollout: Rollout }): Task | undefined {
    const { datasetId, task } = trajectory.rollout;
    if (datasetId === null || task?.id === undefined) return undefined;
    let tasks = this.byDataset.get(datasetId);
    if (!tasks) {
      tasks = new Map(this.store.listTasks(datasetId).items.map((t) => [t.id, t]));
      this.byDataset.set(datasetId, tasks);
    }
    return tasks.get(task.id);
  }
}

async function scoreTrajectories(
  deps: ScoringDeps,
  scorer: RewardScorer,
  trajectories: readonly Trajectory[],
  how: { readonly author: string; readonly skipScored: boolean },
  lookup = new TaskLookup(deps.store),
): Promise<RolloutScore[]> {
  const specName = scorer.resolved.spec.name;
  // With skipScored, a rollout another job has scored already (its rewards were read with its trajectory) is reported
  // as that job left it, and not scored again; the write checks the others once more.
  const before = how.skipScored ? trajectories.filter((t) => t.rewards.some(isAutomatic)) : [];
  const toScore = trajectories.filter((t) => !before.includes(t));
  const scores =
    toScore.length === 0
      ? []
      : await scorer.score(
          toScore.map((t) => ({ trajectory: toScoringTrajectory(t), task: toScoringTask(t, lookup.task(t)) })),
          deps.judge,
        );
  const scoredMeanwhile = await record(deps, scorer, scores, how);
  return [
    ...before.map((t) => scoredElsewhere(t.rollout.id, t.rewards.filter(isAutomatic), specName)),
    ...scores.map((score) => {
      const found = scoredMeanwhile.get(score.rolloutId);
      return found ? scoredElsewhere(score.rolloutId, found, specName) : score;
    }),
  ];
}

/**
 * A rollout another job scored before this one wrote (`skipScored`): its rows stand, this job writes none. Its value is
 * the newest combined row of this spec's name it holds, if any.
 */
function scoredElsewhere(rolloutId: string, rows: readonly Reward[], specName: string): RolloutScore {
  const combined = rows.filter((row) => row.name === specName).at(-1);
  return {
    rolloutId,
    value: combined?.value ?? null,
    sources: [
      {
        kind: 'skipped',
        name: 'scored already',
        reason: `another scoring job wrote its ${rows.length} automatic reward row${rows.length === 1 ? '' : 's'} first; they stand, and this job's were not written`,
      },
    ],
  };
}

/**
 * Appends one row per scored source and one for the combined value, all in one commit. With `skipScored`, the rows
 * of rollouts that hold an automatic reward by then are left out: returns those rollouts' automatic rows.
 */
async function record(
  deps: ScoringDeps,
  scorer: RewardScorer,
  scores: readonly RolloutScore[],
  { author, skipScored }: { readonly author: string; readonly skipScored: boolean },
): Promise<ReadonlyMap<string, Reward[]>> {
  const { spec } = scorer.resolved;
  const base = { spanId: null, author, comment: null };
  const rows = scores.flatMap((score) => {
    const parts = score.sources.flatMap((outcome, i) =>
      outcome.kind === 'scored'
        ? [
            {
              ...base,
              rolloutId: score.rolloutId,
              name: outcome.name,
              value: outcome.value,
              source: ROW_SOURCE[spec.sources[i]!.type],
              reason: outcome.reason,
            },
          ]
        : [],
    );
    if (score.value === null) return parts;
    return [
      ...parts,
      {
        ...base,
        rolloutId: score.rolloutId,
        name: spec.name,
        value: score.value,
        ...scorer.describeCombined(score.sources),
      },
    ];
  });
  // With skipScored, even a rollout this job has no rows for (its sources all failed) is looked up: one that another
  // job scored meanwhile is reported as that job left it.
  if (scores.length === 0 || (rows.length === 0 && !skipScored)) return new Map();
  const write = (): Map<string, Reward[]> =>
    deps.store.addRewards(rows, skipScored ? scores.map((score) => score.rolloutId) : undefined);
  return deps.writes ? await deps.writes.submit(write, Math.max(1, rows.length)) : write();
}

/** The rollouts a request selects, finished ones only, judge calls excluded. */
function select(store: Store, params: z.output<typeof ScoreRolloutsParams>): Rollout[] {
  if (params.rollouts) {
    if (params.dataset !== undefined || params.unrated)
      throw new InvalidInputError('params.rollouts: give rollouts, or a dataset and/or unrated, not both');
    return params.rollouts.map((idOrPrefix) => {
      const rollout = store.getRollout(store.resolveRolloutId(idOrPrefix));
      if (!hasOutcome(rollout.status))
        throw new InvalidInputError(
          `params.rollouts: rollout ${rollout.id} is ${rollout.status}; score it once it has finished`,
        );
      return rollout;
    });
  }
  const datasetId = params.dataset === undefined ? undefined : store.listTasks(params.dataset).dataset.id;
  const selected: Rollout[] = [];
  let cursor: string | undefined;
  do {
    const page = store.listRollouts({
      datasetId,
      unrated: params.unrated || undefined,
      status: [...OUTCOME_STATUSES],
      order: 'oldest',
      limit: 500,
      cursor,
    });
    selected.push(...page.items.filter((r) => !(r.source.kind === 'api' && r.source.client === JUDGE_CLIENT)));
    cursor = page.nextCursor ?? undefined;
  } while (cursor);
  return selected;
}

type SpecChoice = { kind: 'spec'; spec: ResolvedSpec } | { kind: 'none'; reason: string };

/**
 * Which spec each rollout is scored with: the inline one, or the rewards file's entry for its dataset, else its
 * default.
 */
function specChooser(store: Store, params: z.output<typeof ScoreRolloutsParams>): (rollout: Rollout) => SpecChoice {
  if (params.spec) {
    const spec = parseSpec(params.spec, params.baseDir ?? path.dirname(store.file), 'params.spec');
    return () => ({ kind: 'spec', spec });
  }
  const file = loadRewardsFile(params.rewardsFile ?? defaultRewardsFile(store.file));
  const names = new Map(store.listDatasets().map((d) => [d.id, d.name]));
  return (rollout) => {
    const spec = specForDataset(
      file,
      rollout.datasetId === null ? undefined : { id: rollout.datasetId, name: names.get(rollout.datasetId) ?? '' },
    );
    return spec
      ? { kind: 'spec', spec }
      : {
          kind: 'none',
          reason: `${file.file} has no spec for dataset ${names.get(rollout.datasetId ?? '') ?? rollout.datasetId ?? '(none)'} and no default`,
        };
  };
}

export interface ScoreJobOptions {
  readonly onProgress?: (progress: { done: number; total: number; errors: number }) => void;
  readonly signal?: AbortSignal;
  /** Prepared scorers kept between jobs (the daemon's); without one, each job prepares its own. */
  readonly scorers?: ScorerCache;
}

/** `rewards/score` and `lightning score`: selects, scores in chunks, records, reports. */
export async function scoreRollouts(
  deps: ScoringDeps,
  params: z.output<typeof ScoreRolloutsParams>,
  options: ScoreJobOptions = {},
): Promise<ScoreRolloutsResult> {
  const choose = specChooser(deps.store, params);
  const rollouts = select(deps.store, params);
  // Group by spec, then by task, so that a relative judge sees all of a task's rollouts in one chunk.
  const planned = rollouts.map((rollout) => ({
    rollout,
    choice: choose(rollout),
    key: taskKey(rollout.task && { id: rollout.task.id ?? null, input: rollout.task.input }, rollout.id),
  }));
  const specs = [...new Set(planned.flatMap((p) => (p.choice.kind === 'spec' ? [p.choice.spec] : [])))];
  const result: ScoreRolloutsResult = { scored: 0, unscored: 0, errors: 0, cancelled: false, results: [] };
  let done = 0;
  const lookup = new TaskLookup(deps.store);
  const tally = (scores: readonly RolloutScore[]): void => {
    if (scores.length === 0) return;
    for (const score of scores) {
      if (score.value === null) result.unscored += 1;
      else result.scored += 1;
      result.errors += score.sources.filter((s) => s.kind === 'error').length;
    }
    result.results.push(...scores);
    done += scores.length;
    options.onProgress?.({ done, total: rollouts.length, errors: result.errors });
  };
  tally(
    planned.flatMap((p) =>
      p.choice.kind === 'none'
        ? [
            {
              rolloutId: p.rollout.id,
              value: null,
              sources: [{ kind: 'skipped' as const, name: 'config', reason: p.choice.reason }],
            },
          ]
        : [],
    ),
  );
  for (const spec of specs) {
    const ids = planned
      .filter((p) => p.choice.kind === 'spec' && p.choice.spec === spec)
      .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
      .map((p) => ({ rollout: p.rollout, key: p.key }));
    const scorers = options.scorers ?? new ScorerCache(0);
    await scorers.use(spec, async (scorer) => {
      for (const chunk of chunksOf(ids, ranksGroups(spec.spec))) {
        if (options.signal?.aborted) {
          result.cancelled = true;
          break;
        }
        const how = { author: 'lightning', skipScored: params.skipScored };
        tally(await scoreTrajectories(deps, scorer, deps.store.trajectoriesFor(chunk), how, lookup));
      }
    });
    if (result.cancelled) break;
  }
  return result;
}

/** Chunks of CHUNK rollouts; with `keepGroups`, a task's group is never split (unless it alone is larger). */
function* chunksOf(
  planned: ReadonlyArray<{ rollout: Rollout; key: string }>,
  keepGroups: boolean,
): Generator<Rollout[]> {
  let chunk: Rollout[] = [];
  for (let i = 0; i < planned.length; i += 1) {
    chunk.push(planned[i]!.rollout);
    if (chunk.length >= CHUNK && !(keepGroups && planned[i + 1]?.key === planned[i]!.key)) {
      yield chunk;
      chunk = [];
    }
  }
  if (chunk.length > 0) yield chunk;
}

/**
 * Score jobs in flight, by job id, so that `rewards/cancel` (or the daemon stopping) can stop them
 * between chunks; and the daemon's prepared scorers, so that scoring after each rollout (the dataset
 * runner) does not restart workers or reload models every time.
 */
export class ScoreJobs {
  private readonly running = new Map<string, AbortController>();
  readonly scorers = new ScorerCache();

  start(jobId: string): AbortSignal {
    if (this.running.has(jobId))
      throw new InvalidInputError(`params.jobId: a score job ${jobId} is running already; choose another id`);
    const controller = new AbortController();
    this.running.set(jobId, controller);
    return controller.signal;
  }

  end(jobId: string): void {
    this.running.delete(jobId);
  }

  /** True when the job was running. */
  cancel(jobId: string): boolean {
    this.running.get(jobId)?.abort();
    return this.running.has(jobId);
  }

  /** Cancels every job and retires the scorers once their jobs have let go. */
  dispose(): void {
    for (const controller of this.running.values()) controller.abort();
    this.scorers.dispose();
  }
}
