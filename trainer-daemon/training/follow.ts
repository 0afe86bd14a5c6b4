/**
 * Follows a training run from a client (`lightning train`, `npm run demo`): one line per step as its metrics land —
 * a table row (GRPO: sampled reward before the update, validation reward, loss, KL, entropy, speed; SFT: an epoch's
 * loss, validation loss and accuracy, speed) or, for APO, a progress line per round —, Ctrl-C cancels the run, and it
 * resolves with the final detail.
 */
import { candidatesOf, type MetricSeries, type TrainingRun, type TrainingRunDetail } from '../protocol';
import { assertNever } from '../protocol/assert';
import { roundLine } from '../apo/roundLines';
import type { RunnerClient } from '../runner/pool';
import { isFinal } from '../protocol/status';
import { chartedPolicies } from '../protocol/ui/grpoCharts';

const HEADERS = ['ITER', 'REWARD', 'VAL', 'LOSS', 'KL', 'ENTROPY', 'CLIP', 'TOK/S', 'SECONDS'];
const WIDTHS = [5, 11, 5, 7, 7, 7, 5, 7, 7];

/** A fixed-width table line, so rows can be printed one at a time as iterations finish. */
export function iterationLine(cells: readonly string[] = HEADERS): string {
  return cells
    .map((cell, i) => cell.padEnd(WIDTHS[i]!))
    .join('  ')
    .trimEnd();
}

function fixed(value: number | undefined, digits = 3): string {
  return value === undefined || !Number.isFinite(value) ? '-' : value.toFixed(digits);
}

/** The metric series of a run keyed by step. */
export function byStep(metrics: MetricSeries): Map<number, Record<string, number>> {
  const steps = new Map<number, Record<string, number>>();
  for (const point of metrics) {
    const row = steps.get(point.step) ?? {};
    row[point.name] = point.value;
    steps.set(point.step, row);
  }
  return new Map([...steps].sort((a, b) => a[0] - b[0]));
}

/** One iteration as table cells (step 0 is the start: warm start and the validation before training). */
export function iterationCells(step: number, m: Record<string, number>): string[] {
  const reward = m['reward/mean'] === undefined ? '-' : `${fixed(m['reward/mean'], 2)} ± ${fixed(m['reward/std'], 2)}`;
  // With several policies each one's update has its own seconds.
  const updates = Object.entries(m).filter(([name]) => /^(policy\/[^/]+\/)?train\/seconds$/.test(name));
  const seconds = (m['rollout/seconds'] ?? 0) + updates.reduce((sum, [, value]) => sum + value, 0);
  return [
    step === 0 ? 'start' : String(step),
    reward,
    fixed(m['val/reward'], 2),
    fixed(m.loss),
    fixed(m.kl, 4),
    fixed(m.entropy),
    fixed(m.clipFraction, 2),
    fixed(m.tokensPerSecond, 0),
    seconds ? seconds.toFixed(1) : '-',
  ];
}

/**
 * With several policies, a line per policy under its iteration's row: its own update, and its validation reward where
 * the iteration validated (step 0, before training, has only that); empty with one policy.
 */
export function policyLines(m: Record<string, number>): string {
  const names = chartedPolicies(Object.keys(m).map((name) => ({ step: 0, name, value: 0 })));
  return names
    .map((policy) => {
      const at = (metric: string): number | undefined => m[`policy/${policy}/${metric}`];
      const val = at('val/reward');
      const updated = Object.keys(m).some((name) => name.startsWith(`policy/${policy}/`) && !name.includes('/val/'));
      const parts = [
        ...(updated
          ? [
              `${at('transitions') ?? 0} transitions`,
              `loss ${fixed(at('loss'))}`,
              `KL ${fixed(at('kl'), 4)}`,
              `entropy ${fixed(at('entropy'))}`,
            ]
          : []),
        ...(val === undefined ? [] : [`val ${fixed(val, 2)}`]),
      ];
      return `\n  ${policy}: ${parts.join(' · ')}`;
    })
    .join('');
}

const EPOCH_HEADERS = ['EPOCH', 'LOSS', 'VAL LOSS', 'VAL ACC', 'TOK/S', 'SECONDS'];
const EPOCH_WIDTHS = [8, 7, 8, 7, 7, 7];

/** An SFT run's table line, fixed-width as iterationLine: the headers, or an epoch's cells. */
export function epochLine(cells: readonly string[] = EPOCH_HEADERS): string {
  return cells
    .map((cell, i) => cell.padEnd(EPOCH_WIDTHS[i]!))
    .join('  ')
    .trimEnd();
}

/** One SFT epoch as table cells (step 0: the base policy's validation, before training). */
export function epochCells(step: number, m: Record<string, number>): string[] {
  return [
    step === 0 ? '0 (base)' : String(step),
    fixed(m.loss),
    fixed(m['val/loss']),
    fixed(m['val/accuracy'], 2),
    fixed(m.tokensPerSecond, 0),
    m['train/seconds'] === undefined ? '-' : m['train/seconds'].toFixed(1),
  ];
}

/**
 * How a run is followed, by its algorithm: GRPO's iterations and SFT's epochs as a table on stdout (its header first;
 * not with --json), each step once a later one began (its validation lands after its update); APO's rounds as
 * progress lines for people on stderr, each once recorded (a round's metrics land in one write).
 */
export interface RunLines {
  /** The table's header; null: no table. */
  readonly header: string | null;
  /** `table`: rows on stdout (left out with --json); `progress`: lines on stderr. */
  readonly to: 'table' | 'progress';
  /** Whether a step is complete once it has metrics (else once a later step began, or the run ended). */
  readonly completeWhenRecorded: boolean;
  line(step: number, metrics: Record<string, number>, detail: TrainingRunDetail): string;
}

export function runLines(run: Pick<TrainingRun, 'algorithm'>): RunLines {
  switch (run.algorithm) {
    case 'grpo':
      return {
        header: iterationLine(),
        to: 'table',
        completeWhenRecorded: false,
        line: (step, metrics) => iterationLine(iterationCells(step, metrics)) + policyLines(metrics),
      };
    case 'sft':
      return {
        header: epochLine(),
        to: 'table',
        completeWhenRecorded: false,
        line: (step, metrics) => epochLine(epochCells(step, metrics)),
      };
    case 'apo':
      return {
        header: null,
        to: 'progress',
        completeWhenRecorded: true,
        line: (step, metrics, detail) => `apo: ${roundLine(step, metrics, candidatesOf(detail))}`,
      };
    default:
      return assertNever(run.algorithm);
  }
}

export interface FollowOptions {
  /** Called with each step once complete (RunLines.completeWhenRecorded says when), with the detail it was read in. */
  readonly onStep: (step: number, metrics: Record<string, number>, detail: TrainingRunDetail) => void;
  /** Whether a step is complete once recorded (APO), or once a later one began (GRPO, SFT: validation lands later). */
  readonly completeWhenRecorded: boolean;
  /** What Ctrl-C says it does (after "lightning: cancelling training run X"). */
  readonly onCancel: string;
  readonly pollMs?: number;
}

export async function followRun(
  client: RunnerClient,
  runId: string,
  options: FollowOptions,
): Promise<TrainingRunDetail> {
  let cancelling = false;
  const cancel = (): void => {
    if (cancelling) return;
    cancelling = true;
    process.stderr.write(`lightning: cancelling training run ${runId}; ${options.onCancel}\n`);
    void client.request('cancelTrainingRun', { id: runId }).catch(() => undefined);
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
  for (const signal of signals) process.on(signal, cancel);
  let printed = -1;
  try {
    for (;;) {
      const detail = await client.request('getTrainingRun', { id: runId });
      const done = isFinal(detail.run.status);
      const steps = byStep(detail.metrics);
      const last = Math.max(-1, ...steps.keys());
      for (const [step, metrics] of steps) {
        if (step > printed && (step < last || done || options.completeWhenRecorded)) {
          options.onStep(step, metrics, detail);
          printed = step;
        }
      }
      if (done) return detail;
      await new Promise((resolve) => setTimeout(resolve, options.pollMs ?? 500));
    }
  } finally {
    for (const signal of signals) process.off(signal, cancel);
  }
}
