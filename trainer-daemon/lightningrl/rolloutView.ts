/**
 * `transitions/forRollout`: what training would make of one rollout — each LLM call included or not
 * (and why), the reward credited to it, its advantage, its token counts and whether the trainer must
 * re-tokenize it. The advantage needs the rollout's task group, so the rollouts considered are those
 * `lightning export --batch B` (else `--dataset D`) would read with its default statuses, run
 * through the same buildTransitions: the panel shows exactly what an export would write.
 */
import type { CallTraining, RolloutTransitions, TrainingGroup } from '../protocol';
import type { ParsedParamsOf } from '../protocol';
import { InvalidInputError } from '../protocol/errors';
import type { ListRolloutsParams, Rollout, Span } from '../protocol';
import type { AdvantageOptions, Trajectory } from '../protocol/lightningrl';
import { assertNever } from '../protocol/assert';
import { episodeReward } from './credit';
import { buildTransitions, groupKey, type GroupMember } from './transitions';
import { outcomeWord, spanOutcome } from '../protocol/outcome';
import { hasOutcome, OUTCOME_STATUSES } from '../protocol/status';

/** What the view reads: the store's trajectory queries (lightningrl imports no store). */
export interface TrajectoryReader {
  getRollout(id: string): Rollout;
  resolveRolloutId(idOrPrefix: string): string;
  trajectories(filter: Omit<ListRolloutsParams, 'cursor' | 'limit' | 'order'>): Iterable<Trajectory>;
  trajectoriesOf(ids: readonly string[]): Trajectory[];
  listSpans(rolloutId: string, afterSequence: number, limit: number): Span[];
}

export function rolloutTransitions(
  store: TrajectoryReader,
  params: ParsedParamsOf<'rolloutTransitions'>,
): RolloutTransitions {
  const rollout = store.getRollout(store.resolveRolloutId(params.rolloutId));
  let agentMatch: RegExp | undefined;
  try {
    agentMatch = params.agent === undefined ? undefined : new RegExp(params.agent);
  } catch (error) {
    throw new InvalidInputError(
      `params.agent: not a regular expression (${error instanceof Error ? error.message : String(error)})`,
    );
  }
  const scope: TrainingGroup['scope'] = rollout.batchId ? 'batch' : rollout.datasetId ? 'dataset' : 'rollout';
  const taskId = rollout.task?.id ?? null;
  // GRPO compares a task's rollouts only: reading just the task's rollouts of the scope gives the same advantages.
  const taskOnly = params.advantage.kind !== 'baseline' && taskId !== null ? { taskId } : {};
  const trajectories: Trajectory[] =
    scope === 'rollout'
      ? store.trajectoriesOf([rollout.id])
      : [
          ...store.trajectories({
            status: [...OUTCOME_STATUSES],
            ...(scope === 'batch' ? { batchId: rollout.batchId! } : { datasetId: rollout.datasetId! }),
            ...taskOnly,
          }),
        ];
  const own = trajectories.find((t) => t.rollout.id === rollout.id) ?? store.trajectoriesOf([rollout.id])[0]!;
  const considered = trajectories.filter((t) => hasOutcome(t.rollout.status));
  const { transitions, members } = buildTransitions(considered, {
    reward: params.reward,
    credit: params.credit,
    advantage: params.advantage,
    agentMatch,
  });
  const samples = new Map(transitions.filter((t) => t.rolloutId === rollout.id).map((t) => [t.spanId, t]));
  const reward = episodeReward(own.rewards, params.reward);
  const spans = store.listSpans(rollout.id, 0, 10_000).filter((span) => span.category === 'llm');
  // Only the last attempt's calls train (the store's trajectory): an earlier attempt's are listed, and say so.
  const earlier = (span: Span): boolean => span.attempt < rollout.attemptCount;
  const inLastAttempt = spans.some((span) => !earlier(span));
  const why = !hasOutcome(rollout.status)
    ? `the rollout is ${rollout.status}: training reads succeeded, failed and timed-out rollouts`
    : reward === null
      ? `no "${params.reward.name}" reward: rollouts without an episode reward are left out (or filled, by the reward policy)`
      : samples.size === 0
        ? agentMatch
          ? `no LLM call of an agent matching /${params.agent}/`
          : inLastAttempt
            ? 'none of its LLM calls ended with a whole answer'
            : spans.length
              ? `its last attempt (${rollout.attemptCount}) made no LLM calls: only the last attempt trains`
              : 'the rollout has no LLM calls'
        : null;
  const calls: CallTraining[] = spans.map((span) => {
    const sample = samples.get(span.spanId);
    const outcome = spanOutcome(span);
    return {
      spanId: span.spanId,
      name: span.name,
      agentName: sample?.agentName ?? null,
      included: sample !== undefined,
      why: sample
        ? null
        : earlier(span)
          ? `made in attempt ${span.attempt}, not the last (${rollout.attemptCount}): only the last attempt trains`
          : outcome.kind !== 'ok'
            ? `not a whole answer (${outcomeWord(outcome)}): left out of training`
            : (why ?? (agentMatch ? `its agent does not match /${params.agent}/` : 'not a training sample')),
      step: sample?.step ?? null,
      reward: sample?.reward ?? null,
      advantage: sample?.advantage ?? null,
      promptTokens: span.promptTokens,
      completionTokens: span.completionTokens,
      promptTokenIds: sample?.promptTokenIds?.length ?? null,
      responseTokenIds: sample?.responseTokenIds?.length ?? null,
      retokenized: sample ? sample.needsTokenization : false,
    };
  });
  const first = [...samples.values()][0];
  return {
    rolloutId: rollout.id,
    included: samples.size > 0,
    why,
    episodeReward: reward,
    advantage: first ? advantageOf(first.advantage, params.advantage) : null,
    group: groupOf(
      members,
      rollout,
      scope,
      scope === 'batch' ? rollout.batchId : scope === 'dataset' ? rollout.datasetId : null,
      params.advantage.std,
    ),
    options: { reward: params.reward, credit: params.credit, advantage: params.advantage, agent: params.agent ?? null },
    calls,
  };
}

/**
 * The rollout's group as the advantages see it (buildTransitions' members): the rewarded rollouts of its task with a
 * call of the agents trained — the same rollouts an export compares its rows with.
 */
function groupOf(
  members: readonly GroupMember[],
  rollout: Rollout,
  scope: TrainingGroup['scope'],
  scopeId: string | null,
  estimator: 'sample' | 'population',
): TrainingGroup {
  const group = groupKey(rollout);
  const rewards = members
    .filter((member) => (group === null ? member.id === rollout.id : member.group === group))
    .map((member) => member.reward);
  const taskId = rollout.task?.id ?? null;
  const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null;
  // The std the advantages divide by: the sample std (n − 1) unless the options ask for the population's.
  const divisor = Math.max(1, estimator === 'population' ? rewards.length : rewards.length - 1);
  const std = mean === null ? null : Math.sqrt(rewards.reduce((sum, r) => sum + (r - mean) ** 2, 0) / divisor);
  const note =
    rewards.length === 1
      ? 'a group of one rollout: nothing to compare, advantage 0'
      : std !== null && rewards.length > 1 && std <= 1e-12 * Math.max(1, Math.abs(mean!))
        ? 'every rollout of the group has the same reward: advantage 0'
        : null;
  return { scope, scopeId, taskId, rewarded: rewards.length, mean, std, note };
}

/** A sample's advantage as training uses it: none when the credited rewards are trained on themselves (`none`). */
function advantageOf(advantage: number, options: AdvantageOptions): number | null {
  switch (options.kind) {
    case 'grpo':
    case 'baseline':
      return advantage;
    case 'none':
      return null;
    default:
      return assertNever(options.kind);
  }
}
