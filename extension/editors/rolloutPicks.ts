/** Quick picks of a rollout (the same task's first, when comparing with one) and of a training run. */
import * as vscode from 'vscode';
import type { Rollout, TrainingRun } from '../../trainer-daemon/protocol';
import type { DaemonClient } from '../daemonClient';
import { formatTime, rewardText, rolloutTitle } from '../../trainer-daemon/protocol/ui/rolloutText';
import { runLabel } from '../../trainer-daemon/protocol/runLabel';

type RolloutItem = vscode.QuickPickItem & { rollout?: Rollout };

export async function pickRollout(client: DaemonClient, title: string, other?: Rollout): Promise<Rollout | undefined> {
  const recent = (await client.request('listRollouts', { limit: 100, order: 'newest' })).items;
  const sameTask = other?.task
    ? (await client.request('listRollouts', { taskId: other.task.id, limit: 100, order: 'newest' })).items
    : [];
  const item = (rollout: Rollout): RolloutItem => ({
    label: rolloutTitle(rollout),
    description: `${rollout.status} · reward ${rewardText(rollout.reward)} · ${rollout.llmCalls} LLM calls · ${formatTime(rollout.createdAt)}`,
    detail: rollout.id,
    rollout,
  });
  const seen = new Set([other?.id]);
  const fresh = (rollouts: readonly Rollout[]): Rollout[] =>
    rollouts.filter((rollout) => !seen.has(rollout.id) && seen.add(rollout.id));
  const items: RolloutItem[] = [];
  const same = fresh(sameTask);
  if (same.length)
    items.push(
      { label: `Same task (${other!.task!.id})`, kind: vscode.QuickPickItemKind.Separator },
      ...same.map(item),
    );
  const rest = fresh(recent);
  if (rest.length) items.push({ label: 'Recent', kind: vscode.QuickPickItemKind.Separator }, ...rest.map(item));
  if (items.length === 0) {
    void vscode.window.showInformationMessage('Lightning: no rollouts to pick from yet.');
    return undefined;
  }
  // Shown after a request to the daemon: a focus change meanwhile (the panel's webview taking focus back as the
  // palette closes) must not dismiss it.
  return (
    await vscode.window.showQuickPick(items, {
      title,
      matchOnDescription: true,
      matchOnDetail: true,
      ignoreFocusOut: true,
    })
  )?.rollout;
}

export async function pickTrainingRun(client: DaemonClient): Promise<TrainingRun | undefined> {
  const runs = (await client.request('listTrainingRuns', { limit: 50 })).items;
  if (runs.length === 0) {
    void vscode.window.showInformationMessage('Lightning: no training runs yet (Lightning: Start Training).');
    return undefined;
  }
  const picked = await vscode.window.showQuickPick(
    runs.map((run) => ({
      label: runLabel(run),
      description: `${run.status} · ${formatTime(run.createdAt)}`,
      detail: run.id,
      run,
    })),
    { title: 'Open which training run?', matchOnDescription: true, matchOnDetail: true, ignoreFocusOut: true },
  );
  return picked?.run;
}
