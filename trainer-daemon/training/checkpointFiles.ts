/**
 * A checkpoint's folder on disk (python/lightning_trainer/checkpoint.py writes it): its size, whether it keeps
 * optimizer state, and deleting either. Only folders the daemon recorded as checkpoints are touched, and only when they
 * look like one (a config.json inside): a record pointing at some other folder is never emptied.
 */
import fs from 'node:fs';
import path from 'node:path';

export const OPTIMIZER_FILE = 'optimizer.pt';

function folderBytes(dir: string): number {
  let total = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) total += folderBytes(file);
    else if (entry.isFile()) total += fs.statSync(file).size;
  }
  return total;
}

function isCheckpointFolder(dir: string): boolean {
  return fs.existsSync(path.join(dir, 'config.json')) && fs.statSync(dir).isDirectory();
}

/** Bytes on disk (null: the folder is gone) and whether optimizer state is there. */
export function measureCheckpoint(dir: string): { bytes: number | null; optimizerState: boolean } {
  if (!isCheckpointFolder(dir)) return { bytes: null, optimizerState: false };
  return { bytes: folderBytes(dir), optimizerState: fs.existsSync(path.join(dir, OPTIMIZER_FILE)) };
}

/** Deletes the optimizer state; returns the bytes freed. */
export function dropOptimizerState(dir: string): number {
  const file = path.join(dir, OPTIMIZER_FILE);
  if (!isCheckpointFolder(dir) || !fs.existsSync(file)) return 0;
  const { size } = fs.statSync(file);
  fs.rmSync(file, { force: true });
  return size;
}

/** Deletes the checkpoint's folder; returns the bytes freed (0 when it was gone already). */
export function removeCheckpointFolder(dir: string): number {
  if (!isCheckpointFolder(dir)) return 0;
  const bytes = folderBytes(dir);
  fs.rmSync(dir, { recursive: true, force: true });
  return bytes;
}

/** Deletes a folder left empty (an iteration's folder once its policies' checkpoints are gone); else leaves it. */
export function removeEmptyFolder(dir: string): void {
  try {
    if (fs.readdirSync(dir).length === 0) fs.rmdirSync(dir);
  } catch {
    // Gone already, or not readable: nothing to tidy.
  }
}
