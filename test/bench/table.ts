/** The benchmark table: one row per measurement, a same-run baseline beside each result. */
import fs from 'node:fs';
import os from 'node:os';
export interface Row {
  metric: string;
  result: string;
  baseline: string;
  ratio: string;
  target: string;
  met: string;
}

export const rows: Row[] = [];

/**
 * A process's CPU time so far, all its threads, in ms (Linux: /proc/PID/stat, 10 ms ticks), and its exited and
 * waited-for children's together (user + system); undefined elsewhere.
 */
export function processCpuMs(pid: number | undefined): { user: number; system: number; children: number } | undefined {
  try {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return {
      user: Number(fields[11]) * 10,
      system: Number(fields[12]) * 10,
      children: (Number(fields[13]) + Number(fields[14])) * 10,
    };
  } catch {
    return undefined;
  }
}

export function median(values: number[]): number {
  return percentile(values, 50);
}

export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const rank = (p / 100) * (sorted.length - 1);
  const low = Math.floor(rank);
  const high = Math.ceil(rank);
  return sorted[low]! + (sorted[high]! - sorted[low]!) * (rank - low);
}

export function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

/**
 * A difference with its sign: `+1.03`, `-33.08` (an "added" p99 can be negative: the two p99s are of separate runs),
 * never `+-33.08`.
 */
export function signed(n: number, digits = 0): string {
  // `+ 0` turns -0 into 0, which has the plus sign.
  return (n + 0).toLocaleString('en-US', {
    maximumFractionDigits: digits,
    minimumFractionDigits: digits,
    signDisplay: 'always',
  });
}

export function printTable(): void {
  const headers: Array<keyof Row> = ['metric', 'result', 'baseline', 'ratio', 'target', 'met'];
  const widths = headers.map((h) => Math.max(h.length, ...rows.map((r) => r[h].length)));
  const line = (cells: string[]): string => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  console.log(line(headers));
  console.log(`|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
  for (const row of rows) console.log(line(headers.map((h) => row[h])));
}

/** The rows each section of this run added, in order (run.ts's `section`). */
export const sections: Array<{ name: string; rows: Row[] }> = [];

const BEGIN = '<!-- bench:begin (npm run bench writes between these markers; edit outside them) -->';
const END = '<!-- bench:end -->';

const cell = (text: string): string => text.replace(/\|/g, '\\|');

/** A section's part of docs/benchmarks.md: its heading, where and when it ran, and its table. */
function sectionMarkdown(name: string, sectionRows: Row[], machine: string): string {
  const headers: Array<keyof Row> = ['metric', 'result', 'baseline', 'ratio', 'target', 'met'];
  return [
    `### ${name}`,
    '',
    machine,
    '',
    `| ${headers.join(' | ')} |`,
    `|${headers.map(() => '---').join('|')}|`,
    ...sectionRows.map((row) => `| ${headers.map((h) => cell(row[h])).join(' | ')} |`),
    '',
  ].join('\n');
}

/** This machine and the date, as a section's table is headed. */
export function machineLine(flags: readonly string[]): string {
  const cpus = os.cpus();
  const date = new Date().toISOString().slice(0, 16).replace('T', ' ');
  return (
    `Measured ${date} UTC by \`npm run bench${flags.length > 0 ? ` -- ${flags.join(' ')}` : ''}\` on ${cpus.length} × ` +
    `${cpus[0]?.model.trim() ?? 'unknown CPU'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${os.type()} ${os.release()}, ` +
    `Node ${process.version} (load average ${os.loadavg()[0]!.toFixed(1)} at the end: other work shares this machine).`
  );
}

/**
 * Regenerates the performance tables of `file` (docs/benchmarks.md) between its markers: the sections this run
 * measured replace theirs, the others stay as they were last measured (each says when and where).
 */
export function writeBenchmarksDoc(file: string, machine: string): void {
  const text = fs.readFileSync(file, 'utf8');
  const begin = text.indexOf(BEGIN);
  const end = text.indexOf(END);
  if (begin === -1 || end === -1 || end < begin)
    throw new Error(`${file} has no ${BEGIN} … ${END} markers for the bench's tables`);
  const inside = text.slice(begin + BEGIN.length, end);
  // The sections already there, by name, in their order.
  const kept = new Map<string, string>();
  for (const part of inside.split(/^(?=### )/m)) {
    const name = /^### (.+)$/m.exec(part)?.[1];
    if (name && part.startsWith('### ')) kept.set(name.trim(), `${part.trim()}\n`);
  }
  for (const { name, rows: sectionRows } of sections) kept.set(name, sectionMarkdown(name, sectionRows, machine));
  const body = [...kept.values()].join('\n');
  fs.writeFileSync(file, `${text.slice(0, begin + BEGIN.length)}\n\n${body}\n${text.slice(end)}`);
}
