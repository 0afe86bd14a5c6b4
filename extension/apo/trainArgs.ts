/**
 * The settings **Optimize This Prompt** asks for, with defaults that suit a laptop, and the
 * `lightning train --algorithm apo … --json -- CMD` command line they become; and the reading of
 * that command's JSON lines (`training-started`, then `training-finished` with the result).
 * Pure, so it is unit-tested; the API key is never part of it (it goes through the environment).
 */
import { ApoResult, type ApoConfig } from '../../trainer-daemon/protocol';
import { parseCliLine } from '../../trainer-daemon/protocol/cliLines';

/** The tunable part of APO's configuration, as the quick picks show it. */
export type ApoSettings = Pick<
  ApoConfig,
  | 'beam'
  | 'branch'
  | 'rounds'
  | 'gradientBatch'
  | 'valBatch'
  | 'budgetCalls'
  | 'budgetRollouts'
  | 'critiqueModel'
  | 'editModel'
  | 'temperature'
  | 'concurrency'
>;

/** Small enough to finish in minutes on a laptop against a hosted model. */
export const LAPTOP_DEFAULTS: ApoSettings = {
  beam: 2,
  branch: 2,
  rounds: 2,
  gradientBatch: 4,
  valBatch: 8,
  budgetCalls: 40,
  budgetRollouts: 200,
  critiqueModel: 'gpt-4o-mini',
  editModel: 'gpt-4o-mini',
  temperature: 1,
  concurrency: 4,
};

/** Each setting's label and flag, in the order the Advanced… list shows them. */
export const SETTING_INFO: {
  readonly [K in keyof ApoSettings]: { readonly label: string; readonly flag: string; readonly detail: string };
} = {
  beam: { label: 'Beam width', flag: '--beam', detail: 'prompts kept after each round' },
  branch: { label: 'Branch factor', flag: '--branch', detail: 'new prompts per parent per round' },
  rounds: { label: 'Rounds', flag: '--rounds', detail: 'optimization rounds' },
  gradientBatch: {
    label: 'Gradient batch',
    flag: '--gradient-batch',
    detail: 'training rollouts the critique looks at',
  },
  valBatch: { label: 'Validation batch', flag: '--val-batch', detail: 'validation tasks per candidate per round' },
  budgetCalls: {
    label: 'LLM call budget',
    flag: '--budget-calls',
    detail: 'at most this many critique and edit calls',
  },
  budgetRollouts: { label: 'Rollout budget', flag: '--budget-rollouts', detail: 'at most this many agent runs' },
  critiqueModel: {
    label: 'Critique model',
    flag: '--critique-model',
    detail: 'writes the critiques (textual gradients)',
  },
  editModel: { label: 'Edit model', flag: '--edit-model', detail: 'rewrites the prompt from a critique' },
  temperature: { label: 'Temperature', flag: '--temperature', detail: 'of the critique and edit models' },
  concurrency: { label: 'Concurrency', flag: '--concurrency', detail: 'agents running at once' },
};

export interface TrainRequest {
  readonly storeFile: string;
  readonly resource: string;
  readonly dataset: string;
  /** Another dataset for validation; null: the `val` split of `dataset`. */
  readonly valDataset: string | null;
  readonly settings: ApoSettings;
  /** The agent loads the prompt from this file (a whole prompt file was chosen). */
  readonly promptFile: string | null;
  readonly agentArgv: readonly string[];
}

/** The CLI arguments (after `dist/cli.js`). */
export function trainArgs(request: TrainRequest): string[] {
  const settings = (Object.keys(SETTING_INFO) as (keyof ApoSettings)[]).flatMap((key) => [
    SETTING_INFO[key].flag,
    String(request.settings[key]),
  ]);
  return [
    'train',
    '--algorithm',
    'apo',
    '--json',
    '--store',
    request.storeFile,
    '--resource',
    request.resource,
    '--dataset',
    request.dataset,
    ...(request.valDataset ? ['--val', request.valDataset] : []),
    ...settings,
    ...(request.promptFile ? ['--prompt-file', request.promptFile] : []),
    '--',
    ...request.agentArgv,
  ];
}

/** The settings in one line, for the quick pick's "Start" item. */
export function describeSettings(settings: ApoSettings): string {
  return `beam ${settings.beam} · branch ${settings.branch} · ${settings.rounds} rounds · ≤ ${settings.budgetCalls} LLM calls · ≤ ${settings.budgetRollouts} rollouts · ${settings.critiqueModel}`;
}

/** A typed value for a setting, or an error message naming it. */
export function parseSetting<K extends keyof ApoSettings>(
  key: K,
  text: string,
): { ok: true; value: ApoSettings[K] } | { ok: false; message: string } {
  const current = LAPTOP_DEFAULTS[key];
  if (typeof current === 'string')
    return text.trim()
      ? { ok: true, value: text.trim() as ApoSettings[K] }
      : { ok: false, message: `${SETTING_INFO[key].label} must not be empty` };
  const value = Number(text);
  if (text.trim() === '' || !Number.isFinite(value))
    return { ok: false, message: `${SETTING_INFO[key].label} must be a number` };
  if (key === 'temperature')
    return value >= 0 && value <= 2
      ? { ok: true, value: value as ApoSettings[K] }
      : { ok: false, message: 'Temperature must be between 0 and 2' };
  return Number.isInteger(value) && value >= 1
    ? { ok: true, value: value as ApoSettings[K] }
    : { ok: false, message: `${SETTING_INFO[key].label} must be a whole number ≥ 1` };
}

export type TrainEvent =
  | { readonly event: 'training-started'; readonly runId: string }
  | { readonly event: 'training-finished'; readonly result: ApoResult };

/** One stdout line of `lightning train --json` (`protocol/cliLines.ts`), or undefined when it is not one of its events. */
export function parseTrainLine(line: string): TrainEvent | undefined {
  const parsed = parseCliLine(line);
  if (parsed?.event === 'training-started') return { event: 'training-started', runId: parsed.runId };
  if (parsed?.event !== 'training-finished') return undefined;
  const result = ApoResult.safeParse(parsed);
  return result.success ? { event: 'training-finished', result: result.data } : undefined;
}
