/**
 * How every client writes a duration: the CLI's tables and progress lines, the panel, the editor's
 * notifications. One formatter, so the same rollout reads the same everywhere.
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
export function rolloutDuration(rollout: { readonly startedAt: number | null; readonly endedAt: number | null }, now = Date.now()): number | null {
  if (rollout.startedAt === null) return null;
  return (rollout.endedAt ?? now) - rollout.startedAt;
}
