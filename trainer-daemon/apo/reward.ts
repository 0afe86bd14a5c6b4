/**
 * What APO scores its rollouts with: the one scoring pipeline (runner/scoring.ts → `rewards/score`)
 * with the user's rewards file — `rewardsFile`, else `.lightning/rewards.json` beside the store when
 * it exists — or, without one, a rule matching the final answer (`lightning.answer`, else the last
 * LLM call's text) against the task's expected answer. The episode reward is then the shared policy's
 * (the latest human annotation, else the agent's own, else the automatic one).
 */
import path from 'node:path';
import type { ApoConfig } from '../protocol';
import { scoringFor } from '../runner/scoring';
import type { RolloutScoring } from '../runner/pool';

/**
 * The scoring of APO's batches; undefined with `match: none` and no rewards file (only rewards given by people or the
 * agent count).
 */
export function apoScoring(config: ApoConfig, storeFile: string, env: NodeJS.ProcessEnv): RolloutScoring | undefined {
  const fromFile = scoringFor(config.rewardsFile, storeFile, env);
  if (fromFile || config.match === 'none') return fromFile;
  const rule = {
    type: 'rule' as const,
    name: `match.${config.match}`,
    rule: { rule: 'normalized' as const, contains: config.match === 'contains' },
  };
  return { source: { spec: { sources: [rule] }, baseDir: path.dirname(storeFile) }, apiKeys: {}, atEnd: false };
}
