/**
 * `--policy NAME=REGEX` (repeatable) and `--agent REGEX` of `lightning train --algorithm grpo`: the text a user typed →
 * the configuration's policies, each error naming the flag and the text. Whether the rest of the run can train several
 * policies (a Hugging Face model with LoRA, no --agent, no --fsdp …) is the schema's check (protocol/policies.ts).
 */
import { splitNameValue, type PolicySpecInput } from '../../protocol';
import { InvalidInputError, errorMessage } from '../../protocol/errors';

/** The regular expression a flag gave, checked here so that the error quotes it. */
export function regexFlag(value: string | undefined, flag: string, typed = `${flag} ${value}`): string | undefined {
  if (value === undefined) return undefined;
  try {
    new RegExp(value);
  } catch (error) {
    throw new InvalidInputError(`${typed}: not a regular expression (${errorMessage(error)})`);
  }
  return value;
}

/**
 * Each `--policy NAME=REGEX` as a policy, in the order given (the first that matches a call takes it), with the reward
 * dimension `--policy-reward NAME=DIMENSION` gives it (default: the episode reward, `reward`).
 */
export function policiesFromFlags(
  values: readonly string[] | undefined,
  rewards: readonly string[] = [],
): PolicySpecInput[] {
  const policies = (values ?? []).map((text) => {
    const split = splitNameValue(text);
    if ('error' in split) throw new InvalidInputError(`--policy ${split.error}`);
    regexFlag(split.value, '--policy', `--policy ${text}`);
    return { name: split.name, match: split.value };
  });
  const names = policies.map((p) => p.name);
  const twice = names.find((name, i) => names.indexOf(name) !== i);
  if (twice !== undefined)
    throw new InvalidInputError(`--policy ${twice}: given twice; each policy needs a name of its own`);
  const reward = new Map<string, string>();
  for (const text of rewards) {
    const split = splitNameValue(text, 'planner=plan_quality');
    if ('error' in split) throw new InvalidInputError(`--policy-reward ${split.error}`);
    if (!names.includes(split.name))
      throw new InvalidInputError(
        `--policy-reward ${text}: no --policy ${split.name}${names.length ? ` (the policies are ${names.join(', ')})` : ''}`,
      );
    if (reward.has(split.name)) throw new InvalidInputError(`--policy-reward ${split.name}: given twice`);
    reward.set(split.name, split.value);
  }
  return policies.map((p) => (reward.has(p.name) ? { ...p, reward: reward.get(p.name)! } : p));
}
