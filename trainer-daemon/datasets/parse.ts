/**
 * Reading a dataset file: `tasks.jsonl`, one JSON object per line — an optional `id`, an optional
 * expected answer (`expected` by default), an optional `split`, and any input fields. Every line is
 * checked before anything is stored; an error names the line.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import { InvalidInputError } from '../protocol/errors';
import type { ImportTask, Json } from '../protocol';

export interface ParseOptions {
  /** The field holding the expected answer (kept out of the agent's input). */
  readonly expectedField: string;
  /** Fraction of tasks without an explicit `split` that go to validation, chosen stably by id. */
  readonly valFraction: number;
}

/** A stable pseudo-random number in [0, 1) per task id, so re-importing gives the same split. */
function unit(id: string): number {
  return crypto.createHash('sha256').update(id).digest().readUInt32BE(0) / 2 ** 32;
}

export function parseTasksJsonl(text: string, options: ParseOptions): ImportTask[] {
  const tasks: ImportTask[] = [];
  const seen = new Map<string, number>();
  const lines = text.split(/\r?\n/);
  lines.forEach((line, index) => {
    const lineNo = index + 1;
    if (line.trim() === '') return;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      throw new InvalidInputError(`line ${lineNo}: not valid JSON`);
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value))
      throw new InvalidInputError(`line ${lineNo}: expected a JSON object`);
    const { id: rawId, split: rawSplit, [options.expectedField]: expected, ...input } = value as Record<string, Json>;
    if (rawId !== undefined && typeof rawId !== 'string' && typeof rawId !== 'number')
      throw new InvalidInputError(`line ${lineNo}: id must be a string or a number`);
    const id = rawId === undefined ? `task-${tasks.length + 1}` : String(rawId);
    const previous = seen.get(id);
    if (previous !== undefined)
      throw new InvalidInputError(`line ${lineNo}: id ${JSON.stringify(id)} repeats line ${previous}`);
    seen.set(id, lineNo);
    if (rawSplit !== undefined && rawSplit !== 'train' && rawSplit !== 'val' && rawSplit !== 'test') {
      throw new InvalidInputError(`line ${lineNo}: split must be train, val or test`);
    }
    const split = rawSplit ?? (unit(id) < options.valFraction ? 'val' : 'train');
    tasks.push({ id, split, input, expected: expected ?? null });
  });
  if (tasks.length === 0) throw new InvalidInputError('the file has no tasks (one JSON object per line)');
  return tasks;
}

/** What a dataset file may hold: 256 MiB in all (`LIGHTNING_MAX_DATASET_BYTES`), 8 MiB a line. */
export const DATASET_LIMITS = {
  maxBytes: Number(process.env.LIGHTNING_MAX_DATASET_BYTES) || 256 * 1024 * 1024,
  maxLineBytes: 8 * 1024 * 1024,
};

/**
 * Reads a dataset file of any kind (a regular file, a FIFO, a device) with its caps checked as the bytes
 * arrive: `/dev/zero` or an endless FIFO stops at the first line or byte past them, naming it.
 */
export function readDatasetFile(file: string, limits = DATASET_LIMITS): string {
  const fd = fs.openSync(file, 'r');
  try {
    const chunks: Buffer[] = [];
    let total = 0;
    let line = 1;
    let lineBytes = 0;
    const chunk = Buffer.allocUnsafe(1024 * 1024);
    for (;;) {
      const read = fs.readSync(fd, chunk, 0, chunk.length, null);
      if (read === 0) break;
      total += read;
      if (total > limits.maxBytes)
        throw new InvalidInputError(
          `the file is over the ${limits.maxBytes}-byte limit for a dataset (LIGHTNING_MAX_DATASET_BYTES); split it`,
        );
      for (let start = 0; start < read;) {
        const newline = chunk.indexOf(10, start);
        const end = newline === -1 || newline >= read ? read : newline;
        lineBytes += end - start;
        if (lineBytes > limits.maxLineBytes)
          throw new InvalidInputError(`line ${line} is over the ${limits.maxLineBytes}-byte limit for one task`);
        if (end === read) break;
        line += 1;
        lineBytes = 0;
        start = end + 1;
      }
      chunks.push(Buffer.from(chunk.subarray(0, read)));
    }
    return Buffer.concat(chunks, total).toString('utf8');
  } finally {
    fs.closeSync(fd);
  }
}
