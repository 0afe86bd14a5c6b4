/**
 * What **Run Dataset** reads from `lightning dataset run --json`: the batch announcement and the
 * per-rollout progress lines on stderr, and the summary line on stdout; and how the summary is told
 * to the user. Pure, so it is unit-tested against the CLI's own output format.
 */
import { z } from 'zod';

export type ProgressEvent =
  | { readonly kind: 'batch'; readonly batchId: string; readonly total: number }
  | { readonly kind: 'rollout'; readonly done: number; readonly total: number; readonly text: string };

/** `lightning: batch batch-1a2b: 8 rollouts of math, 4 at a time` / `[3/8] ro-… task-2 succeeded reward 1 1.2 s`. */
export function parseProgressLine(line: string): ProgressEvent | undefined {
  const batch = /^lightning: batch (\S+): (\d+) rollouts/.exec(line);
  if (batch) return { kind: 'batch', batchId: batch[1]!, total: Number(batch[2]) };
  const rollout = /^\[(\d+)\/(\d+)\] (.*)$/.exec(line);
  if (rollout) return { kind: 'rollout', done: Number(rollout[1]), total: Number(rollout[2]), text: rollout[3]! };
  return undefined;
}

const TaskSummary = z.object({
  task: z.string(),
  rollouts: z.number(),
  succeeded: z.number(),
  meanReward: z.number().nullable(),
  p50Ms: z.number().nullable(),
  p95Ms: z.number().nullable(),
  meanTokens: z.number(),
});
export const BatchFinished = z.object({ event: z.literal('batch-finished'), batchId: z.string(), tasks: z.array(TaskSummary).min(1) });
export type BatchFinished = z.infer<typeof BatchFinished>;

/** The summary line among the CLI's stdout lines, or undefined when there is none. */
export function parseBatchFinished(stdout: string): BatchFinished | undefined {
  for (const line of stdout.split('\n').reverse()) {
    if (!line.startsWith('{')) continue;
    try {
      const parsed = BatchFinished.safeParse(JSON.parse(line));
      if (parsed.success) return parsed.data;
    } catch {
      // Not JSON: keep looking.
    }
  }
  return undefined;
}

function seconds(ms: number | null): string {
  return ms === null ? '–' : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

/** One line for a notification: the batch overall (the CLI's `(all)` row). */
export function describeSummary(summary: BatchFinished, cancelled: boolean): string {
  const all = summary.tasks.at(-1)!;
  const success = all.rollouts === 0 ? 0 : Math.round((100 * all.succeeded) / all.rollouts);
  const reward = all.meanReward === null ? 'no rewards yet' : `mean reward ${Number(all.meanReward.toFixed(3))}`;
  return `${cancelled ? 'cancelled' : 'finished'}: ${all.rollouts} rollouts over ${summary.tasks.length - 1} tasks · ${success}% succeeded · ${reward} · p50 ${seconds(all.p50Ms)} · p95 ${seconds(all.p95Ms)} · ${Math.round(all.meanTokens)} tokens per rollout`;
}
