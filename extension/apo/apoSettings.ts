/**
 * The settings **Optimize This Prompt** asks for, with defaults that suit a laptop, and what `training/start` is sent:
 * the APO configuration they become (checked by the protocol's own ApoConfig schema, so what the editor sends is what
 * the daemon accepts) and the agent's launch configuration variables for this start only (never stored: a key among
 * them reaches the agents without being written anywhere). Pure: unit-tested.
 */
import {
  ApoConfig,
  describeIssues,
  userUpstream,
  type ApoConfigInput,
  type StartEnv,
} from '../../trainer-daemon/protocol';
import { commandEnvironment, type AgentCommand } from '../debug/launchCommand';
import type { Parsed } from '../training/grpoSettings';
import { storableEnv } from '../training/grpoSettings';

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

/** Each setting's label, in the order the Advanced… list shows them. */
export const SETTING_INFO: {
  readonly [K in keyof ApoSettings]: { readonly label: string; readonly detail: string };
} = {
  beam: { label: 'Beam width', detail: 'prompts kept after each round' },
  branch: { label: 'Branch factor', detail: 'new prompts per parent per round' },
  rounds: { label: 'Rounds', detail: 'optimization rounds' },
  gradientBatch: { label: 'Gradient batch', detail: 'training rollouts the critique looks at' },
  valBatch: { label: 'Validation batch', detail: 'validation tasks per candidate per round' },
  budgetCalls: { label: 'LLM call budget', detail: 'at most this many critique and edit calls' },
  budgetRollouts: { label: 'Rollout budget', detail: 'at most this many agent runs' },
  critiqueModel: { label: 'Critique model', detail: 'writes the critiques (textual gradients)' },
  editModel: { label: 'Edit model', detail: 'rewrites the prompt from a critique' },
  temperature: { label: 'Temperature', detail: 'of the critique and edit models' },
  concurrency: { label: 'Concurrency', detail: 'agents running at once' },
};

export interface ApoRequest {
  readonly resource: string;
  readonly dataset: string;
  /** Another dataset for validation; null: the `val` split of `dataset`. */
  readonly valDataset: string | null;
  readonly settings: ApoSettings;
  /** The agent loads the prompt from this file (a whole prompt file was chosen). */
  readonly promptFile: string | null;
  /** The launch configuration run as a command. */
  readonly agent: AgentCommand;
  /** The editor's environment (the agent's OPENAI_BASE_URL, when it has one, is where its calls go). */
  readonly processEnv: Readonly<Record<string, string | undefined>>;
}

/**
 * The run's configuration, checked by the protocol's schema (the message names the field): the launch
 * configuration's variables that may be stored go with its command (as Start Training's), its own OPENAI_BASE_URL
 * (else the editor's) is the upstream of the agents and the optimizer, null: the daemon's.
 */
export function apoConfig(request: ApoRequest): Parsed<ApoConfig> {
  const { env } = storableEnv(request.agent.env);
  const input: ApoConfigInput = {
    algorithm: 'apo',
    command: {
      argv: [...request.agent.argv],
      cwd: request.agent.cwd,
      ...(Object.keys(env).length ? { env } : {}),
    },
    upstream: userUpstream(commandEnvironment(request.agent, request.processEnv)),
    resource: request.resource,
    dataset: request.dataset,
    valDataset: request.valDataset,
    ...request.settings,
    promptFile: request.promptFile,
  };
  const parsed = ApoConfig.safeParse(input);
  return parsed.success
    ? { ok: true, value: parsed.data }
    : { ok: false, message: describeIssues(parsed.error, 'config') };
}

/** The launch configuration's variables, all of them (secrets too, an unset as null), for this start's agents only. */
export function apoStartEnv(agent: AgentCommand): StartEnv {
  return Object.fromEntries(Object.entries(agent.env).map(([name, value]) => [name, value ?? null]));
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
