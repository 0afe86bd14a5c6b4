/** Plain-text rendering for the CLI: aligned tables, durations, times. */
import { formatDuration } from '../protocol/format';

export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  // A loop, not a spread into Math.max: a 300k-row table would overflow the stack.
  const widths = headers.map((header) => header.length);
  for (const row of rows) row.forEach((cell, column) => (widths[column] = Math.max(widths[column] ?? 0, cell.length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, column) => cell.padEnd(widths[column]!))
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n');
}

/** A duration in a table cell: the one formatter every client uses, '-' when unknown. */
export function duration(ms: number | null): string {
  return formatDuration(ms, '-');
}

export function time(ms: number | null): string {
  if (ms === null) return '-';
  const date = new Date(ms);
  const pad = (n: number): string => String(n).padStart(2, '0');
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

export function truncate(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

export function num(value: number | null): string {
  return value === null ? '-' : String(Math.round(value * 1000) / 1000);
}
