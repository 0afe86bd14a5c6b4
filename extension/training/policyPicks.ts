/**
 * Several policies from Start Training (`lightning train --policy NAME=REGEX …` in the editor): the names a dataset's
 * recorded calls went by (`datasets/agents`: agent names, else requested models) offered as quick pick items; the
 * picked ones become one policy each — a LoRA adapter of its own on the Hugging Face base model — whose REGEX matches
 * exactly that name, and whose name is the picked one made a valid policy name. Pure: unit-tested.
 */
import { PolicyName, type DatasetAgents, type PolicySpecInput, type SeenName } from '../../trainer-daemon/protocol';

/** What a pick routes by: an agent's name (baggage or agent span) or the model a call asks for. */
export interface PolicyPick {
  readonly kind: 'agent' | 'model';
  readonly name: string;
}

export interface PolicyPickItem {
  readonly label: string;
  readonly description: string;
  readonly pick: PolicyPick;
}

/** Agents first (a call's agent decides before its model: protocol/policies.ts policyFor), most calls first. */
export function policyPickItems(seen: DatasetAgents): PolicyPickItem[] {
  const item = (kind: PolicyPick['kind'], { name, calls, rollouts }: SeenName): PolicyPickItem => ({
    label: name,
    description: `${kind === 'agent' ? 'agent' : 'model'} · ${calls} call${calls === 1 ? '' : 's'} in ${rollouts} rollout${rollouts === 1 ? '' : 's'}`,
    pick: { kind, name },
  });
  return [...seen.agents.map((s) => item('agent', s)), ...seen.models.map((s) => item('model', s))];
}

const escapeRegex = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * `name` as a policy name (a letter, then letters, digits, `_`, `-`; 40 at most; not base or default), unlike `taken`.
 */
export function policyNameFor(name: string, taken: ReadonlySet<string>): string {
  let base = name
    .replace(/[^A-Za-z0-9_-]+/g, '-')
    .replace(/^[^A-Za-z]+/, '')
    .replace(/-+$/, '')
    .slice(0, 32);
  if (base === '') base = 'policy';
  if (!PolicyName.safeParse(base).success) base = `${base}-policy`;
  let candidate = base;
  for (let n = 2; taken.has(candidate); n += 1) candidate = `${base}-${n}`;
  return candidate;
}

/** One policy per pick, in order: its REGEX matches the picked name exactly. */
export function policiesFromPicks(picks: readonly PolicyPick[]): PolicySpecInput[] {
  const taken = new Set<string>();
  return picks.map((pick) => {
    const name = policyNameFor(pick.name, taken);
    taken.add(name);
    return { name, match: `^${escapeRegex(pick.name)}$` };
  });
}

/** The policies in a few words, for the settings row. */
export function describePolicies(policies: readonly PolicySpecInput[]): string {
  return policies.length === 0
    ? 'one: every call trains the one adapter'
    : `${policies.map((p) => p.name).join(', ')} (one LoRA adapter each)`;
}
