/**
 * Supervised fine-tuning on good rollouts (`lightning train --algorithm sft`, the editor's **Start Training →
 * Fine-tune on Good Rollouts**): the rows are the chat examples `lightning export --format chat` writes for the
 * rollouts whose episode reward is at least `minReward` (tool calls included), the trainer worker's `sft` method
 * trains on them (cross-entropy on the completion tokens only: the prompt is masked out), a held-out share of the
 * rollouts validates each epoch, and each epoch saves a checkpoint as a GRPO iteration does (retention applies).
 */
import { z } from 'zod';
import { RolloutMode } from './records';
import { AdapterSpec, ModelSpec } from './trainer';
import { DEFAULT_KEEP_CHECKPOINTS, KeepCheckpoints } from './checkpoints';

/** A rollout rated Good in the editor (👍) has reward 1: by default only those, and better, train. */
export const DEFAULT_SFT_MIN_REWARD = 1;

export const SftConfig = z.strictObject({
  algorithm: z.literal('sft'),
  model: ModelSpec,
  /** Full fine-tuning for the tiny model, LoRA for Hugging Face models, unless given (as GRPO). */
  adapter: AdapterSpec.optional(),
  /** Rollouts whose episode reward is at least this train (`lightning export --min-reward`); default 1 (Good). */
  minReward: z.number().finite().default(DEFAULT_SFT_MIN_REWARD),
  /** The reward dimension read as the episode reward (`lightning export --reward-name`). */
  rewardName: z.string().min(1).default('reward'),
  /** Only rollouts of this dataset (name or id); null: rollouts of any dataset, or of none. */
  dataset: z.string().min(1).nullable().default(null),
  /** Only rollouts with this label; null: any. */
  label: z.string().min(1).nullable().default(null),
  /** Only rollouts of this mode (debug, train, …); null: any. */
  mode: RolloutMode.nullable().default(null),
  /** Only the LLM calls of agents whose name matches this regular expression; null: every call. */
  agent: z
    .string()
    .min(1)
    .max(1_000)
    .refine((source) => {
      try {
        new RegExp(source);
        return true;
      } catch {
        return false;
      }
    }, 'not a regular expression')
    .nullable()
    .default(null),
  /**
   * The share of the rollouts held out for validation (split by rollout, so one rollout's calls never sit on both
   * sides; at least one when > 0 and there are two or more); 0: no validation.
   */
  valFraction: z.number().min(0).max(0.5).default(0.1),
  /** Passes over the training rows; each ends with a validation and a checkpoint. */
  epochs: z.number().int().min(1).max(1_000).default(3),
  /** Rows per optimizer step. */
  batchSize: z.number().int().min(1).max(4_096).default(8),
  /** null: by the model (sftLearningRate). */
  lr: z.number().positive().max(1).nullable().default(null),
  seed: z.number().int().default(0),
  device: z.enum(['auto', 'cpu', 'cuda']).default('auto'),
  /** The Python that runs the worker; null: found as `lightning doctor` does. */
  python: z.string().nullable().default(null),
  /**
   * Retention as GRPO's (training/retention.ts): the best by validation loss, the last N, optimizer state in the
   * newest.
   */
  keepCheckpoints: KeepCheckpoints.default(DEFAULT_KEEP_CHECKPOINTS),
});
export type SftConfig = z.infer<typeof SftConfig>;
export type SftConfigInput = z.input<typeof SftConfig>;

/**
 * The learning rate an SFT run uses when none is given: 1e-3 for the tiny policy (full fine-tuning of a small
 * model from scratch, GRPO's warm-start rate), 2e-4 for LoRA on a Hugging Face model (the PEFT recipes' rate),
 * 2e-5 for a full fine-tune of one (TRL's SFTTrainer default).
 */
export function sftLearningRate(config: Pick<SftConfig, 'lr' | 'model' | 'adapter'>): number {
  if (config.lr !== null) return config.lr;
  if (config.model.kind === 'tiny') return 1e-3;
  return (config.adapter?.kind ?? 'lora') === 'lora' ? 2e-4 : 2e-5;
}
