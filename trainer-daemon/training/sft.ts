/**
 * SFT, supervised fine-tuning on good rollouts (protocol/sft.ts): the rows are read from the store when the run
 * starts (training/sftRows.ts: the chat export's rows of the rollouts rated at least `minReward`, a share held out),
 * the trainer worker loads the policy (LoRA on a Hugging Face model, or the tiny policy) and runs its `sft` method one
 * epoch at a time (cross-entropy on the completion tokens, the prompt masked out), then `evaluate` on the held-out
 * rows (loss, greedy exact match) and `save`: one checkpoint per epoch, recorded as a step with its metrics, retention
 * applied as GRPO's. Step 0 records the rows and the base policy's validation. A resumed run continues after its
 * newest checkpoint (which keeps the optimizer state) with the same split: written beside the run's checkpoints
 * (`split.json`) before its first epoch, read back on resume.
 */
import fs from 'node:fs';
import path from 'node:path';
import { describeSkipped, sftLearningRate, skippedCallMetrics, type SftConfig, type SftExample } from '../protocol';
import { ensurePrivateDir, writeFileAtomically } from '../util/privateFiles';
import { InvalidInputError } from '../protocol/errors';
import type { Logger } from '../log';
import { retain } from './grpo';
import { stepSeed } from './grpoUpdate';
import { findPython } from './python';
import type { TrainingService } from './service';
import { noRowsMessage, sftRows, SFT_ROLLOUT_STATUSES, type SftRows, type SftSplit } from './sftRows';
import { TrainerWorker } from './worker';

/** Held-out rows decoded greedily for the accuracy per epoch; the loss covers every held-out row. */
export const SFT_VAL_GENERATIONS = 64;

export interface SftContext {
  readonly training: TrainingService;
  readonly logger: Logger;
  readonly signal: AbortSignal;
}

/**
 * The run's rows from the store (`earlier`: the split it started with); refused, naming the flags to change, when
 * there is nothing to train on.
 */
export function readSftRows(training: TrainingService, config: SftConfig, earlier?: SftSplit): SftRows {
  const rows = sftRows(
    training.rolloutTrajectories({
      status: [...SFT_ROLLOUT_STATUSES],
      ...(config.mode === null ? {} : { mode: config.mode }),
      ...(config.label === null ? {} : { label: config.label }),
      ...(config.dataset === null ? {} : { dataset: config.dataset }),
    }),
    config,
    earlier,
  );
  if (rows.train.length === 0) throw new InvalidInputError(noRowsMessage(rows, config));
  return rows;
}

async function validation(worker: TrainerWorker, val: readonly SftExample[]): Promise<Record<string, number>> {
  if (val.length === 0) return {};
  const result = await worker.request('evaluate', { examples: [...val], generate: SFT_VAL_GENERATIONS });
  return {
    'val/loss': result.loss,
    ...(result.accuracy === null ? {} : { 'val/accuracy': result.accuracy }),
  };
}

/** Where a run keeps its split: beside its checkpoints (`.lightning/checkpoints/<run>/split.json`). */
function splitFile(training: TrainingService, runId: string): string {
  return path.join(path.dirname(training.checkpointDir(runId, 0)), 'split.json');
}

/** The split the run started with, or undefined for a new run (or one started before runs kept theirs). */
function earlierSplit(file: string): SftSplit | undefined {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    // No file: a run from before runs kept theirs. Any other failure is not a reason to draw anew.
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  let split: Partial<SftSplit> | null;
  try {
    split = JSON.parse(text) as Partial<SftSplit> | null;
  } catch {
    split = null;
  }
  const ids = (list: unknown): list is string[] => Array.isArray(list) && list.every((id) => typeof id === 'string');
  if (!ids(split?.train) || !ids(split.val))
    throw new InvalidInputError(`${file}: not an SFT run's split ({train: [...], val: [...]}); delete it to draw anew`);
  return { train: split.train, val: split.val };
}

/**
 * Runs (or, with a checkpoint, continues) SFT run `runId` to its last epoch or until `ctx.signal` aborts. The caller
 * owns the run's status; this throws on failure (with the worker's traceback).
 */
export async function runSft(runId: string, config: SftConfig, ctx: SftContext): Promise<void> {
  const file = splitFile(ctx.training, runId);
  const earlier = ctx.training.checkpoints(runId).length > 0 ? earlierSplit(file) : undefined;
  const rows = readSftRows(ctx.training, config, earlier);
  if (!earlier) {
    ensurePrivateDir(path.dirname(file));
    writeFileAtomically(file, `${JSON.stringify(rows.split)}\n`, "the run's split");
  }
  ctx.logger.info('sft rows', {
    runId,
    train: rows.train.length,
    val: rows.val.length,
    trainRollouts: rows.trainRollouts,
    valRollouts: rows.valRollouts,
  });
  // What the rows left out, and why, as `lightning export --format chat` says it (and GRPO each step).
  const left = [
    describeSkipped(rows.report.skipped),
    ...Object.entries(rows.notChat).map(([why, count]) => `${count} call(s) with no chat row (${why})`),
  ].filter((line): line is string => line !== null);
  for (const line of left) ctx.logger.info(`SFT rows: ${line}`, { runId });
  const python = await findPython(ctx.training.storeFile, config.python ?? undefined);
  const worker = await TrainerWorker.start({ python: python.executable, logger: ctx.logger.child('worker') });
  const stop = (): void => worker.dispose();
  ctx.signal.addEventListener('abort', stop, { once: true });
  try {
    const last = ctx.training.checkpoints(runId).at(-1);
    const adapter =
      config.adapter ?? (config.model.kind === 'tiny' ? { kind: 'full' as const } : { kind: 'lora' as const });
    const lr = sftLearningRate(config);
    const loaded = await worker.request('load', {
      model: config.model,
      adapter,
      optimizer: { lr },
      device: config.device,
      seed: config.seed,
      ...(config.device === 'cuda' ? {} : { threads: 1 }),
      ...(last ? { checkpoint: last.path } : {}),
    });
    ctx.logger.info('policy loaded', { runId, ...loaded });
    if (!last) {
      await ctx.training.recordStep(runId, 0, {
        parameters: loaded.parameters,
        trainable: loaded.trainable,
        lr,
        'rows/train': rows.train.length,
        'rows/val': rows.val.length,
        'rollouts/train': rows.trainRollouts,
        'rollouts/val': rows.valRollouts,
        // Calls left out of the rows: not whole answers, and no chat form (a reply cut at its token cap among them).
        ...skippedCallMetrics(rows.report.skipped),
        'skipped/noChatRow': Object.values(rows.notChat).reduce((sum, count) => sum + count, 0),
        ...(await validation(worker, rows.val)),
      });
    }
    for (let epoch = (last?.step ?? 0) + 1; epoch <= config.epochs && !ctx.signal.aborted; epoch += 1) {
      // One pass in a fresh order per epoch, seeded by the run's seed and the epoch: a resumed run draws the same.
      const sft = await worker.request('sft', {
        examples: rows.train,
        epochs: 1,
        batchSize: config.batchSize,
        seed: stepSeed(config.seed, epoch),
      });
      const metrics: Record<string, number> = {
        loss: sft.meanLoss ?? sft.loss,
        steps: sft.steps,
        'train/seconds': sft.seconds,
        ...(sft.tokens === undefined ? {} : { tokensPerSecond: sft.tokens / Math.max(sft.seconds, 1e-9) }),
        ...(await validation(worker, rows.val)),
      };
      const dir = ctx.training.checkpointDir(runId, epoch);
      await worker.request('save', { dir, metrics });
      await ctx.training.recordStep(runId, epoch, metrics, { dir, metrics });
      await retain(ctx, runId, config);
    }
  } catch (error) {
    // A cancel stops the worker under a pending request: that is the cancel, not a failure.
    if (!ctx.signal.aborted) throw error;
  } finally {
    ctx.signal.removeEventListener('abort', stop);
    await worker.shutdown();
  }
}
