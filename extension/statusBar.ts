/**
 * The status bar item: the daemon's state and the number of rollouts in the store (refreshed from
 * stats/get when rollouts change, at most every half second), written as the panel writes its count.
 * Clicking it opens the panel.
 */
import * as vscode from 'vscode';
import type { LiveRollouts } from './liveRollouts';
import type { DaemonState } from './supervisor';
import { rolloutCount } from '../trainer-daemon/protocol/format';

const REFRESH_MS = 500;

export function statusText(state: DaemonState, rollouts: number | undefined, unrated: number | undefined): string {
  switch (state.kind) {
    case 'stopped':
      return '$(zap) Lightning';
    case 'starting':
      return '$(sync~spin) Lightning: starting';
    case 'failed':
      return '$(error) Lightning: daemon failed';
    case 'running':
      return rollouts === undefined
        ? '$(zap) Lightning'
        : `$(zap) Lightning: ${rolloutCount(rollouts)}${unrated ? ` (${unrated.toLocaleString('en-US')} unrated)` : ''}`;
  }
}

export class LightningStatusBar implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem('lightning.status', vscode.StatusBarAlignment.Left, 10);
  private readonly disposables: vscode.Disposable[] = [];
  private counts: { rollouts: number; unrated: number } | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly live: LiveRollouts) {
    this.item.name = 'Lightning';
    this.item.command = 'lightning.showPanel';
    this.disposables.push(
      this.item,
      live.supervisor.onDidChangeState((state) => {
        if (state.kind === 'running') this.scheduleRefresh();
        this.render();
      }),
      live.onDidChangeRollouts(() => this.scheduleRefresh()),
    );
    this.render();
    this.item.show();
  }

  private scheduleRefresh(): void {
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      void this.refresh();
    }, REFRESH_MS);
  }

  private async refresh(): Promise<void> {
    const supervisor = this.live.supervisor;
    if (supervisor.state.kind !== 'running') return;
    try {
      const stats = await (await supervisor.ensureRunning()).request('getStats', {});
      this.counts = { rollouts: stats.rollouts, unrated: stats.unrated };
    } catch {
      this.counts = undefined;
    }
    this.render();
  }

  private render(): void {
    const state = this.live.supervisor.state;
    this.item.text = statusText(state, this.counts?.rollouts, this.counts?.unrated);
    this.item.tooltip =
      state.kind === 'running'
        ? `Lightning daemon ${state.url} (pid ${state.pid}${state.owned ? '' : ', shared'}) — click to open the panel`
        : state.kind === 'failed'
          ? state.message
          : 'Lightning — click to open the panel';
    this.item.backgroundColor =
      state.kind === 'failed' ? new vscode.ThemeColor('statusBarItem.errorBackground') : undefined;
  }

  dispose(): void {
    clearTimeout(this.timer);
    for (const disposable of this.disposables) disposable.dispose();
  }
}
