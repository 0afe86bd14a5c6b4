/**
 * What **Start Training → Fine-tune on Good Rollouts** asks for, and the SFT configuration the answers become
 * (protocol/sft.ts): the base model (as GRPO's), which rollouts train (those rated at least the minimum reward,
 * of one dataset or any), and the settings — epochs, learning rate (by the model unless given), the share held out
 * for validation, device — with the protocol's defaults. Each typed answer is checked with a message naming it, and
 * the whole by the protocol's own SftConfig schema. Pure: unit-tested.
 */
import {
  describeIssues,
  SftConfig,
  sftLearningRate,
  type KeepCheckpoints,
  type ModelSpec,
  type SftConfigInput,
} from '../../trainer-daemon/protocol';
import type { Parsed } from './grpoSettings';

/** The settings the quick picks show, as SftConfig names them. */
export interface SftSettings {
  readonly minReward: number;
  /** Only this dataset's rollouts; null: any rated rollout. */
  readonly dataset: string | null;
  readonly epochs: number;
  /** null: by the model (sftLearningRate). */
  readonly lr: number | null;
  readonly valFraction: number;
  readonly device: SftConfig['device'];
}

/** The daemon's own defaults, so starting with them starts what `lightning train --algorithm sft` would. */
export const DEFAULT_SFT_SETTINGS: SftSettings = (() => {
  const parsed = SftConfig.parse({ algorithm: 'sft', model: { kind: 'tiny' } });
  return {
    minReward: parsed.minReward,
    dataset: parsed.dataset,
    epochs: parsed.epochs,
    lr: parsed.lr,
    valFraction: parsed.valFraction,
    device: parsed.device,
  };
})();

/** The numeric settings a user types: each one's label, help and check. */
export const SFT_NUMERIC_SETTINGS = {
  minReward: {
    label: 'Minimum reward',
    detail: 'train on the rollouts whose reward is at least this (Good in the panel is 1)',
    check: (value: number) => (Number.isFinite(value) ? undefined : 'Minimum reward must be a number'),
  },
  epochs: {
    label: 'Epochs',
    detail: 'passes over the rows; each ends with a validation and a checkpoint',
    check: (value: number) =>
      Number.isInteger(value) && value >= 1 && value <= 1000
        ? undefined
        : 'Epochs must be a whole number from 1 to 1000',
  },
  lr: {
    label: 'Learning rate',
    detail: 'empty: by the model (1e-3 tiny, 2e-4 LoRA, 2e-5 a full fine-tune)',
    check: (value: number) => (value > 0 && value <= 1 ? undefined : 'Learning rate must be above 0 and at most 1'),
  },
  valFraction: {
    label: 'Held out for validation',
    detail: 'the share of the rated rollouts each epoch is validated on (0 to 0.5; 0: none)',
    check: (value: number) =>
      value >= 0 && value <= 0.5 ? undefined : 'Held out for validation must be from 0 to 0.5',
  },
} as const;
export type SftNumericSetting = keyof typeof SFT_NUMERIC_SETTINGS;

/** A typed value of a numeric setting (an empty learning rate: by the model), or a message naming the setting. */
export function parseSftSetting(key: SftNumericSetting, text: string): Parsed<number | null> {
  const info = SFT_NUMERIC_SETTINGS[key];
  if (key === 'lr' && text.trim() === '') return { ok: true, value: null };
  const value = Number(text.trim());
  if (text.trim() === '' || !Number.isFinite(value)) return { ok: false, message: `${info.label} must be a number` };
  const problem = info.check(value);
  return problem ? { ok: false, message: problem } : { ok: true, value };
}

/** The settings in one line, for the quick pick's "Start" item. */
export function describeSftSettings(settings: SftSettings, model: ModelSpec): string {
  const lr = sftLearningRate({ lr: settings.lr, model, adapter: undefined });
  return [
    `rollouts rated ≥ ${settings.minReward}${settings.dataset ? ` of ${settings.dataset}` : ''}`,
    `${settings.epochs} epochs`,
    `lr ${lr}${settings.lr === null ? ' (by the model)' : ''}`,
    `${Math.round(settings.valFraction * 100)}% held out`,
    `device ${settings.device}`,
  ].join(' · ');
}

/** The run's configuration, checked by the protocol's schema (the message names the field). */
export function sftConfig(choices: {
  readonly model: ModelSpec;
  readonly settings: SftSettings;
  readonly keepCheckpoints?: KeepCheckpoints;
}): Parsed<SftConfig> {
  const input: SftConfigInput = {
    algorithm: 'sft',
    model: choices.model,
    ...choices.settings,
    ...(choices.keepCheckpoints === undefined ? {} : { keepCheckpoints: choices.keepCheckpoints }),
  };
  const parsed = SftConfig.safeParse(input);
  return parsed.success
    ? { ok: true, value: parsed.data }
    : { ok: false, message: describeIssues(parsed.error, 'config') };
}
