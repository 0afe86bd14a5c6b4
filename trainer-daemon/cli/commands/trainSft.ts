/**
 * `lightning train --algorithm sft --model tiny|HF_NAME [--min-reward R] [--dataset D] [--epochs N] …`: flags → SFT
 * configuration (protocol/sft.ts; errors name the flag); starts the run in the store's daemon (or one started here),
 * which fine-tunes on the rollouts rated at least R (training/sft.ts), prints a row per epoch and the checkpoints at
 * the end; Ctrl-C cancels, `--resume RUN` continues after the last checkpoint. No agent command: SFT learns from
 * rollouts already recorded.
 */
import { describeIssues, SftConfig, type SftConfigInput } from '../../protocol';
import { parseKeepCheckpoints } from '../../protocol/checkpoints';
import { InvalidInputError } from '../../protocol/errors';
import type { GlobalOptions } from '../options';
import { startAndReport } from './trainGrpo';

export interface SftFlags extends GlobalOptions {
  algorithm: 'sft';
  model?: string;
  fromConfig?: boolean;
  lora?: boolean;
  dataset?: string;
  label?: string;
  mode?: SftConfig['mode'];
  agent?: string;
  minReward?: string;
  rewardName?: string;
  valFraction?: string;
  epochs?: string;
  batchSize?: string;
  lr?: string;
  seed?: string;
  device?: SftConfig['device'];
  python?: string;
  resume?: string;
  keepCheckpoints?: string;
}

/** Config keys → the flag a user typed. */
const FLAGS: Record<string, string> = {
  model: '--model',
  adapter: '--lora',
  minReward: '--min-reward',
  rewardName: '--reward-name',
  dataset: '--dataset',
  label: '--label',
  mode: '--mode',
  agent: '--agent',
  valFraction: '--val-fraction',
  epochs: '--epochs',
  batchSize: '--batch-size',
  lr: '--lr',
  seed: '--seed',
  device: '--device',
  python: '--python',
  keepCheckpoints: '--keep-checkpoints',
};

/** A flag's number; text that is not one stays text, so the schema names the flag; absent: the schema's default. */
const number = (value: string | undefined): number | string | undefined =>
  value === undefined || value.trim() === '' || !Number.isFinite(Number(value)) ? value : Number(value);

/** The run's config from the flags, checked by the protocol schema (errors name the flag). */
export function sftConfigFromFlags(options: SftFlags): SftConfig {
  if (!options.model)
    throw new InvalidInputError('--model is required: tiny (the built-in policy) or a Hugging Face model name or path');
  const keep = options.keepCheckpoints === undefined ? undefined : parseKeepCheckpoints(options.keepCheckpoints);
  if (typeof keep === 'object') throw new InvalidInputError(`--${keep.error}`);
  const input: { [K in keyof SftConfigInput]: unknown } = {
    algorithm: 'sft',
    model:
      options.model === 'tiny'
        ? { kind: 'tiny' }
        : { kind: 'hf', name: options.model, ...(options.fromConfig ? { fromConfig: true } : {}) },
    ...(options.lora ? { adapter: { kind: 'lora' as const } } : {}),
    minReward: number(options.minReward),
    rewardName: options.rewardName,
    dataset: options.dataset ?? null,
    label: options.label ?? null,
    mode: options.mode ?? null,
    agent: options.agent ?? null,
    valFraction: number(options.valFraction),
    epochs: number(options.epochs),
    batchSize: number(options.batchSize),
    lr: number(options.lr) ?? null,
    seed: number(options.seed),
    device: options.device,
    python: options.python ?? null,
    keepCheckpoints: keep,
  };
  const parsed = SftConfig.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const key = String(issue.path[0] ?? '');
    throw new InvalidInputError(`${FLAGS[key] ?? key}: ${describeIssues(parsed.error, '').replace(/^[^:]*: /, '')}`);
  }
  return parsed.data;
}

export async function runSftCommand(argv: string[], options: SftFlags): Promise<void> {
  if (argv.length > 0)
    throw new InvalidInputError(
      `--algorithm sft fine-tunes on rollouts already recorded and rated: give no agent command (got: ${argv.join(' ')})`,
    );
  await startAndReport(options.resume ? { resume: options.resume } : { config: sftConfigFromFlags(options) }, options);
}
