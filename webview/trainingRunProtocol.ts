/**
 * How the panel shows one training run, whatever its algorithm: the run, its metric series (one
 * point per step: APO's rounds, an RL algorithm's updates) and an algorithm-specific part, a
 * discriminated union on `kind` (APO: the leaderboard of candidates). An algorithm without a
 * dedicated view gets `{ kind: 'none' }` and still shows its status and metrics.
 */
import { z } from 'zod';
import { ApoCandidate } from '../trainer-daemon/protocol/apo';
import { MetricSeries } from '../trainer-daemon/protocol/training';
import { TrainingRun } from '../trainer-daemon/protocol/records';

export const TrainingRunExtra = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('apo'), candidates: z.array(ApoCandidate) }),
  z.object({ kind: z.literal('none') }),
]);
export type TrainingRunExtra = z.infer<typeof TrainingRunExtra>;

export const TrainingRunView = z.object({ run: TrainingRun, metrics: MetricSeries, extra: TrainingRunExtra });
export type TrainingRunView = z.infer<typeof TrainingRunView>;
