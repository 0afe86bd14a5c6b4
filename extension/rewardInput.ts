/**
 * What a person types as a reward (the annotate quick pick, the review queue) and how a rollout is
 * described to them there. Pure, so it is unit-tested without an editor.
 */
import type { Rollout } from '../trainer-daemon/protocol';

/** What the annotate quick pick and the review queue accept: `1`, `0`, `+`/`-` or any finite number. */
export function parseRewardInput(text: string): number | undefined {
  const trimmed = text.trim();
  if (trimmed === '+' || trimmed === '👍') return 1;
  if (trimmed === '-' || trimmed === '👎') return 0;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(trimmed)) return undefined;
  const value = Number(trimmed);
  return Number.isFinite(value) ? value : undefined;
}

export function describeRollout(rollout: Rollout): string {
  const reward = rollout.reward === null ? 'unrated' : `reward ${rollout.reward}`;
  return `${rollout.label ?? rollout.task?.id ?? rollout.id} · ${rollout.status} · ${rollout.llmCalls} LLM calls · ${reward}`;
}
