/**
 * How the panel shows one training run: the daemon's run detail (protocol/training.ts `TrainingRunDetail`, a
 * discriminated union on `algorithm`: the run, its metric series — one point per step: APO's rounds, an RL
 * algorithm's updates — and the algorithm's own part: APO's leaderboard of candidates, GRPO's and SFT's checkpoints),
 * and which points it holds. An open run's view is fetched again as it changes, with only the metric points after the
 * ones the panel has.
 */
import { z } from 'zod';
import { TrainingRunDetail } from '../training';

export const TrainingRunView = z.intersection(
  TrainingRunDetail,
  z.object({
    /**
     * The metric points are those after step `afterStep` (-1: the whole series); a live chart merges them into what it
     * has.
     */
    afterStep: z.number().int().min(-1).default(-1),
  }),
);
export type TrainingRunView = z.infer<typeof TrainingRunView>;
