/**
 * LightningRL steps 3 and 4: which reward is the episode's, how it is credited to each call, and
 * the advantages. One advantage per rollout, broadcast to its transitions, so a long rollout does
 * not weigh more than a short one in its group.
 */
import {
  AUTOMATIC_REWARD_SOURCES,
  type AdvantageOptions,
  type CreditOptions,
  type Reward,
  type RewardPolicy,
} from '../protocol';
import { assertNever } from '../protocol/assert';

/**
 * The episode reward under the stated policy: the latest human annotation, else the latest reward
 * the agent posted, else the latest automatic one (rule, judge, reward model); null when none.
 */
export function episodeReward(rewards: readonly Reward[], policy: RewardPolicy): number | null {
  return filledReward(givenEpisodeReward(rewards, policy.name), policy);
}

/** The reward given, else the policy's fill value where it fills a missing one (`missing: 'fill'`); else null. */
export function filledReward(given: number | null, policy: RewardPolicy): number | null {
  return given ?? (policy.missing === 'fill' ? policy.fillValue : null);
}

/** The episode reward `name` a person, the agent or a scorer gave (as episodeReward chooses it); null when none. */
export function givenEpisodeReward(rewards: readonly Reward[], name: string): number | null {
  const episode = rewards.filter((r) => r.spanId === null && r.name === name);
  const latest = (sources: ReadonlyArray<Reward['source']>): Reward | undefined =>
    episode.filter((r) => sources.includes(r.source)).at(-1);
  return (latest(['human']) ?? latest(['agent']) ?? latest(AUTOMATIC_REWARD_SOURCES))?.value ?? null;
}

/** The reward credited to each of a rollout's T calls. */
export function creditRewards(episode: number, stepRewards: readonly number[], options: CreditOptions): number[] {
  const count = stepRewards.length;
  switch (options.kind) {
    case 'identical':
      return stepRewards.map(() => episode);
    case 'discounted':
      return stepRewards.map((_, t) => options.gamma ** (count - 1 - t) * episode);
    case 'step':
      return stepRewards.map((step, t) => step + (t === count - 1 ? episode : 0));
    default:
      return assertNever(options);
  }
}

export interface GroupStats {
  singletonGroups: number;
  zeroVarianceGroups: number;
}

/**
 * One advantage per rollout from the episode rewards, rollouts grouped by task (GRPO): (R − mean) / (std + ε), or R −
 * mean without std normalization; std is the sample std (Bessel's correction, as torch.std and TRL's GRPOTrainer)
 * unless `std: 'population'`, ε is added to it (TRL: 1e-4). The credit options shape the per-call `reward`; with GRPO
 * or baseline the advantage stays one per rollout (use `none` to train on the credited rewards themselves). A group of
 * one, or one whose rewards are all equal, has nothing to compare: its advantages are 0, and it is counted in the
 * stats. `baseline` uses the mean over all rollouts; `none` returns null (the credited rewards are the advantages).
 */
export function rolloutAdvantages(
  rollouts: ReadonlyArray<{ id: string; group: string | null; reward: number }>,
  options: AdvantageOptions,
): { advantages: Map<string, number> | null; stats: GroupStats } {
  const stats: GroupStats = { singletonGroups: 0, zeroVarianceGroups: 0 };
  switch (options.kind) {
    case 'none':
      return { advantages: null, stats };
    case 'baseline': {
      const advantages = new Map<string, number>();
      const mean = rollouts.reduce((sum, r) => sum + r.reward, 0) / Math.max(1, rollouts.length);
      for (const r of rollouts) advantages.set(r.id, r.reward - mean);
      return { advantages, stats };
    }
    case 'grpo':
      return { advantages: groupAdvantages(rollouts, options, stats), stats };
    default:
      return assertNever(options.kind);
  }
}

/** GRPO's: each rollout against its task group's mean (over the group's std unless not normalized). */
function groupAdvantages(
  rollouts: ReadonlyArray<{ id: string; group: string | null; reward: number }>,
  options: AdvantageOptions,
  stats: GroupStats,
): Map<string, number> {
  const advantages = new Map<string, number>();
  const groups = new Map<string, Array<{ id: string; reward: number }>>();
  for (const r of rollouts) {
    // Rollouts without a task id each form their own group.
    const key = r.group ?? `rollout:${r.id}`;
    const group = groups.get(key);
    if (group) group.push(r);
    else groups.set(key, [r]);
  }
  for (const group of groups.values()) {
    const mean = group.reduce((sum, r) => sum + r.reward, 0) / group.length;
    const squares = group.reduce((sum, r) => sum + (r.reward - mean) ** 2, 0);
    const std = Math.sqrt(squares / Math.max(1, options.std === 'population' ? group.length : group.length - 1));
    // Equal rewards up to floating-point noise ([0.1, 0.1, 0.1] has std ~1e-17) carry no signal.
    const flat = std <= 1e-12 * Math.max(1, Math.abs(mean));
    if (group.length === 1) stats.singletonGroups += 1;
    else if (flat) stats.zeroVarianceGroups += 1;
    for (const r of group) {
      const advantage =
        group.length === 1 || flat
          ? 0
          : options.normalizeStd
            ? (r.reward - mean) / (std + options.epsilon)
            : r.reward - mean;
      advantages.set(r.id, advantage);
    }
  }
  return advantages;
}
