/**
 * The scoring pipeline, free of the store: a spec's sources prepared once (workers, models), then any number of
 * rollouts scored by every source and combined. Callers (`lightning score`, the editor, and through runner/scoring.ts
 * the dataset runner, GRPO and APO) reach it through `rewards/score` (job.ts's scoreRollouts), which keeps prepared
 * scorers between calls. One source failing on one rollout is that rollout's reported error, never the batch's.
 */
import path from 'node:path';
import type {
  RewardSourceConfig,
  RewardSource,
  RewardSpec,
  RolloutScore,
  ScoringTask,
  ScoringTrajectory,
  SourceOutcome,
} from '../protocol';
import { errorMessage } from '../protocol/errors';
import { assertNever } from '../protocol/assert';
import type { ResolvedSpec } from './config';
import { RewardFunctionRunner } from './functionRunner';
import { judgeAbsolute, judgeRelative, type JudgeTransport } from './judge';
import { RewardModel } from './rewardModel';
import { applyRule } from './rules';

export interface ScoringItem {
  readonly trajectory: ScoringTrajectory;
  readonly task: ScoringTask;
}

/** Which `source` column a reward row of each source type gets (a user's function is code, like a rule). */
export const ROW_SOURCE: Record<RewardSourceConfig['type'], RewardSource> = {
  rule: 'rule',
  function: 'rule',
  judge: 'judge',
  model: 'model',
};

/**
 * The group a rollout is ranked in by a relative judge: rollouts of the same task (by id, else by
 * input). A rollout with no task at all is a group of its own.
 */
export function taskKey(task: Pick<ScoringTask, 'id' | 'input'> | null, rolloutId: string): string {
  if (task?.id) return `id:${task.id}`;
  return task && task.input !== null ? `input:${JSON.stringify(task.input)}` : `rollout:${rolloutId}`;
}

/** Whether a spec ranks rollouts of a task together (then a task's rollouts must be scored in one call). */
export function ranksGroups(spec: RewardSpec): boolean {
  return spec.sources.some((source) => source.type === 'judge' && source.mode === 'relative');
}

type Prepared =
  | { readonly config: Extract<RewardSourceConfig, { type: 'rule' }> }
  | { readonly config: Extract<RewardSourceConfig, { type: 'function' }>; readonly runner: RewardFunctionRunner }
  | { readonly config: Extract<RewardSourceConfig, { type: 'judge' }> }
  | { readonly config: Extract<RewardSourceConfig, { type: 'model' }>; readonly model: RewardModel };

export class RewardScorer {
  private constructor(
    readonly resolved: ResolvedSpec,
    private readonly sources: readonly Prepared[],
  ) {}

  /**
   * Finds (compiles) reward function modules and loads reward models now, so a bad one fails before any scoring;
   * workers start on first use.
   */
  static async prepare(resolved: ResolvedSpec): Promise<RewardScorer> {
    const sources: Prepared[] = [];
    try {
      for (const config of resolved.spec.sources) sources.push(await prepareSource(config, resolved.baseDir));
    } catch (error) {
      await disposeAll(sources);
      throw error;
    }
    return new RewardScorer(resolved, sources);
  }

  /**
   * Scores rollouts (all sources, combined); relative judges rank the rollouts of each task among
   * these. `judge` makes (and records) the judge's calls; without one, judge sources report an error.
   */
  async score(items: readonly ScoringItem[], judge?: JudgeTransport): Promise<RolloutScore[]> {
    const perSource = await Promise.all(
      this.sources.map((source, i) => this.scoreWith(source, this.resolved.names[i]!, items, judge)),
    );
    return items.map((item, k) => {
      const outcomes = perSource.map((outcomes) => outcomes[k]!);
      return { rolloutId: item.trajectory.rolloutId, value: this.combine(outcomes), sources: outcomes };
    });
  }

  /** Weighted sum of the sources that gave a value, or the first that did; null when none did. */
  private combine(outcomes: readonly SourceOutcome[]): number | null {
    const given = outcomes.flatMap((outcome, i) =>
      outcome.kind === 'scored' ? [{ value: outcome.value, weight: this.resolved.spec.sources[i]!.weight }] : [],
    );
    if (given.length === 0) return null;
    if (this.resolved.spec.combine === 'first-available') return given[0]!.value;
    return given.reduce((sum, { value, weight }) => sum + weight * value, 0);
  }

  /** The reward row of the combined value: which source kind it comes from, and how it was made. */
  describeCombined(outcomes: readonly SourceOutcome[]): { source: RewardSource; reason: string } {
    const { spec } = this.resolved;
    const used = outcomes.flatMap((outcome, i) =>
      outcome.kind === 'scored' ? [{ outcome, config: spec.sources[i]! }] : [],
    );
    const terms = spec.combine === 'first-available' ? used.slice(0, 1) : used;
    // A mix of kinds is labelled by its heaviest term.
    const heaviest = terms.reduce(
      (best, term) => (Math.abs(term.config.weight) > Math.abs(best.config.weight) ? term : best),
      terms[0]!,
    );
    const reason =
      spec.combine === 'first-available'
        ? `first available: ${heaviest.outcome.name} = ${format(heaviest.outcome.value)}`
        : terms
            .map(({ outcome, config }) => `${format(config.weight)}×${outcome.name}(${format(outcome.value)})`)
            .join(' + ');
    return { source: ROW_SOURCE[heaviest.config.type], reason };
  }

  private async scoreWith(
    source: Prepared,
    name: string,
    items: readonly ScoringItem[],
    judge: JudgeTransport | undefined,
  ): Promise<SourceOutcome[]> {
    const failed = (error: unknown): SourceOutcome => ({ kind: 'error', name, error: errorMessage(error) });
    const { config } = source;
    switch (config.type) {
      case 'rule':
        return items.map(({ trajectory, task }) => {
          try {
            return { name, ...applyRule(config.rule, trajectory, task) };
          } catch (error) {
            return failed(error);
          }
        });
      case 'function': {
        const { runner } = source as Extract<Prepared, { runner: RewardFunctionRunner }>;
        return Promise.all(
          items.map(({ trajectory, task }) =>
            runner.score(trajectory, task).then((verdict) => ({ name, ...verdict }), failed),
          ),
        );
      }
      case 'judge': {
        const transport = judge;
        if (!transport)
          return items.map(() =>
            failed(
              new Error('the LLM judge needs a running daemon to record its calls; start one with `lightning serve`'),
            ),
          );
        if (config.mode === 'absolute') {
          return mapLimit(items, config.concurrency, ({ trajectory, task }) =>
            judgeAbsolute(transport, config, trajectory, task).then(
              (s) => ({ kind: 'scored' as const, name, ...s }),
              failed,
            ),
          );
        }
        return this.judgeGroups(
          items,
          config.concurrency,
          (group) =>
            judgeRelative(
              transport,
              config,
              group.map((i) => i.trajectory),
              group[0]!.task,
            ),
          name,
          failed,
        );
      }
      case 'model': {
        const { model } = source as Extract<Prepared, { model: RewardModel }>;
        const texts = items.map(({ trajectory, task }) => modelInput(config.template, trajectory, task));
        try {
          const scores = await model.score(texts, config.batchSize);
          return scores.map((value) =>
            Number.isFinite(value)
              ? { kind: 'scored', name, value, reason: `${path.basename(config.path)} on ${model.device}` }
              : failed(new Error(`the reward model gave ${value}`)),
          );
        } catch (error) {
          return items.map(() => failed(error));
        }
      }
      default:
        return assertNever(config);
    }
  }

  /** Ranks each task's rollouts together; a group of one cannot be ranked and is skipped. */
  private async judgeGroups(
    items: readonly ScoringItem[],
    concurrency: number,
    rank: (group: ScoringItem[]) => Promise<Array<{ value: number; reason: string }>>,
    name: string,
    failed: (error: unknown) => SourceOutcome,
  ): Promise<SourceOutcome[]> {
    const groups = new Map<string, number[]>();
    items.forEach((item, k) => {
      const key = taskKey(item.task, item.trajectory.rolloutId);
      groups.set(key, [...(groups.get(key) ?? []), k]);
    });
    const outcomes = new Array<SourceOutcome>(items.length);
    await mapLimit([...groups.values()], concurrency, async (indexes) => {
      if (indexes.length < 2) {
        outcomes[indexes[0]!] = {
          kind: 'skipped',
          name,
          reason: 'relative judging needs at least 2 rollouts of the task',
        };
        return;
      }
      try {
        const scores = await rank(indexes.map((k) => items[k]!));
        indexes.forEach((k, j) => (outcomes[k] = { kind: 'scored', name, ...scores[j]! }));
      } catch (error) {
        for (const k of indexes) outcomes[k] = failed(error);
      }
    });
    return outcomes;
  }

  async dispose(): Promise<void> {
    await disposeAll(this.sources);
  }
}

/** `fn` over `items` with at most `limit` calls in flight; results in order. */
async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < items.length; i = next++) results[i] = await fn(items[i]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

function format(n: number): string {
  return Number.isInteger(n) ? String(n) : n.toFixed(4).replace(/0+$/, '');
}

/** The reward model's input text: the template with `{task}` and `{answer}` filled in. */
export function modelInput(template: string, trajectory: ScoringTrajectory, task: ScoringTask): string {
  const taskText = typeof task.input === 'string' ? task.input : JSON.stringify(task.input);
  return template.replaceAll('{task}', taskText).replaceAll('{answer}', trajectory.finalAnswer ?? '');
}

async function prepareSource(config: RewardSourceConfig, baseDir: string): Promise<Prepared> {
  switch (config.type) {
    case 'rule':
      return { config };
    case 'judge':
      return { config };
    case 'function': {
      const runner = new RewardFunctionRunner(path.resolve(baseDir, config.module), config);
      await runner.load();
      return { config, runner };
    }
    case 'model': {
      const modelFile = path.resolve(baseDir, config.path);
      const tokenizer = config.tokenizer
        ? path.resolve(baseDir, config.tokenizer)
        : path.join(path.dirname(modelFile), 'tokenizer.json');
      return {
        config,
        model: await RewardModel.load(modelFile, tokenizer, { device: config.device, label: config.label }),
      };
    }
    default:
      return assertNever(config);
  }
}

async function disposeAll(sources: readonly Prepared[]): Promise<void> {
  for (const source of sources) {
    if ('runner' in source) source.runner.dispose();
    if ('model' in source) await source.model.dispose();
  }
}
