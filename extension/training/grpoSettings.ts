/**
 * What **Lightning: Start Training** asks for, and the GRPO configuration the answers become: the
 * base model (`tiny`, a Hugging Face name or path), the dataset, the agent command (a launch
 * configuration made into a command by debug/launchCommand.ts), and the settings — iterations,
 * samples per task, learning rate, validation dataset, device — with the protocol's defaults. Each
 * typed answer is checked with a message naming it, and the whole is checked by the protocol's own
 * GrpoConfig schema, so what the editor sends is what the daemon accepts. Pure: unit-tested.
 */
import {
  describeIssues,
  GrpoConfig,
  type GrpoConfigInput,
  type KeepCheckpoints,
  type ModelSpec,
  type PolicySpecInput,
} from '../../trainer-daemon/protocol';
import { isSecretVariable } from '../../trainer-daemon/protocol/secrets';
import type { AgentCommand } from '../debug/launchCommand';

/** The settings the quick picks show, as GrpoConfig names them. */
export interface GrpoSettings {
  readonly iterations: number;
  readonly samples: number;
  readonly lr: number;
  /** Another dataset to validate on; null: the training dataset's `val` split. */
  readonly valDataset: string | null;
  readonly device: GrpoConfig['device'];
}

/** The daemon's own defaults (GrpoConfig), so "Start with defaults" starts what `lightning train` would. */
export const DEFAULT_SETTINGS: GrpoSettings = (() => {
  const parsed = GrpoConfig.parse({ model: { kind: 'tiny' }, dataset: 'd', command: { argv: ['agent'], cwd: '/' } });
  return {
    iterations: parsed.iterations,
    samples: parsed.samples,
    lr: parsed.lr,
    valDataset: parsed.valDataset,
    device: parsed.device,
  };
})();

export type Parsed<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly message: string };

/** The numeric settings a user types: each one's label, check and help. */
export const NUMERIC_SETTINGS = {
  iterations: {
    label: 'Iterations',
    detail: 'rollouts → update → checkpoint, this many times',
    integer: true,
    min: 1,
    max: 100_000,
  },
  samples: {
    label: 'Samples per task',
    detail: 'rollouts of each task per iteration (the GRPO group: at least 2)',
    integer: true,
    min: 2,
    max: 256,
  },
  lr: {
    label: 'Learning rate',
    detail: 'of the optimizer (e.g. 3e-4; LoRA on a Hugging Face model: 1e-5 … 1e-4)',
    integer: false,
    min: Number.MIN_VALUE,
    max: 1,
  },
} as const;
export type NumericSetting = keyof typeof NUMERIC_SETTINGS;

/** A typed value of a numeric setting, or a message naming the setting and what it must be. */
export function parseNumericSetting(key: NumericSetting, text: string): Parsed<number> {
  const info = NUMERIC_SETTINGS[key];
  const value = Number(text.trim());
  if (text.trim() === '' || !Number.isFinite(value)) return { ok: false, message: `${info.label} must be a number` };
  if (info.integer && !Number.isInteger(value)) return { ok: false, message: `${info.label} must be a whole number` };
  if (value < info.min || value > info.max) {
    if (key === 'samples')
      return {
        ok: false,
        message: 'Samples per task must be at least 2 (GRPO compares the rollouts of a task) and at most 256',
      };
    return {
      ok: false,
      message:
        key === 'lr'
          ? 'Learning rate must be above 0 and at most 1'
          : `${info.label} must be from ${info.min} to ${info.max}`,
    };
  }
  return { ok: true, value };
}

/** `tiny` is the built-in policy; anything else is a Hugging Face hub id or a local model folder. */
export function modelSpec(name: string): Parsed<ModelSpec> {
  const trimmed = name.trim();
  if (trimmed === '')
    return {
      ok: false,
      message: 'Give a model: tiny, a Hugging Face name (Qwen/Qwen2.5-0.5B-Instruct) or a local folder',
    };
  if (/\s/.test(trimmed)) return { ok: false, message: `"${trimmed}" is not a model name (no spaces)` };
  return { ok: true, value: trimmed === 'tiny' ? { kind: 'tiny' } : { kind: 'hf', name: trimmed } };
}

/** The settings in one line, for the quick pick's "Start" item. */
export function describeSettings(settings: GrpoSettings): string {
  return `${settings.iterations} iterations · ${settings.samples} samples per task · lr ${settings.lr} · validation: ${settings.valDataset ?? 'the val split'} · device ${settings.device}`;
}

/** The launch configuration's variables a run may store, and the names left out (secrets). */
export function storableEnv(env: AgentCommand['env']): { env: Record<string, string>; omitted: string[] } {
  const kept: Record<string, string> = {};
  const omitted: string[] = [];
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) continue;
    if (isSecretVariable(name, value)) omitted.push(name);
    else kept[name] = value;
  }
  return { env: kept, omitted };
}

export interface TrainingChoices {
  readonly model: ModelSpec;
  /** Dataset name (or id). */
  readonly dataset: string;
  readonly command: AgentCommand;
  readonly settings: GrpoSettings;
  /** Several policies (a Hugging Face model only), one LoRA adapter each; empty or absent: one. */
  readonly policies?: readonly PolicySpecInput[];
  /** The `lightning.training.keepCheckpoints` setting (retention); absent: the daemon's default. */
  readonly keepCheckpoints?: KeepCheckpoints;
}

/** The run's configuration, checked by the protocol's schema (the message names the field). */
export function grpoConfig(choices: TrainingChoices): Parsed<GrpoConfig> {
  const { env } = storableEnv(choices.command.env);
  const input: GrpoConfigInput = {
    algorithm: 'grpo',
    model: choices.model,
    dataset: choices.dataset,
    ...choices.settings,
    ...(choices.policies?.length ? { policies: [...choices.policies] } : {}),
    ...(choices.keepCheckpoints === undefined ? {} : { keepCheckpoints: choices.keepCheckpoints }),
    command: { argv: [...choices.command.argv], cwd: choices.command.cwd, ...(Object.keys(env).length ? { env } : {}) },
  };
  const parsed = GrpoConfig.safeParse(input);
  return parsed.success
    ? { ok: true, value: parsed.data }
    : { ok: false, message: describeIssues(parsed.error, 'config') };
}
