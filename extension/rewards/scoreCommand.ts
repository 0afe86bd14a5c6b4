/**
 * **Lightning: Score Rollouts**: picks a rewards file (the store's `.lightning/rewards.json`, any
 * `*rewards*.json` in the workspace, or one browsed to) and a scope (the rollout selected in the
 * panel, the unrated rollouts, or a dataset), then runs `rewards/score` under a progress
 * notification fed by `rewards/progress`; cancelling it sends `rewards/cancel` (what was scored
 * is kept). Per-rollout source errors go to the log, a summary to a notification.
 */
import fs from 'node:fs';
import path from 'node:path';
import * as vscode from 'vscode';
import type { ScoreRolloutsParams } from '../../trainer-daemon/protocol';
import type { LiveRollouts } from '../liveRollouts';
import { readSettings } from '../settings';

type Scope = Pick<ScoreRolloutsParams, 'rollouts' | 'dataset' | 'unrated'>;

export class ScoreCommand {
  constructor(
    private readonly live: LiveRollouts,
    private readonly log: vscode.LogOutputChannel,
  ) {}

  async run(): Promise<void> {
    const rewardsFile = await this.pickRewardsFile();
    if (!rewardsFile) return;
    const scope = await this.pickScope();
    if (!scope) return;
    const client = await this.live.supervisor.ensureRunning();
    const jobId = `editor-${Date.now().toString(36)}`;
    const result = await vscode.window.withProgress(
      {
        location: vscode.ProgressLocation.Notification,
        title: `Lightning: scoring with ${path.basename(rewardsFile)}`,
        cancellable: true,
      },
      async (progress, token) => {
        let reported = 0;
        const subscription = client.onNotification('scoreProgress', (update) => {
          if (update.jobId !== jobId || update.total === 0) return;
          const done = (100 * update.done) / update.total;
          progress.report({
            increment: done - reported,
            message: `${update.done}/${update.total} rollouts${update.errors ? ` · ${update.errors} errors` : ''}`,
          });
          reported = done;
        });
        const cancel = token.onCancellationRequested(
          () => void client.request('cancelScore', { jobId }).catch(() => undefined),
        );
        try {
          return await client.request('scoreRollouts', { rewardsFile, ...scope, jobId });
        } finally {
          subscription.dispose();
          cancel.dispose();
        }
      },
    );
    for (const score of result.results) {
      for (const source of score.sources)
        if (source.kind === 'error') this.log.warn(`[score] ${score.rolloutId} ${source.name}: ${source.error}`);
    }
    const text = `Lightning: ${result.cancelled ? 'scoring cancelled' : 'scored'}: ${result.scored} rollout(s) scored, ${result.unscored} without a score, ${result.errors} source error(s).`;
    if (result.errors > 0)
      void vscode.window.showWarningMessage(text, 'Show Logs').then((choice) => choice && this.log.show());
    else void vscode.window.showInformationMessage(text);
  }

  private async pickRewardsFile(): Promise<string | undefined> {
    const beside = path.join(path.dirname(readSettings().storeFile), 'rewards.json');
    const found = (await vscode.workspace.findFiles('**/*rewards*.json', '**/node_modules/**', 50)).map(
      (uri) => uri.fsPath,
    );
    const files = [...new Set([...(fs.existsSync(beside) ? [beside] : []), ...found])];
    const root = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? '';
    const items: Array<vscode.QuickPickItem & { file?: string }> = [
      ...files.map((file) => ({
        label: path.relative(root, file) || file,
        description: file === beside ? 'the store’s rewards.json' : undefined,
        file,
      })),
      { label: '$(folder-opened) Browse…', description: 'a rewards file elsewhere' },
    ];
    const picked = await vscode.window.showQuickPick(items, {
      title: 'Score Rollouts (1/2): which rewards file?',
      ignoreFocusOut: true,
      placeHolder: files.length
        ? undefined
        : 'No rewards file in the workspace: browse to one (see docs/rewards.md, "Automatic rewards")',
    });
    if (!picked) return undefined;
    if (picked.file) return picked.file;
    const browsed = await vscode.window.showOpenDialog({
      title: 'A rewards file (.lightning/rewards.json format)',
      canSelectMany: false,
      filters: { JSON: ['json'] },
    });
    return browsed?.[0]?.fsPath;
  }

  private async pickScope(): Promise<Scope | undefined> {
    const client = await this.live.supervisor.ensureRunning();
    const selected = this.live.selectedId;
    const items: Array<vscode.QuickPickItem & { scope?: Scope; datasets?: true }> = [
      ...(selected
        ? [{ label: '$(target) The selected rollout', description: selected, scope: { rollouts: [selected] } }]
        : []),
      {
        label: '$(circle-outline) Unrated rollouts',
        description: 'finished rollouts with no reward yet',
        scope: { unrated: true },
      },
      { label: '$(database) A dataset…', description: 'every finished rollout of a dataset', datasets: true },
    ];
    const picked = await vscode.window.showQuickPick(items, {
      title: 'Score Rollouts (2/2): which rollouts?',
      ignoreFocusOut: true,
    });
    if (!picked) return undefined;
    if (picked.scope) return picked.scope;
    const { items: datasets } = await client.request('listDatasets', {});
    if (datasets.length === 0) {
      void vscode.window.showInformationMessage(
        'Lightning: no datasets yet. Import one with Lightning: Import Dataset.',
      );
      return undefined;
    }
    const dataset = await vscode.window.showQuickPick(
      datasets.map((d) => ({ label: d.name, description: `${d.taskCount} tasks`, id: d.id })),
      { title: 'Score Rollouts: which dataset?', ignoreFocusOut: true },
    );
    return dataset ? { dataset: dataset.id } : undefined;
  }
}
