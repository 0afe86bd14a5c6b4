/**
 * Several policies in one GRPO run (`lightning train --policy NAME=REGEX …`): one base model, one LoRA adapter per
 * policy, trained together. A call is routed to a policy when it is made (the daemon's proxy, capture/policyRoutes.ts)
 * by the name it goes by — its agent's name carried with the call in the W3C `baggage` header, else the model it
 * asks for — matched against each policy's REGEX in order; a call that matches none is answered by the base model,
 * recorded, and not trained. The span records which adapter answered (`lightning.policy`), and each policy trains on
 * the calls its adapter answered. Pure: the CLI, the daemon and the editor share it.
 */
import { z } from 'zod';
import { PolicyName } from './trainer';

/** The span attribute naming the adapter that answered a call (a policy's name, or {@link BASE_POLICY}). */
export const POLICY_ATTRIBUTE = 'lightning.policy';
/** The span attribute saying what routed the call: `agent:NAME` (the baggage), `model:NAME`, or `none`. */
export const POLICY_ROUTE_ATTRIBUTE = 'lightning.policy_route';
/** What `lightning.policy` says when no policy matched and the base model answered (no adapter). */
export const BASE_POLICY = 'base';

function isRegex(source: string): boolean {
  try {
    new RegExp(source);
    return true;
  } catch {
    return false;
  }
}

/** A regular expression as a string, checked where it enters. */
export const RegexSource = z.string().min(1).max(1000).refine(isRegex, { message: 'not a valid regular expression' });

/** One policy of a run: its name (its adapter's), which calls it answers and trains, and the reward it learns from. */
export const PolicySpec = z.strictObject({
  name: PolicyName,
  /**
   * Matched against a call's agent name (the baggage's `gen_ai.agent.name` or `agent.name`), else its requested model.
   */
  match: RegexSource,
  /**
   * The reward dimension its transitions' episode reward is read from (a rollout's rewards of this name: the agent's
   * `POST /reward {name}`, a rule's, a person's); default `reward`, the episode reward every role shares.
   */
  reward: z.string().min(1).max(200).default('reward'),
});
export type PolicySpec = z.infer<typeof PolicySpec>;
export type PolicySpecInput = z.input<typeof PolicySpec>;

/** `NAME=REGEX` (`--policy`) or `NAME=DIMENSION` (`--policy-reward`) → its two halves, or what is wrong with it. */
export function splitNameValue(
  text: string,
  example = 'planner=^planner$',
): { name: string; value: string } | { error: string } {
  const at = text.indexOf('=');
  if (at <= 0 || at === text.length - 1) return { error: `${JSON.stringify(text)}: give NAME=VALUE, e.g. ${example}` };
  return { name: text.slice(0, at), value: text.slice(at + 1) };
}

/** The policy a call goes to: the first whose REGEX matches its agent name, else the first matching its model. */
export function policyFor(
  policies: readonly { readonly name: string; readonly match: RegExp }[],
  keys: { readonly agent: string | null; readonly model: string | null },
): { readonly policy: string; readonly route: string } {
  for (const [kind, value] of [
    ['agent', keys.agent],
    ['model', keys.model],
  ] as const) {
    if (value === null) continue;
    const found = policies.find((p) => p.match.test(value));
    if (found) return { policy: found.name, route: `${kind}:${value}` };
  }
  return { policy: BASE_POLICY, route: 'none' };
}

/** The prefix of a policy's metrics: `policy/planner/` (a run with several policies keeps one set per policy). */
export const POLICY_METRIC_PREFIX = 'policy/';

/** A policy's metric: `policy/planner/loss`, `policy/planner/transitions`. */
export function policyMetric(policy: string, metric: string): string {
  return `${POLICY_METRIC_PREFIX}${policy}/${metric}`;
}

/** What of a GRPO configuration decides whether several policies can train (a structural view: no import circle). */
interface PolicyConfigView {
  readonly model: { readonly kind: string };
  readonly adapter?: { readonly kind: string; readonly trainNorms?: boolean } | undefined;
  readonly agent: string | null;
  readonly policies: readonly PolicySpec[];
  readonly warmStart: unknown;
  readonly distributed: { readonly fsdp: boolean } | null;
}

/** Why this configuration cannot train its policies, each with the field to name; empty when it can. */
export function policyIssues(config: PolicyConfigView): { path: string; message: string }[] {
  const { policies } = config;
  if (policies.length === 0) return [];
  const issues: { path: string; message: string }[] = [];
  const names = policies.map((p) => p.name);
  const twice = names.filter((name, i) => names.indexOf(name) !== i);
  if (twice.length > 0)
    issues.push({ path: 'policies', message: `each policy once (${twice.join(', ')} is given twice)` });
  if (config.model.kind !== 'hf')
    issues.push({
      path: 'policies',
      message:
        'several policies are LoRA adapters on one Hugging Face base model; the tiny built-in policy has no adapters: train a Hugging Face model (--model NAME_OR_PATH, --from-config for random weights)',
    });
  if (config.adapter?.kind === 'full')
    issues.push({
      path: 'adapter',
      message: 'several policies are LoRA adapters: leave adapter out, or give kind lora',
    });
  if (config.adapter?.kind === 'lora' && config.adapter.trainNorms === true)
    issues.push({
      path: 'adapter',
      message: 'with several policies the norms stay frozen (every adapter shares them): leave trainNorms out or false',
    });
  if (config.agent !== null)
    issues.push({
      path: 'agent',
      message: "with --policy each policy's REGEX chooses its calls: leave --agent out (it selects one policy's calls)",
    });
  if (config.warmStart !== null)
    issues.push({
      path: 'warmStart',
      message: 'a warm start trains one policy: it does not go with several (start from the base model)',
    });
  if (config.distributed?.fsdp)
    issues.push({
      path: 'distributed',
      message: 'several policies replicate every adapter on every rank: train them without --fsdp',
    });
  return issues;
}

/** A name a dataset's recorded calls go by (an agent's, or a requested model), and how often it was seen. */
export const SeenName = z.object({
  name: z.string(),
  /** LLM calls that went by it. */
  calls: z.number().int().nonnegative(),
  /** Rollouts with at least one such call. */
  rollouts: z.number().int().nonnegative(),
});
export type SeenName = z.infer<typeof SeenName>;

export const DatasetAgentsParams = z.strictObject({
  /** A dataset's name or id. */
  dataset: z.string().min(1),
  /** Its newest rollouts read, at most. */
  limit: z.number().int().min(1).max(500).default(200),
});

/**
 * The names a dataset's newest rollouts' LLM calls went by — what a policy's REGEX can match (Start Training offers
 * them): each call's agent as training attributes it (its enclosing agent span, else the agent name its baggage
 * carried), and the model it asked for; most calls first.
 */
export const DatasetAgents = z.object({
  /** Rollouts read (the dataset's newest, at most `limit`). */
  rollouts: z.number().int().nonnegative(),
  agents: z.array(SeenName),
  models: z.array(SeenName),
});
export type DatasetAgents = z.infer<typeof DatasetAgents>;
