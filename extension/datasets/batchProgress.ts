/**
 * What **Run Dataset** reads from `lightning dataset run --json`: the batch announcement, the
 * per-rollout progress lines and the automatic scoring's `scored …` lines on stderr, and the summary
 * line on stdout (with the scoring errors); what the progress notification says as they arrive; and
 * how the summary is told to the user. Pure, so it is unit-tested against the CLI's own output format.
 */
import { z } from 'zod';

import { formatDuration } from '../../trainer-daemon/protocol/format';

export type ProgressEvent =
  | { readonly kind: 'batch'; readonly batchId: string; readonly total: number; readonly scored: boolean }
  | { readonly kind: 'rollout'; readonly done: number; readonly total: number; readonly text: string }
  | { readonly kind: 'scored'; readonly rolloutId: string };

/**
 * `lightning: batch batch-1a2b: 8 rollouts of math, 4 at a time[, scored with FILE]` /
 * `[3/8] ro-… task-2 succeeded reward 1 1.2 s` / `scored ro-…: reward 1[ (errors: …)]` (cli/progress.ts; the errors come again in the summary).
 */
export function parseProgressLine(line: string): ProgressEvent | undefined {
  const batch = /^lightning: batch (\S+): (\d+) rollouts.*?(, scored with .*)?$/.exec(line);
  if (batch) return { kind: 'batch', batchId: batch[1]!, total: Number(batch[2]), scored: batch[3] !== undefined };
  const rollout = /^\[(\d+)\/(\d+)\] (.*)$/.exec(line);
  if (rollout) return { kind: 'rollout', done: Number(rollout[1]), total: Number(rollout[2]), text: rollout[3]! };
  const scored = /^scored (\S+): reward /.exec(line);
  if (scored) return { kind: 'scored', rolloutId: scored[1]! };
  return undefined;
}

/**
 * What the progress notification says as the lines arrive: each rollout as it ends (with the bar's
 * increment, in percent); once every rollout has run in a scored batch, how many are scored (the
 * scoring that ends the batch, which a relative judge does all at once). `update` returns the new
 * report, or undefined when the notification does not change.
 */
export class BatchProgressText {
  private total = 0;
  private done = 0;
  private scored = 0;
  private scoring = false;

  update(event: ProgressEvent): { readonly message: string; readonly increment: number } | undefined {
    switch (event.kind) {
      case 'batch':
        this.total = event.total;
        this.scoring = event.scored;
        return undefined;
      case 'rollout': {
        const increment = (100 * (event.done - this.done)) / Math.max(1, event.total);
        this.total = event.total;
        this.done = event.done;
        return { message: this.scoringAtEnd() ?? `${event.done}/${event.total} · ${event.text}`, increment };
      }
      case 'scored': {
        this.scored += 1;
        const message = this.scoringAtEnd();
        return message === undefined ? undefined : { message, increment: 0 };
      }
    }
  }

  private scoringAtEnd(): string | undefined {
    if (!this.scoring || this.done < this.total) return undefined;
    return `${this.total}/${this.total} ran · scoring: ${this.scored}/${this.total} scored`;
  }
}

const TaskSummary = z.object({
  task: z.string(),
  rollouts: z.number(),
  succeeded: z.number(),
  meanReward: z.number().nullable(),
  p50Ms: z.number().nullable(),
  p95Ms: z.number().nullable(),
  meanTokens: z.number(),
  scoreErrors: z.number(),
});
const ScoringSummary = z.object({
  rewardsFile: z.string(),
  scored: z.number(),
  errors: z.array(z.object({ rolloutId: z.string(), task: z.string().nullable(), error: z.string() })),
});
export const BatchFinished = z.object({ event: z.literal('batch-finished'), batchId: z.string(), tasks: z.array(TaskSummary).min(1), scoring: ScoringSummary.optional() });
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

/** One line for a notification: the batch overall (the CLI's `(all)` row). */
export function describeSummary(summary: BatchFinished, cancelled: boolean): string {
  const all = summary.tasks.at(-1)!;
  const success = all.rollouts === 0 ? 0 : Math.round((100 * all.succeeded) / all.rollouts);
  const reward = all.meanReward === null ? 'no rewards yet' : `mean reward ${Number(all.meanReward.toFixed(3))}`;
  const errors = scoringErrorLines(summary).length;
  return `${cancelled ? 'cancelled' : 'finished'}: ${all.rollouts} rollouts over ${summary.tasks.length - 1} tasks · ${success}% succeeded · ${reward} · p50 ${formatDuration(all.p50Ms, '–')} · p95 ${formatDuration(all.p95Ms, '–')} · ${Math.round(all.meanTokens)} tokens per rollout${errors > 0 ? ` · ${errors} scoring error${errors === 1 ? '' : 's'} (Show Logs)` : ''}`;
}

/** The batch's scoring errors, one line each for the Lightning log (as the CLI prints them without --json). */
export function scoringErrorLines(summary: BatchFinished): string[] {
  return (summary.scoring?.errors ?? []).map((e) => `score error: ${e.rolloutId} (task ${e.task ?? '-'}): ${e.error}`);
}
