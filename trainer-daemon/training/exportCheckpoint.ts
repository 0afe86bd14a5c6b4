/**
 * `checkpoints/export`: a checkpoint written as a PEFT adapter or a Hugging Face model folder
 * (protocol/checkpoints.ts), by a trainer worker of its own (python/lightning_trainer/export.py: transformers +
 * peft rebuild the weights from the checkpoint's config.json). The checkpoint stays in use meanwhile, so retention
 * and `checkpoints/delete` leave it alone; the worker's refusals (the tiny policy, a PEFT export of a full
 * fine-tune, a folder that is not empty) come back as invalid input with its message.
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  runPolicies,
  weightsConfig,
  type Checkpoint,
  type ExportCheckpointParams,
  type ExportCheckpointResult,
  type TrainingRun,
} from '../protocol';
import { checkpointPolicy } from './grpoPolicies';
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
  // The schema accepts either platform's absolute form; this machine's rule decides (`C:\out` is relative on Linux).
  if (!path.isAbsolute(params.out))
    throw new InvalidInputError(
      `out must be an absolute path on the daemon's machine (got ${JSON.stringify(params.out)})`,
    );
  const checkpoint = training.checkpoint(params.id);
  if (!fs.existsSync(path.join(checkpoint.path, 'config.json'))) {
    throw new NotFoundError(
      `checkpoint ${checkpoint.id}'s files are missing: ${checkpoint.path} has no config.json (was the checkpoints folder moved or deleted?)`,
    );
  }
  const run = training.run(checkpoint.runId);
  const trained = weightsConfig(run);
  const adapters = params.set ? policySet(training, checkpoint, run, params.format) : undefined;
  const ids = adapters?.map((a) => a.id) ?? [checkpoint.id];
  return usingAll(training, ids, async () => {
    const started = performance.now();
    const python = await findPython(training.storeFile, params.python ?? trained?.python ?? undefined);
    const worker = await TrainerWorker.start({ python: python.executable, logger: logger.child(checkpoint.id) });
    try {
      const written = await worker.request('export', {
        ...(adapters
          ? { adapters: adapters.map(({ name, path: dir }) => ({ name, checkpoint: dir })) }
          : { checkpoint: checkpoint.path }),
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

/** Every checkpoint in `ids` stays in use (retention and delete leave it) while `job` runs. */
function usingAll<T>(training: TrainingService, ids: readonly string[], job: () => Promise<T>): Promise<T> {
  const [first, ...rest] = ids;
  return first === undefined ? job() : training.using(first, () => usingAll(training, rest, job));
}

/** `set`: each policy's checkpoint of `checkpoint`'s step, or why the set cannot be exported. */
function policySet(
  training: TrainingService,
  checkpoint: Checkpoint,
  run: TrainingRun,
  format: ExportCheckpointParams['format'],
): { name: string; id: string; path: string }[] {
  const policies = runPolicies(run);
  if (policies.length === 0)
    throw new InvalidInputError(
      `set: run ${run.id} trains one policy (no --policy): export checkpoint ${checkpoint.id} alone, without set`,
    );
  if (format !== 'peft')
    throw new InvalidInputError('set: the policies are exported as one PEFT folder with an adapter each: format peft');
  const atStep = training.checkpoints(run.id).filter((c) => c.step === checkpoint.step);
  return policies.map(({ name }) => {
    const own = atStep.find((c) => checkpointPolicy(c, policies) === name);
    if (!own)
      throw new NotFoundError(
        `set: policy ${name} has no checkpoint at step ${checkpoint.step} of run ${run.id} (retention deleted it?): export another step`,
      );
    return { name, id: own.id, path: own.path };
  });
}
