/**
 * How a person's review of an automatic reward is written and read back: the human row's `reason`
 * names the reviewed reward (`accepts rule reward #12`, `corrects judge reward #7 (was 0.8)`,
 * `rejects rule reward #3 (was 1)`). Pure (no DOM, no `vscode`): the extension writes it, the panel
 * reads it, unit tests check both.
 */
import type { Reward } from '../records';

export type ReviewAction = 'accept' | 'correct' | 'reject';

const VERB: Record<ReviewAction, string> = { accept: 'accepts', correct: 'corrects', reject: 'rejects' };

export function reviewReason(reward: Pick<Reward, 'id' | 'source' | 'value'>, action: ReviewAction): string {
  return `${VERB[action]} ${reward.source} reward #${reward.id}${action === 'accept' ? '' : ` (was ${reward.value})`}`;
}

export interface Verdict {
  readonly action: ReviewAction;
  readonly by: Reward;
}

/** The latest human review of each automatic reward, by the reviewed reward's id. */
export function reviewVerdicts(rewards: readonly Reward[]): Map<number, Verdict> {
  const verdicts = new Map<number, Verdict>();
  for (const reward of rewards) {
    if (reward.source !== 'human' || !reward.reason) continue;
    const match = /^(accepts|corrects|rejects) \w+ reward #(\d+)/.exec(reward.reason);
    if (!match) continue;
    const action = (Object.keys(VERB) as ReviewAction[]).find((key) => VERB[key] === match[1])!;
    const id = Number(match[2]);
    const previous = verdicts.get(id);
    if (!previous || previous.by.id < reward.id) verdicts.set(id, { action, by: reward });
  }
  return verdicts;
}
