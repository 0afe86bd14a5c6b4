/**
 * GRPO with several policies (protocol/policies.ts): what differs from one policy is kept here. Each policy's
 * checkpoint of a step is its own folder `checkpoints/<run>/<step>/<policy>` (an ordinary LoRA checkpoint: Use
 * Checkpoint and Export serve or write that adapter alone), recorded as a checkpoint of the step; its metrics are
 * `policy/<name>/…`.
 */
import path from 'node:path';
import {
  policyMetric,
  type AdvantageOptions,
  type Checkpoint,
  type ExportReport,
  type GrpoConfig,
  type PolicyAdapter,
  type PolicySpec,
  type TrainResult,
  type Transition,
  type Trajectory,
} from '../protocol';
import { episodeReward } from '../lightningrl/credit';
import { buildTransitions } from '../lightningrl/transitions';

/** One policy's transitions of an iteration (`policy` null: the run's one policy). */
export interface PolicyTransitions {
  readonly policy: string | null;
  readonly transitions: Transition[];
  readonly report: ExportReport;
}

/**
 * An iteration's transitions (LightningRL: identical credit, advantages per task group): with one policy over every
 * call (or --agent's); with several, per policy over the calls its adapter answered, from its reward dimension.
 */
export function iterationTransitions(
  trajectories: readonly Trajectory[],
  config: Pick<GrpoConfig, 'agent' | 'policies'>,
  advantage: AdvantageOptions,
): PolicyTransitions[] {
  const policies = config.policies.length === 0 ? [null] : config.policies;
  return policies.map((policy) => ({
    policy: policy?.name ?? null,
    ...buildTransitions(trajectories, {
      reward: { name: policy?.reward ?? 'reward', missing: 'fill', fillValue: 0 },
      credit: { kind: 'identical' },
      advantage,
      ...(config.agent === null ? {} : { agentMatch: new RegExp(config.agent) }),
      ...(policy ? { policy: policy.name } : {}),
    }),
  }));
}

/**
 * An iteration's group metrics, each policy's own (a rollout can lack one role's reward dimension, and a role's calls
 * one rollout): its task groups whose rewards were all equal (`zeroVarianceGroups`: advantages 0) and its rollouts
 * trained with reward 0 because nothing rated them (`rollouts/unrewarded`). Never summed across policies.
 */
export function groupMetrics(built: readonly Pick<PolicyTransitions, 'policy' | 'report'>[]): Record<string, number> {
  const metrics: Record<string, number> = {};
  for (const { policy, report } of built) {
    const key = metricKey(policy);
    metrics[key('zeroVarianceGroups')] = report.zeroVarianceGroups;
    metrics[key('rollouts/unrewarded')] = report.filledNoReward;
  }
  return metrics;
}

/**
 * Each policy's validation reward, `policy/<name>/val/reward`: the mean over the validation rollouts of the reward it
 * learns from (its `--policy-reward` dimension, else the episode's), a rollout without one counting 0 as in training.
 * The episode's `val/reward` alone cannot tell whether each role improved when the roles score on their own dimensions.
 */
export function policyValMetrics(
  trajectories: readonly Pick<Trajectory, 'rewards'>[],
  policies: readonly Pick<PolicySpec, 'name' | 'reward'>[],
): Record<string, number> {
  if (trajectories.length === 0) return {};
  const metrics: Record<string, number> = {};
  for (const policy of policies) {
    const rewardPolicy = { name: policy.reward, missing: 'fill' as const, fillValue: 0 };
    const total = trajectories.reduce((sum, t) => sum + (episodeReward(t.rewards, rewardPolicy) ?? 0), 0);
    metrics[policyMetric(policy.name, 'val/reward')] = total / trajectories.length;
  }
  return metrics;
}

/** The folder a policy's checkpoint of a step is saved in. */
export function policyCheckpointDir(stepDir: string, policy: string): string {
  return path.join(stepDir, policy);
}

/** The policy whose adapter a checkpoint of a run with `policies` holds (its folder's name); null: none of them. */
export function checkpointPolicy(checkpoint: Pick<Checkpoint, 'path'>, policies: readonly PolicySpec[]): string | null {
  const name = path.basename(checkpoint.path);
  return policies.some((p) => p.name === name) ? name : null;
}

/** What `load {policies}` restores: each policy with its newest checkpoint, if it has one. */
export function resumePolicies(checkpoints: readonly Checkpoint[], policies: readonly PolicySpec[]): PolicyAdapter[] {
  return policies.map(({ name }) => {
    const last = checkpoints.filter((c) => checkpointPolicy(c, policies) === name).at(-1);
    return last ? { name, checkpoint: last.path } : { name };
  });
}

/** The metrics of one update (the worker's `train` answer), named by `key` (the metric itself with one policy). */
export function updateMetrics(result: TrainResult, key: (metric: string) => string = (m) => m): Record<string, number> {
  return {
    [key('loss')]: result.loss,
    [key('pgLoss')]: result.pgLoss,
    ...(result.kl === undefined ? {} : { [key('kl')]: result.kl }),
    [key('entropy')]: result.entropy,
    [key('clipFraction')]: result.clipFraction,
    [key('maxRatioDeviation')]: result.maxRatioDeviation,
    [key('train/seconds')]: result.seconds,
    [key('tokensPerSecond')]: result.tokens / Math.max(result.seconds, 1e-9),
    ...(result.gpuMemoryBytes ? { [key('gpuMemoryBytes')]: result.gpuMemoryBytes } : {}),
    ...(result.worldSize ? { worldSize: result.worldSize } : {}),
  };
}

/** How a metric of `policy` is named: the plain name with one policy (null), `policy/<name>/…` with several. */
export function metricKey(policy: string | null): (metric: string) => string {
  return policy === null ? (metric) => metric : (metric) => policyMetric(policy, metric);
}
