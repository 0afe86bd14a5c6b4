/** Plain-text rendering for the CLI: aligned tables, durations, times. */
import type { Rollout } from '../protocol';

export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((header, column) => Math.max(header.length, ...rows.map((row) => (row[column] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells.map((cell, column) => cell.padEnd(widths[column]!)).join('  ').trimEnd();
  return [line(headers), ...rows.map(line)].join('\n');
}

export function duration(ms: number | null): string {
  if (ms === null) return '-';
  if (ms < 1_000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1)}s`;
  const minutes = Math.floor(ms / 60_000);
  return `${minutes}m${String(Math.round((ms % 60_000) / 1_000)).padStart(2, '0')}s`;
}

export function time(ms: number | null): string {
  if (ms === null) return '-';
  const date = new Date(ms);
  const pad = (n: number): string => String(n).padStart(2, '0');
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

export function rolloutDuration(rollout: Rollout, now = Date.now()): number | null {
  if (rollout.startedAt === null) return null;
  return (rollout.endedAt ?? now) - rollout.startedAt;
}

export function truncate(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

export function num(value: number | null): string {
  return value === null ? '-' : String(Math.round(value * 1000) / 1000);
}
