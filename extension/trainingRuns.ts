/**
 * Training runs for the panel: the daemon's `trainingRuns/changed` notifications, re-subscribed on
 * every connection and re-emitted as an event, and the panel's requests about runs (the list, one
 * run's view, cancel). A run's view is generic (webview/trainingRunProtocol.ts): its metrics, plus
 * the algorithm's own part — APO's leaderboard; an algorithm without one gets `none`.
 */
import * as vscode from 'vscode';
import type { TrainingRun } from '../trainer-daemon/protocol';
import type { ExtensionToWebview, WebviewToExtension } from '../webview/protocol';
import type { TrainingRunView } from '../webview/trainingRunProtocol';
import type { DaemonClient } from './daemonClient';
import type { DaemonSupervisor } from './supervisor';

export type TrainingRunRequest = Extract<WebviewToExtension, { type: 'listTrainingRuns' | 'openTrainingRun' | 'cancelTrainingRun' | 'showTrainingRunResult' }>;

export class TrainingRuns implements vscode.Disposable {
  private readonly _onDidChange = new vscode.EventEmitter<TrainingRun>();
  readonly onDidChange = this._onDidChange.event;
  private subscription: vscode.Disposable | undefined;
  private readonly connection: vscode.Disposable;

  constructor(
    private readonly supervisor: DaemonSupervisor,
    /** Shows a finished run's outcome in the editor (APO: promptResult.ts). */
    private readonly showResult: (run: TrainingRun) => Promise<void>,
  ) {
    this.connection = supervisor.onDidConnect((client) => {
      this.subscription?.dispose();
      this.subscription = client.onNotification('trainingRunChanged', ({ run }) => this._onDidChange.fire(run));
    });
  }

  async receive(message: TrainingRunRequest, post: (message: ExtensionToWebview) => void): Promise<void> {
    const client = await this.supervisor.ensureRunning();
    switch (message.type) {
      case 'listTrainingRuns':
        post({ type: 'trainingRuns', items: (await client.request('listTrainingRuns', { limit: 50 })).items });
        return;
      case 'openTrainingRun':
        post({ type: 'trainingRunDetail', view: await view(client, message.id) });
        return;
      case 'cancelTrainingRun':
        post({ type: 'trainingRunChanged', run: await client.request('cancelTrainingRun', { id: message.id }) });
        return;
      case 'showTrainingRunResult':
        await this.showResult((await client.request('getTrainingRun', { id: message.id })).run);
        return;
    }
  }

  dispose(): void {
    this.subscription?.dispose();
    this.connection.dispose();
    this._onDidChange.dispose();
  }
}

async function view(client: DaemonClient, id: string): Promise<TrainingRunView> {
  const detail = await client.request('getTrainingRun', { id });
  return { run: detail.run, metrics: detail.metrics, extra: detail.run.algorithm === 'apo' ? { kind: 'apo', candidates: detail.candidates } : { kind: 'none' } };
}
