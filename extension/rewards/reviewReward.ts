/**
 * Accepting, correcting or rejecting an automatic reward (rule, judge, reward model) from the panel.
 * Each is a new human row on the same dimension and step — rows are never changed — so under the
 * episode-reward policy (latest human annotation first, lightningrl/credit.ts) the person's word
 * counts from then on: accept re-adds the same value, correct adds the value typed, reject adds 0
 * ("the rollout earns none of it": a rejected bonus gives nothing, a rejected penalty takes nothing).
 * The row's `reason` names the reward it reviews (`accepts rule reward #12`), so the panel can show
 * each automatic reward's outcome; reviewVerdict (trainer-daemon/protocol/ui/rewardReview.ts) reads it back.
 */
import * as vscode from 'vscode';
import type { Annotator } from '../annotate';
import { parseRewardInput } from '../rewardInput';
import type { DaemonSupervisor } from '../supervisor';
import { isAutomatic } from '../../trainer-daemon/protocol/rewardSources';
import { reviewReason, type ReviewAction } from '../../trainer-daemon/protocol/ui/rewardReview';

export async function reviewReward(
  supervisor: DaemonSupervisor,
  annotator: Annotator,
  rolloutId: string,
  rewardId: number,
  action: ReviewAction,
): Promise<void> {
  const client = await supervisor.ensureRunning();
  const reward = (await client.request('listRewards', { rolloutId })).items.find((item) => item.id === rewardId);
  if (!reward) throw new Error(`reward #${rewardId} is not a reward of rollout ${rolloutId}`);
  if (!isAutomatic(reward))
    throw new Error(
      `reward #${rewardId} is a ${reward.source} reward: only automatic rewards (rule, judge, model) are reviewed`,
    );
  let value = action === 'accept' ? reward.value : 0;
  if (action === 'correct') {
    const typed = await vscode.window.showInputBox({
      title: `Correct the ${reward.source} reward ${reward.value} (${reward.name})`,
      prompt: reward.reason ? `Its reason: ${reward.reason}` : 'The value it should have',
      validateInput: (text) => (parseRewardInput(text) === undefined ? 'Type a number (1, 0, 0.5, -1…)' : undefined),
    });
    if (typed === undefined) return;
    value = parseRewardInput(typed)!;
  }
  await annotator.add({
    rolloutId,
    spanId: reward.spanId,
    name: reward.name,
    value,
    comment: null,
    reason: reviewReason(reward, action),
  });
}
