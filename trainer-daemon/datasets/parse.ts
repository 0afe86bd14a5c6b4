/**
 * Reading a dataset file: `tasks.jsonl`, one JSON object per line — an optional `id`, an optional
 * expected answer (`expected` by default), an optional `split`, and any input fields. Every line is
 * checked before anything is stored; an error names the line.
 */
import crypto from 'node:crypto';
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
