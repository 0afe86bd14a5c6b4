/**
 * `checkpoints/export`: a checkpoint written as a PEFT adapter or a Hugging Face model folder
 * (protocol/checkpoints.ts), by a trainer worker of its own (python/lightning_trainer/export.py: transformers +
 * peft rebuild the weights from the checkpoint's config.json). The checkpoint stays in use meanwhile, so retention
 * and `checkpoints/delete` leave it alone; the worker's refusals (the tiny policy, a PEFT export of a full
 * fine-tune, a folder that is not empty) come back as invalid input with its message.
 */
import fs from 'node:fs';
import path from 'node:path';
import { weightsConfig, type ExportCheckpointParams, type ExportCheckpointResult } from '../protocol';
import { InvalidInputError, NotFoundError } from '../protocol/errors';
import type { Logger } from '../log';
import type { TrainingService } from './service';
import { findPython } from './python';
import { TrainerWorker, WorkerError } from './worker';

export async function exportCheckpoint(
  training: TrainingService,
  logger: Logger,
  params: ExportCheckpointParams,
): Promise<ExportCheckpointResult> {
  const checkpoint = training.checkpoint(params.id);
  if (!fs.existsSync(path.join(checkpoint.path, 'config.json'))) {
    throw new NotFoundError(
      `checkpoint ${checkpoint.id}'s files are missing: ${checkpoint.path} has no config.json (was the checkpoints folder moved or deleted?)`,
    );
  }
  const run = training.run(checkpoint.runId);
  const trained = weightsConfig(run);
  return training.using(checkpoint.id, async () => {
    const started = performance.now();
    const python = await findPython(training.storeFile, params.python ?? trained?.python ?? undefined);
    const worker = await TrainerWorker.start({ python: python.executable, logger: logger.child(checkpoint.id) });
    try {
      const written = await worker.request('export', {
        checkpoint: checkpoint.path,
        format: params.format,
        out: params.out,
      });
      logger.info('exported checkpoint', {
        checkpointId: checkpoint.id,
        format: params.format,
        path: written.path,
        bytes: written.bytes,
      });
      return { checkpointId: checkpoint.id, ...written, seconds: (performance.now() - started) / 1000 };
    } catch (error) {
      if (error instanceof WorkerError && error.kind === 'bad_params') throw new InvalidInputError(error.message);
      throw error;
    } finally {
      await worker.shutdown();
    }
  });
}
