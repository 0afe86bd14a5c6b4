/**
 * Progress of `lightning dataset run` on stderr: on a terminal, one progress bar redrawn in place
 * (attempts that did not succeed are printed above it as lines); otherwise, as in logs and CI, one
 * line per attempt; with `--json`, one `protocol/cliLines.ts` line per attempt and per score.
 */
import type { RolloutScore } from '../protocol';
import { describeAttempt, describeScore, type RolloutFinished, type RolloutScored } from '../protocol/cliLines';
import type { AttemptEvent } from '../runner/pool';
import { scoreErrors } from '../runner/scoring';
import { duration } from './textTable';

export interface ProgressCounts {
  readonly done: number;
  readonly total: number;
  readonly succeeded: number;
  readonly retried: number;
  readonly elapsedMs: number;
}

/** `[########----------------] 12/40 · 11 ok · 1 not ok · 2 retried · 3.2 s`. */
export function progressBar({ done, total, succeeded, retried, elapsedMs }: ProgressCounts, width = 24): string {
  const filled = total === 0 ? width : Math.min(width, Math.round((width * done) / total));
  const parts = [`[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] ${done}/${total}`, `${succeeded} ok`];
  if (done > succeeded) parts.push(`${done - succeeded} not ok`);
  if (retried > 0) parts.push(`${retried} retried`);
  parts.push(duration(elapsedMs));
  return parts.join(' · ');
}

export class Progress {
  private done = 0;
  private succeeded = 0;
  private retried = 0;
  private readonly started = Date.now();

  constructor(
    private readonly stream: NodeJS.WriteStream,
    private readonly total: number,
    private tty = stream.isTTY === true,
    private readonly json = false,
  ) {
    if (json) this.tty = false;
    if (this.tty) this.draw();
  }

  attempt({ rollout, durationMs, retrying }: AttemptEvent): void {
    if (retrying) this.retried += 1;
    else {
      this.done += 1;
      if (rollout.status === 'succeeded') this.succeeded += 1;
    }
    const event: RolloutFinished = {
      event: 'rollout-finished',
      done: this.done,
      total: this.total,
      rolloutId: rollout.id,
      taskId: rollout.task?.id ?? null,
      status: rollout.status,
      retrying,
      reward: rollout.reward,
      durationMs,
      error: rollout.error,
    };
    if (this.json) return this.write(event);
    const line = `[${this.done}/${this.total}] ${describeAttempt(event)}`;
    if (!this.tty) this.stream.write(`${line}\n`);
    else {
      if (rollout.status !== 'succeeded')
        this.stream.write(`\r\x1b[K${line}${rollout.error ? `: ${rollout.error}` : ''}\n`);
      this.draw();
    }
  }

  /** A rollout's automatic reward as it arrives (a line per rollout off a terminal; errors above the bar on one). */
  scored(score: RolloutScore): void {
    const errors = scoreErrors(score);
    const event: RolloutScored = { event: 'rollout-scored', rolloutId: score.rolloutId, reward: score.value, errors };
    if (this.json) return this.write(event);
    const line = describeScore(event);
    if (!this.tty) this.stream.write(`${line}\n`);
    else if (errors) {
      this.stream.write(`\r\x1b[K${line}\n`);
      this.draw();
    }
  }

  /** Ends the bar's line (on a terminal). */
  finish(): void {
    if (this.tty) this.stream.write('\n');
  }

  private write(line: RolloutFinished | RolloutScored): void {
    this.stream.write(`${JSON.stringify(line)}\n`);
  }

  private draw(): void {
    this.stream.write(
      `\r\x1b[K${progressBar({ done: this.done, total: this.total, succeeded: this.succeeded, retried: this.retried, elapsedMs: Date.now() - this.started })}`,
    );
  }
}
