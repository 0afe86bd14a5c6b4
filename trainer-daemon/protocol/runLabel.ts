/**
 * What a training run is called where people read it (the panel's groups, the run tab's title, the runs
 * list): what it trains and on which data, never its id alone; and which run a batch of rollouts belongs to,
 * read from the batch's id. Type imports only: the webview bundles this module too.
 */
import { assertNever } from './assert';
import type { TrainingRun } from './training';

/**
 * APO trains a prompt resource; GRPO and SFT a model: the tiny built-in one, or a Hugging Face name — with several
 * policies, their names after it: "Qwen/Qwen2.5-0.5B-Instruct [planner, solver]".
 */
export function trainedTarget(run: TrainingRun): string {
  switch (run.algorithm) {
    case 'apo':
      return run.config.resource;
    case 'grpo': {
      const model = run.config.model.kind === 'hf' ? run.config.model.name : run.config.model.kind;
      const { policies } = run.config;
      return policies.length ? `${model} [${policies.map((p) => p.name).join(', ')}]` : model;
    }
    case 'sft':
      return run.config.model.kind === 'hf' ? run.config.model.name : run.config.model.kind;
    default:
      return assertNever(run);
  }
}

/** "GRPO", "APO": an algorithm as a person writes it. */
export function algorithmName(algorithm: TrainingRun['algorithm']): string {
  return algorithm.toUpperCase();
}

/**
 * "GRPO tiny on sums", "APO system-prompt on cities": a run by its algorithm, what it trains and its dataset (an
 * SFT run may have none: "SFT tiny").
 */
export function runName(algorithm: TrainingRun['algorithm'], target: string, dataset: string | null): string {
  return `${algorithmName(algorithm)} ${target}${dataset === null ? '' : ` on ${dataset}`}`;
}

/** A training run's name (runName) read from its configuration. */
export function runLabel(run: TrainingRun): string {
  return runName(run.algorithm, trainedTarget(run), run.config.dataset);
}

/** A batch of a training run's: its run's id and, when numbered, its step (GRPO) or evaluation (APO). */
export interface RunBatch {
  readonly runId: string;
  readonly step: number | null;
}

/**
 * The run a batch id names: GRPO's `<run>-train-<step>` and `<run>-val-<step>` (grpoBatchId), APO's evaluations
 * `<run>-b<n>` and its optimizer's own calls `<run>-optimizer`; null for any other batch (a dataset run's). Whether
 * such a run exists is the caller's to check.
 */
export function runOfBatch(batchId: string): RunBatch | null {
  const parts = /^(.+)-(?:(?:train|val)-(\d+)|b(\d+)|optimizer)$/.exec(batchId);
  if (!parts) return null;
  const step = parts[2] ?? parts[3];
  return { runId: parts[1]!, step: step === undefined ? null : Number(step) };
}
