/**
 * Training runs for the panel: the daemon's `trainingRuns/changed` notifications, re-subscribed on every connection and
 * re-emitted as an event, and the panel's requests about runs (the list, one run's view — whole, or its metric points
 * after a step for a live chart — cancel, resume, and Use on a checkpoint). A run's view
 * (trainer-daemon/protocol/ui/trainingRunView.ts) is the daemon's run detail, a union on the algorithm (APO's
 * leaderboard, GRPO's and SFT's checkpoints), which the pages switch on.
 */
import * as vscode from 'vscode';
import type { TrainingRun, TrainingRunSummary } from '../trainer-daemon/protocol';
import type { ExtensionToWebview, WebviewToExtension } from '../trainer-daemon/protocol/ui/panelMessages';
import type { TrainingRunView } from '../trainer-daemon/protocol/ui/trainingRunView';
import type { DaemonClient } from './daemonClient';
import type { DaemonSupervisor } from './supervisor';

export type TrainingRunRequest = Extract<
  WebviewToExtension,
  {
    type:
      | 'listTrainingRuns'
      | 'openTrainingRun'
      | 'cancelTrainingRun'
      | 'showTrainingRunResult'
      | 'resumeTrainingRun'
      | 'useCheckpoint'
      | 'exportCheckpoint'
      | 'deleteCheckpoint';
  }
>;

/** The command another part of Lightning registers; the panel's Use button runs it. */
export const USE_CHECKPOINT_COMMAND = 'lightning.useCheckpoint';
export const EXPORT_CHECKPOINT_COMMAND = 'lightning.exportCheckpoint';
export const DELETE_CHECKPOINT_COMMAND = 'lightning.deleteCheckpoint';

export class TrainingRuns implements vscode.Disposable {
  private readonly _onDidChange = new vscode.EventEmitter<TrainingRunSummary>();
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
        post({ type: 'trainingRunDetail', view: await view(client, message.id, message.afterStep ?? -1) });
        return;
      case 'cancelTrainingRun':
        post({ type: 'trainingRunChanged', run: await client.request('cancelTrainingRun', { id: message.id }) });
        return;
      case 'showTrainingRunResult':
        await this.showResult((await client.request('getTrainingRun', { id: message.id })).run);
        return;
      case 'resumeTrainingRun':
        await vscode.commands.executeCommand('lightning.resumeTraining', message.id);
        return;
      case 'useCheckpoint':
        await vscode.commands.executeCommand(USE_CHECKPOINT_COMMAND, { checkpointId: message.checkpointId });
        return;
      case 'exportCheckpoint':
        await vscode.commands.executeCommand(EXPORT_CHECKPOINT_COMMAND, { checkpointId: message.checkpointId });
        return;
      case 'deleteCheckpoint':
        // The run's change (trainingRuns/changed) refreshes the panel and the run tab once it is gone.
        await vscode.commands.executeCommand(DELETE_CHECKPOINT_COMMAND, { checkpointId: message.checkpointId });
        return;
    }
  }

  dispose(): void {
    this.subscription?.dispose();
    this.connection.dispose();
    this._onDidChange.dispose();
  }
}

async function view(client: DaemonClient, id: string, afterStep: number): Promise<TrainingRunView> {
  return { ...(await client.request('getTrainingRun', { id, afterStep })), afterStep };
}
