/**
 * Versioned resources (prompt templates an agent reads at run time) and Automatic Prompt
 * Optimization (APO): the RPC shapes both ends import, the algorithm's configuration as the CLI and
 * the editor give it, and its leaderboard of candidates.
 */
import { z } from 'zod';
import { EpochMs, Json, Resource } from './records';
import { RunCommand } from './runCommand';
import { isSecretVariable } from './secrets';

export const ResourceName = z
  .string()
  .regex(
    /^[A-Za-z][A-Za-z0-9_.-]{0,99}$/,
    'a resource name starts with a letter and has only letters, digits, _ . - (at most 100)',
  );

/** `{name}` placeholders of a prompt template: filled by the agent, kept by every edit. */
export const PLACEHOLDER = /\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

/** The distinct placeholder names of a template, sorted. */
export function placeholders(template: string): string[] {
  return [...new Set([...template.matchAll(PLACEHOLDER)].map((match) => match[1]!))].sort();
}

const putFields = {
  name: ResourceName,
  /** Make this version the one agents get (default); false keeps it as a version only (APO candidates). */
  current: z.boolean().default(true),
  /** The training run that made it, when one did. */
  runId: z.string().min(1).max(200).nullable().default(null),
};

/** A new version of a resource: a prompt template (text with `{name}` placeholders) or any JSON value. */
export const PutResourceParams = z.discriminatedUnion('kind', [
  z.strictObject({
    ...putFields,
    kind: z.literal('prompt_template'),
    value: z.string().min(1, 'a prompt template must not be empty').max(200_000),
  }),
  z.strictObject({ ...putFields, kind: z.literal('json'), value: Json }),
]);
export type PutResourceParams = z.input<typeof PutResourceParams>;

export const ResourceSummary = z.object({
  name: z.string(),
  kind: z.string(),
  currentVersion: z.number().int().positive(),
  latestVersion: z.number().int().positive(),
  versions: z.number().int().positive(),
});
export type ResourceSummary = z.infer<typeof ResourceSummary>;

export const GetResourceParams = z.strictObject({
  name: ResourceName,
  /** Default: the current version. */
  version: z.number().int().positive().optional(),
});

export const ResourceVersions = z.object({
  resource: Resource,
  /** Every version of the resource, oldest first (values left out: get one by version). */
  versions: z.array(Resource.omit({ value: true })),
});
export type ResourceVersions = z.infer<typeof ResourceVersions>;

/** What an agent gets from `GET $LIGHTNING_URL/resources` and in `LIGHTNING_RESOURCES`. */
export const AgentResources = z.object({
  resources: z.record(z.string(), z.object({ version: z.number().int().positive(), kind: z.string(), value: Json })),
});
export type AgentResources = z.infer<typeof AgentResources>;

const count = (max: number) => z.number().int().min(1).max(max);

/**
 * APO's configuration: what `lightning train --algorithm apo` and the editor's quick picks set; the daemon runs it
 * (`training/start`).
 */
export const ApoConfig = z.strictObject({
  algorithm: z.literal('apo'),
  /** The agent the candidates are scored with: run once per rollout (or as `workers`), in `cwd`. */
  command: RunCommand,
  /**
   * Where the agents' and the optimizer's LLM calls go: the user's own OPENAI_BASE_URL (or `--upstream`); null: the
   * daemon's upstream. Stored with the run, so a URL with a password in it is refused.
   */
  upstream: z
    .string()
    .regex(/^https?:\/\/[^\s/?#]+/i, 'upstream must be an http(s) URL, e.g. http://127.0.0.1:11434/v1')
    .refine(
      (url) => !isSecretVariable('upstream', url),
      'an upstream URL with a password in it is not stored with a run',
    )
    .nullable()
    .default(null),
  /** The prompt template resource to optimize (its current version is the seed). */
  resource: ResourceName,
  /** Training tasks: the dataset's `train` split (all of it when it has none). */
  dataset: z.string().min(1, 'dataset must not be empty'),
  /** Validation tasks: this dataset (its `val` split, or all of it); default: the `val` split of `dataset`. */
  valDataset: z.string().min(1).nullable().default(null),
  /** Prompts kept after each round. */
  beam: count(16).default(2),
  /** New candidates per parent per round. */
  branch: count(16).default(2),
  rounds: count(100).default(3),
  /** Training rollouts per parent per round, from which the critique's examples are picked. */
  gradientBatch: count(1_000).default(4),
  /** Validation tasks a candidate is scored on each round (the leader is then scored on all of them). */
  valBatch: count(10_000).default(8),
  critiqueModel: z.string().min(1).max(200).default('gpt-4o-mini'),
  editModel: z.string().min(1).max(200).default('gpt-4o-mini'),
  temperature: z.number().min(0).max(2).default(1),
  /** At most this many LLM calls of the optimizer itself (critiques and edits). */
  budgetCalls: count(1_000_000).default(200),
  /** At most this many agent rollouts (training and validation). */
  budgetRollouts: count(1_000_000).default(1_000),
  /** Seeds every random choice: the same seed and the same rewards give the same run. */
  seed: z
    .number()
    .int()
    .min(0)
    .max(2 ** 31 - 1)
    .default(0),
  /** Attempts per critique or edit call before that branch is skipped. */
  callAttempts: count(10).default(3),
  /** Agent rollouts running at once. */
  concurrency: count(256).default(4),
  /**
   * How the agents run: null, one process per rollout (`LIGHTNING_TASK`); N, N long-lived agent workers per batch
   * that take its rollouts from `LIGHTNING_RUNNER_URL` (docs/datasets.md, "Worker mode"), `concurrency` spread over
   * them (⌈concurrency / N⌉ each; no more workers than the batch has rollouts).
   */
  workers: count(1_024).nullable().default(null),
  /** Per-rollout time limit. */
  timeoutMs: z.number().int().min(1_000).max(86_400_000).default(120_000),
  /**
   * For an agent that loads its prompt from a file: each batch gets the candidate in a temporary
   * copy of this file (absolute path), passed in place of every argument naming the file and in
   * `LIGHTNING_PROMPT_FILE`. The file itself is never written.
   */
  promptFile: z.string().min(1).nullable().default(null),
  /**
   * Without a rewards file, the automatic reward: the final answer against the task's expected answer, normalized
   * equality, containment, or none.
   */
  match: z.enum(['normalized', 'contains', 'none']).default('normalized'),
  /**
   * The rewards config each rollout is scored with (absolute path); null: `.lightning/rewards.json` beside the store
   * when it exists, else `match`.
   */
  rewardsFile: z.string().min(1).nullable().default(null),
});
export type ApoConfig = z.infer<typeof ApoConfig>;
export type ApoConfigInput = z.input<typeof ApoConfig>;

/** Critique styles: each branch of a parent asks for its textual gradient in a different one. */
export const CRITIQUE_STYLES = ['failures', 'contrast', 'rules'] as const;
export const CritiqueStyle = z.enum(CRITIQUE_STYLES);
export type CritiqueStyle = z.infer<typeof CritiqueStyle>;

/** One prompt on APO's leaderboard: the seed, or an edit of a parent guided by a critique. */
export const ApoCandidate = z.object({
  id: z.string(),
  runId: z.string(),
  round: z.number().int().nonnegative(),
  parentId: z.string().nullable(),
  resourceName: z.string(),
  /** The resource version holding this candidate's prompt. */
  version: z.number().int().positive(),
  prompt: z.string(),
  /** The textual gradient that produced it; null for the seed. */
  critique: z.string().nullable(),
  critiqueStyle: CritiqueStyle.nullable(),
  /** Mean reward on the round's validation batch. */
  batchScore: z.number().nullable(),
  /** Mean reward on the full validation set (the seed and each round's leader). */
  valScore: z.number().nullable(),
  /** Agent rollouts run with this prompt. */
  rollouts: z.number().int().nonnegative(),
  createdAt: EpochMs,
});
export type ApoCandidate = z.infer<typeof ApoCandidate>;

/** What the APO loop records of a round (TrainingService.recordApoRound), in one write. */
export const ApoRound = z.strictObject({
  runId: z.string().min(1),
  round: z.number().int().nonnegative(),
  /** Candidates new this round (their prompts are resource versions already). */
  candidates: z
    .array(
      z.strictObject({
        id: z.string().min(1).max(100),
        parentId: z.string().nullable(),
        version: z.number().int().positive(),
        critique: z.string().nullable(),
        critiqueStyle: CritiqueStyle.nullable(),
      }),
    )
    .default([]),
  /** Scores measured this round, for new or earlier candidates; rollouts are added to the candidate's count. */
  scores: z
    .array(
      z.strictObject({
        id: z.string().min(1),
        batchScore: z.number().optional(),
        valScore: z.number().optional(),
        rollouts: z.number().int().nonnegative().default(0),
      }),
    )
    .default([]),
  /** The round's metrics (step = round). */
  metrics: z.record(z.string(), z.number().finite()).default({}),
});
export type ApoRound = z.input<typeof ApoRound>;

/** A branch that produced no candidate, and why (the run goes on without it). */
export const ApoSkip = z.object({
  round: z.number().int(),
  parentId: z.string(),
  stage: z.enum(['critique', 'edit']),
  error: z.string(),
});
export type ApoSkip = z.infer<typeof ApoSkip>;

/** What an APO run produced: stored as the run's result and printed by `lightning train --json`. */
export const ApoResult = z.object({
  runId: z.string(),
  resource: z.string(),
  seed: z.object({ candidateId: z.string(), version: z.number().int(), prompt: z.string(), valScore: z.number() }),
  best: z.object({ candidateId: z.string(), version: z.number().int(), prompt: z.string(), valScore: z.number() }),
  /** A unified diff from the seed prompt to the best one (empty when the seed stayed best). */
  diff: z.string(),
  roundsCompleted: z.number().int().nonnegative(),
  llmCalls: z.number().int().nonnegative(),
  rollouts: z.number().int().nonnegative(),
  stopReason: z.enum(['completed', 'budget-calls', 'budget-rollouts', 'cancelled']),
  skipped: z.array(ApoSkip),
});
export type ApoResult = z.infer<typeof ApoResult>;
