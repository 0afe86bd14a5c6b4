/**
 * Checkpoints leaving the run and the disk (docs/training.md, "Take the model out"): exported as a PEFT adapter
 * or a Hugging Face model folder (`checkpoints/export`, the trainer worker's `export`), deleted one at a time
 * (`checkpoints/delete`), and a run's retention policy (`keepCheckpoints`: which checkpoints a run keeps as new
 * ones land; training/retention.ts applies it).
 */
import { z } from 'zod';

/**
 * `peft`: an adapter folder for `PeftModel.from_pretrained(base, DIR)`; `hf` / `merged`: a `save_pretrained` folder.
 */
export const CheckpointFormat = z.enum(['peft', 'hf', 'merged']);
export type CheckpointFormat = z.infer<typeof CheckpointFormat>;

/**
 * Absolute on POSIX (`/…`) or Windows (`C:\…`, `\\server\…`, `\…`): what `path.posix.isAbsolute` or
 * `path.win32.isAbsolute` accepts, without node:path (the protocol is browser-safe). The daemon checks again with its
 * own platform's rule (training/exportCheckpoint.ts).
 */
const ABSOLUTE_PATH = /^(?:[\\/]|[A-Za-z]:[\\/])/;

export const ExportCheckpointParams = z.strictObject({
  /** A checkpoint id from `checkpoints/list` (`ckpt-…`). */
  id: z.string().min(1).max(200),
  format: CheckpointFormat,
  /** The folder to write: absolute (the daemon's working folder is not the caller's); absent or empty. */
  out: z
    .string()
    .min(1)
    .max(4096)
    .refine((value) => ABSOLUTE_PATH.test(value), 'must be an absolute path'),
  /** The Python that runs the export; default: the training run's, else found as `lightning doctor` does. */
  python: z.string().min(1).optional(),
  /**
   * A run with several policies (`--policy`): every policy's checkpoint of this one's step, written as one PEFT folder
   * with an adapter each (`out/<policy>/`); `format` peft only.
   */
  set: z.boolean().optional(),
});
export type ExportCheckpointParams = z.input<typeof ExportCheckpointParams>;

export const ExportCheckpointResult = z.object({
  checkpointId: z.string(),
  format: CheckpointFormat,
  /** The folder written. */
  path: z.string(),
  bytes: z.number().int().nonnegative(),
  /** The folder's file names. */
  files: z.array(z.string()),
  /** `peft`: the base model the adapter loads onto (its `base_model_name_or_path`); null otherwise. */
  baseModel: z.string().nullable(),
  seconds: z.number().nonnegative(),
});
export type ExportCheckpointResult = z.infer<typeof ExportCheckpointResult>;

export const DeleteCheckpointParams = z.strictObject({ id: z.string().min(1).max(200) });
export const DeleteCheckpointResult = z.object({
  deleted: z.string(),
  /** Bytes freed on disk (0 when the folder was already gone). */
  bytes: z.number().int().nonnegative(),
});
export type DeleteCheckpointResult = z.infer<typeof DeleteCheckpointResult>;

/** How many checkpoints a run keeps: `all`, or its last N (N ≥ 1) besides its best; default 3. */
export const KeepCheckpoints = z.union([z.literal('all'), z.number().int().min(1).max(100_000)]);
export type KeepCheckpoints = z.infer<typeof KeepCheckpoints>;
export const DEFAULT_KEEP_CHECKPOINTS = 3;

/** `--keep-checkpoints all|N` (and the editor's setting) as a KeepCheckpoints, or a message naming the fix. */
export function parseKeepCheckpoints(text: string): KeepCheckpoints | { error: string } {
  const value = text.trim();
  if (value === 'all') return 'all';
  if (/^\d+$/.test(value) && Number(value) >= 1) return Number(value);
  return {
    error: `keep-checkpoints must be "all" or a whole number ≥ 1 (the last N checkpoints besides the best), got ${JSON.stringify(text)}`,
  };
}
