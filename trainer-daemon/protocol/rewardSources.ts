/**
 * Which rewards are automatic, in one place: the ones the scoring pipeline writes (rules and reward functions, judges,
 * reward models, and their combined value), as against a person's and an agent's. Credit assignment ranks them last,
 * a resumed batch scores the rollouts that hold none, two scoring jobs write one set, and a person reviews them. No
 * zod: the pages import it.
 */
import type { Reward, RewardSource } from './records';

export const AUTOMATIC_REWARD_SOURCES: readonly RewardSource[] = ['rule', 'judge', 'model'];

export function isAutomatic(reward: Pick<Reward, 'source'>): boolean {
  return AUTOMATIC_REWARD_SOURCES.includes(reward.source);
}
