/**
 * How the panel shows one training run, whatever its algorithm: the run, its metric series (one
 * point per step: APO's rounds, an RL algorithm's updates) and an algorithm-specific part, a
 * discriminated union on `kind`, one per algorithm (APO: the leaderboard of candidates; GRPO and SFT:
 * their checkpoints). An open run's view
 * is fetched again as it changes, with only the metric points after the ones the panel has.
 */
import { z } from 'zod';
import { ApoCandidate } from '../trainer-daemon/protocol/apo';
import { MetricSeries } from '../trainer-daemon/protocol/training';
import { Checkpoint } from '../trainer-daemon/protocol/records';
import { TrainingRun } from '../trainer-daemon/protocol/training';

export const TrainingRunExtra = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('apo'), candidates: z.array(ApoCandidate) }),
  /** GRPO: the saved policies by step, each with its metrics (the panel's Use button points rollouts at one). */
  z.object({ kind: z.literal('grpo'), checkpoints: z.array(Checkpoint) }),
  /** SFT: its checkpoints, one per epoch, as GRPO's. */
  z.object({ kind: z.literal('sft'), checkpoints: z.array(Checkpoint) }),
]);
export type TrainingRunExtra = z.infer<typeof TrainingRunExtra>;

export const TrainingRunView = z.object({
  run: TrainingRun,
  /** The points after step `afterStep` (-1: the whole series); a live chart merges them into what it has. */
  metrics: MetricSeries,
  afterStep: z.number().int().min(-1).default(-1),
  extra: TrainingRunExtra,
});
export type TrainingRunView = z.infer<typeof TrainingRunView>;
