/**
 * Reward annotation: one path to the daemon (rewards/add, source `human`) used by the panel's
 * buttons, **Lightning: Annotate Reward** (a quick pick: $(thumbsup) 1, $(thumbsdown) 0, a number, then an optional
 * comment) and **Lightning: Review Unrated Rollouts** (a keyboard queue over unrated rollouts).
 * Annotations are never overwritten; a correction is a new row.
 */
import os from 'node:os';
import * as vscode from 'vscode';
import type { LiveRollouts } from './liveRollouts';
import { describeRollout, parseRewardInput } from './rewardInput';
import { ENDED_STATUSES } from '../trainer-daemon/protocol/status';

export interface Annotation {
  readonly rolloutId: string;
  readonly spanId: string | null;
  readonly value: number;
  readonly comment: string | null;
  /** The reward dimension (default `reward`, the episode reward). */
  readonly name?: string;
  /** Why, for rows written on the person's behalf (a review of an automatic reward). */
  readonly reason?: string | null;
}

export class Annotator {
  /** The last rollout a debug session finished here. */
  lastFinishedId: string | undefined;

  constructor(
    private readonly live: LiveRollouts,
    private readonly log: vscode.LogOutputChannel,
  ) {}

  async add(annotation: Annotation): Promise<void> {
    const client = await this.live.supervisor.ensureRunning();
    const reward = await client.request('addReward', {
      ...annotation,
      source: 'human',
      author: os.userInfo().username,
    });
    this.log.info(
      `[annotate] reward ${reward.value} on rollout ${reward.rolloutId}${reward.spanId ? ` step ${reward.spanId}` : ''}`,
    );
  }

  /** **Lightning: Annotate Reward** on the selected rollout, else the last finished one. */
  async annotateCommand(): Promise<void> {
    const client = await this.live.supervisor.ensureRunning();
    const id =
      this.live.selectedId ??
      this.lastFinishedId ??
      (await client.request('listRollouts', { status: [...ENDED_STATUSES], limit: 1 })).items[0]?.id;
    if (!id) {
      void vscode.window.showInformationMessage(
        'Lightning: no rollout to annotate yet. Run an agent with Debug with Lightning first.',
      );
      return;
    }
    const { rollout } = await client.request('getRollout', { id, spans: false });
    const value = await this.pickValue(describeRollout(rollout));
    if (value === undefined) return;
    const comment = await vscode.window.showInputBox({
      title: `Reward ${value}: comment (optional)`,
      prompt: 'Why this reward? Enter to skip.',
      ignoreFocusOut: true,
    });
    if (comment === undefined) return;
    await this.add({ rolloutId: id, spanId: null, value, comment: comment.trim() || null });
    void vscode.window.setStatusBarMessage(`Lightning: reward ${value} saved`, 3_000);
  }

  private pickValue(title: string): Promise<number | undefined> {
    return new Promise((resolve) => {
      const pick = vscode.window.createQuickPick<vscode.QuickPickItem & { value: number }>();
      pick.title = `Annotate: ${title}`;
      // A focus change (the panel's webview taking focus back as the palette closes) must not dismiss it.
      pick.ignoreFocusOut = true;
      pick.placeholder = '1 (good), 0 (bad), or type a number';
      const base = [
        { label: '$(thumbsup) 1', description: 'good', value: 1 },
        { label: '$(thumbsdown) 0', description: 'bad', value: 0 },
      ];
      pick.items = base;
      let done = false;
      const finish = (value: number | undefined): void => {
        if (done) return;
        done = true;
        resolve(value);
        pick.dispose();
      };
      pick.onDidChangeValue((text) => {
        const typed = parseRewardInput(text);
        pick.items =
          typed === undefined
            ? base
            : [{ label: `$(edit) ${typed}`, description: 'the number typed', value: typed, alwaysShow: true }, ...base];
      });
      pick.onDidAccept(() => finish(pick.selectedItems[0]?.value ?? parseRewardInput(pick.value)));
      pick.onDidHide(() => finish(undefined));
      pick.show();
    });
  }

  /**
   * **Lightning: Review Unrated Rollouts**: a quick pick over the unrated finished rollouts, one at
   * a time, shown in the panel as it goes. Type 1, 0 or a number and Enter to rate and advance;
   * n / p (or the items) for next / previous; Escape ends the review.
   */
  async reviewUnrated(): Promise<void> {
    const client = await this.live.supervisor.ensureRunning();
    const queue = (await client.request('listRollouts', { status: [...ENDED_STATUSES], unrated: true, limit: 500 }))
      .items;
    if (queue.length === 0) {
      void vscode.window.showInformationMessage('Lightning: every finished rollout has a reward.');
      return;
    }
    let index = 0;
    let rated = 0;
    const pick = vscode.window.createQuickPick<vscode.QuickPickItem & { action: 'next' | 'previous' | number }>();
    pick.ignoreFocusOut = true;
    pick.placeholder = '1 = good, 0 = bad, any number, then Enter · n / p = next / previous · Esc ends';
    pick.items = [
      { label: '$(thumbsup) 1', action: 1 },
      { label: '$(thumbsdown) 0', action: 0 },
      { label: '$(arrow-right) Next', description: 'n', action: 'next' },
      { label: '$(arrow-left) Previous', description: 'p', action: 'previous' },
    ];
    const show = (): void => {
      const rollout = queue[index]!;
      pick.title = `Review ${index + 1}/${queue.length} (${rated} rated): ${describeRollout(rollout)}`;
      pick.value = '';
      this.live.reveal(rollout);
    };
    const move = (step: number): void => {
      index = Math.min(queue.length - 1, Math.max(0, index + step));
      show();
    };
    pick.onDidAccept(async () => {
      const typed = pick.value.trim().toLowerCase();
      const action =
        typed === 'n'
          ? 'next'
          : typed === 'p'
            ? 'previous'
            : typed !== ''
              ? parseRewardInput(typed)
              : pick.activeItems[0]?.action;
      if (action === 'next' || action === 'previous') return move(action === 'next' ? 1 : -1);
      if (action === undefined) {
        pick.title = `Review ${index + 1}/${queue.length}: "${pick.value}" is not a number — type 1, 0, a number, n or p`;
        return;
      }
      const rollout = queue[index]!;
      await this.add({ rolloutId: rollout.id, spanId: null, value: action, comment: null });
      rated += 1;
      queue[index] = { ...rollout, reward: action };
      if (index === queue.length - 1) {
        pick.hide();
        void vscode.window.showInformationMessage(`Lightning: review done, ${rated} rollout(s) rated.`);
      } else move(1);
    });
    pick.onDidHide(() => pick.dispose());
    show();
    pick.show();
  }
}
