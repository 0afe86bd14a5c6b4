/**
 * What **Run Dataset** reads from `lightning dataset run --json`: the CLI's JSON lines
 * (`protocol/cliLines.ts`: `batch-started`, `rollout-finished` and `rollout-scored` on stderr,
 * `batch-finished` on stdout, with the scoring errors); what the progress notification says as they
 * arrive; and how the summary is told to the user. Pure, so it is unit-tested against the CLI's own output.
 */
import { assertNever } from '../../trainer-daemon/protocol/assert';
import { describeAttempt, parseCliLine, type BatchFinished } from '../../trainer-daemon/protocol/cliLines';
import { formatDuration } from '../../trainer-daemon/protocol/format';

export type ProgressEvent =
  | { readonly kind: 'batch'; readonly batchId: string; readonly total: number; readonly scored: boolean }
  | { readonly kind: 'rollout'; readonly done: number; readonly total: number; readonly text: string }
  | { readonly kind: 'scored'; readonly rolloutId: string };

/** One of the CLI's progress lines as the notification uses it, or undefined for any other line. */
export function parseProgressLine(line: string): ProgressEvent | undefined {
  const parsed = parseCliLine(line);
  switch (parsed?.event) {
    case 'batch-started':
      return { kind: 'batch', batchId: parsed.batchId, total: parsed.total, scored: parsed.scored };
    case 'rollout-finished':
      return { kind: 'rollout', done: parsed.done, total: parsed.total, text: describeAttempt(parsed) };
    case 'rollout-scored':
      return { kind: 'scored', rolloutId: parsed.rolloutId };
    // The CLI's other lines, and a line that is not one of them, leave the notification as it is.
    case 'batch-finished':
    case 'ready':
    case 'startup-failed':
    case 'store-upgrading':
    case 'training-started':
    case 'training-finished':
    case undefined:
      return undefined;
    default:
      return assertNever(parsed);
  }
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

/** The summary line of `dataset run --json` on stdout (the last one that parses). */
export function parseBatchFinished(stdout: string): BatchFinished | undefined {
  for (const line of stdout.split('\n').reverse()) {
    const parsed = parseCliLine(line);
    if (parsed?.event === 'batch-finished') return parsed;
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
