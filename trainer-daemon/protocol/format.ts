/**
 * How every client writes a duration (the CLI's tables and progress lines, the panel, the editor's notifications), sums
 * up a checkpoint's metrics and says what checkpoints take on disk. One formatter, so the same rollout reads the same
 * everywhere; no zod here (the webview bundle imports it).
 */

/** "12 ms", "1.23 s", "45.6 s", "2 min 5 s"; `none` for a duration not known (not started, no value). */
export function formatDuration(ms: number | null, none = '—'): string {
  if (ms === null || !Number.isFinite(ms)) return none;
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const minutes = Math.floor(ms / 60_000);
  return `${minutes} min ${Math.round((ms % 60_000) / 1_000)} s`;
}

/** How long a rollout ran (so far, while it runs); null before it started. */
export function rolloutDuration(
  rollout: { readonly startedAt: number | null; readonly endedAt: number | null },
  now = Date.now(),
): number | null {
  if (rollout.startedAt === null) return null;
  return (rollout.endedAt ?? now) - rollout.startedAt;
}

/** The metrics a checkpoint is judged by, in this order, when it has them. */
const KEY_METRICS: ReadonlyArray<readonly [string, string]> = [
  ['val/reward', 'val'],
  ['reward/mean', 'reward'],
  ['loss', 'loss'],
  ['kl', 'KL'],
  // An SFT checkpoint: its held-out loss and greedy exact-match accuracy.
  ['val/loss', 'val loss'],
  ['val/accuracy', 'val accuracy'],
];

function formatNumber(value: number): string {
  return Math.abs(value) >= 100 || Number.isInteger(value)
    ? String(Math.round(value * 100) / 100)
    : value.toPrecision(3);
}

/** "val 0.81 · reward 0.62 · loss 0.12" — the key metrics a checkpoint was saved with. */
export function describeMetrics(metrics: Readonly<Record<string, number>>): string {
  return KEY_METRICS.flatMap(([name, label]) =>
    typeof metrics[name] === 'number' ? [`${label} ${formatNumber(metrics[name])}`] : [],
  ).join(' · ');
}

/** A size on disk for people: `812 B`, `4.2 KiB`, `175.3 MiB`, `3.1 GiB` (checkpoints, exports). */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/**
 * A checkpoint's size on disk: `12.3 MiB +optimizer` (it keeps optimizer state), `missing` (its folder is gone), `-`
 * (not measured).
 */
export function checkpointSize(checkpoint: {
  readonly bytes?: number | null;
  readonly optimizerState?: boolean | null;
}): string {
  if (checkpoint.bytes === null) return 'missing';
  if (checkpoint.bytes === undefined) return '-';
  return `${formatBytes(checkpoint.bytes)}${checkpoint.optimizerState ? ' +optimizer' : ''}`;
}

/**
 * A run's checkpoints on disk in one phrase: `3 checkpoints, 12.3 MiB` (a missing or unmeasured one counts 0 bytes).
 */
export function checkpointsTotal(checkpoints: ReadonlyArray<{ readonly bytes?: number | null }>): string {
  return `${checkpoints.length} checkpoint${checkpoints.length === 1 ? '' : 's'}, ${formatBytes(checkpointsBytes(checkpoints))}`;
}

/** What checkpoints take on disk together (a missing or unmeasured one counts 0 bytes). */
export function checkpointsBytes(checkpoints: ReadonlyArray<{ readonly bytes?: number | null }>): number {
  return checkpoints.reduce((sum, c) => sum + (c.bytes ?? 0), 0);
}

/**
 * "1 rollout", "1,234 rollouts": how every client writes a number of rollouts (the panel, its groups, the status bar).
 */
export function rolloutCount(count: number): string {
  return `${count.toLocaleString('en-US')} rollout${count === 1 ? '' : 's'}`;
}
