/**
 * **Lightning: Use Checkpoint** / **Stop Using Checkpoint**: the checkpoint chosen (from a quick
 * pick across runs, or a panel button's `{ checkpointId }`) is kept in workspace state and shown in
 * the status bar; while it is in use, Debug with Lightning and Run Dataset point their rollouts at
 * it. The daemon serves it (`policy/serve`, loading it in a trainer worker of its own, with progress);
 * a daemon restarted since, or a worker that crashed, is asked again before the next rollout. Another
 * checkpoint served for rollouts still queued or running (another window's batch, a CLI run) is not
 * taken over silently: the person is told which and how many, and may Replace Anyway.
 */
import * as vscode from 'vscode';
import type { ServedPolicy } from '../../trainer-daemon/protocol';
import { DaemonError, errorMessage, type ErrorKind } from '../../trainer-daemon/protocol/errors';
import type { DaemonClient } from '../daemonClient';
import type { DaemonSupervisor } from '../supervisor';
import { busyCheckpointMessage, CheckpointChoice, checkpointItems, UseCheckpointArgument } from './routing';
import { inEditorWords, needsTrainerSetup } from '../../trainer-daemon/protocol/setupAdvice';

const STATE_KEY = 'lightning.checkpointInUse';

/** The checkpoint in use could not be served; the person was told why and offered a way out. */
export class CheckpointUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** What rollouts started in the editor need of Use Checkpoint. */
export interface CheckpointSource {
  readonly choice: CheckpointChoice | undefined;
  servedForRollout(client: DaemonClient): Promise<ServedPolicy | null>;
}

export class CheckpointInUse implements vscode.Disposable, CheckpointSource {
  private readonly item = vscode.window.createStatusBarItem('lightning.checkpoint', vscode.StatusBarAlignment.Left, 9);
  private readonly disposables: vscode.Disposable[] = [this.item];
  private notifications: vscode.Disposable | undefined;

  constructor(
    private readonly supervisor: DaemonSupervisor,
    private readonly state: vscode.Memento,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.item.name = 'Lightning checkpoint';
    this.item.command = 'lightning.useCheckpoint';
    this.disposables.push(supervisor.onDidConnect((client) => this.listen(client)));
    this.render();
  }

  /** The checkpoint rollouts are pointed at, if any. */
  get choice(): CheckpointChoice | undefined {
    const parsed = CheckpointChoice.safeParse(this.state.get(STATE_KEY));
    return parsed.success ? parsed.data : undefined;
  }

  /** The command: a panel button passes `{ checkpointId }`; the palette picks among every run's checkpoints. */
  async use(argument?: unknown): Promise<void> {
    const client = await this.supervisor.ensureRunning();
    const { items } = await client.request('listCheckpoints', {});
    let checkpointId: string | undefined;
    if (argument !== undefined) {
      const parsed = UseCheckpointArgument.safeParse(argument);
      if (!parsed.success) throw new Error('lightning.useCheckpoint takes { checkpointId: string }');
      checkpointId = parsed.data.checkpointId;
    } else {
      if (items.length === 0) {
        void vscode.window.showInformationMessage(
          'Lightning: no checkpoints yet. Training (lightning train --algorithm grpo) saves one per iteration.',
        );
        return;
      }
      const stop = this.choice
        ? [
            {
              label: '$(circle-slash) Stop Using Checkpoint',
              description: this.choice.checkpointId,
              stop: true as const,
            },
          ]
        : [];
      const picked = await vscode.window.showQuickPick(
        [...stop, ...checkpointItems(items, this.choice?.checkpointId)],
        {
          title: 'Use Checkpoint: debug and batch rollouts are answered by it',
          placeHolder: 'Which checkpoint? (newest first)',
          ignoreFocusOut: true,
          matchOnDescription: true,
          matchOnDetail: true,
        },
      );
      if (!picked) return;
      if ('stop' in picked) return this.stop();
      checkpointId = picked.checkpoint.id;
    }
    const checkpoint = items.find((c) => c.id === checkpointId);
    if (!checkpoint) throw new Error(`checkpoint ${checkpointId} does not exist in this store`);
    // The daemon may have restarted while the pick was open: the connection it has now.
    const served = await this.serve(await this.supervisor.ensureRunning(), checkpoint.id);
    if (!served) return;
    await this.state.update(STATE_KEY, {
      checkpointId: served.checkpointId,
      runId: served.runId,
      step: served.step,
    } satisfies CheckpointChoice);
    this.render();
    this.log.info(
      `[checkpoint] using ${served.checkpointId} (run ${served.runId}, step ${served.step}) served at ${served.url} on ${served.device}`,
    );
    void vscode.window.showInformationMessage(
      `Lightning: checkpoint step ${served.step} of ${served.runId} now answers Debug with Lightning and Run Dataset.`,
    );
  }

  /** The command: rollouts go back to their own upstream; the daemon stops serving the checkpoint. */
  async stop(): Promise<void> {
    const choice = this.choice;
    await this.state.update(STATE_KEY, undefined);
    this.render();
    if (!choice || this.supervisor.state.kind !== 'running') return;
    const client = await this.supervisor.ensureRunning();
    const current = (await client.request('currentPolicy', {})).served;
    if (current?.checkpointId === choice.checkpointId) await client.request('stopPolicy', {});
    this.log.info(`[checkpoint] stopped using ${choice.checkpointId}`);
  }

  /**
   * For a new rollout: the checkpoint in use, served (loaded again if the daemon restarted or the
   * worker crashed); null when none is in use. CheckpointUnavailableError when it cannot be served,
   * or another checkpoint that rollouts still use was kept (the person has been told why, with a way out).
   */
  async servedForRollout(client: DaemonClient): Promise<ServedPolicy | null> {
    const choice = this.choice;
    if (!choice) return null;
    const current = (await client.request('currentPolicy', {})).served;
    if (current?.checkpointId === choice.checkpointId) return current;
    const served = await this.serve(client, choice.checkpointId);
    if (!served) throw new CheckpointUnavailableError(`checkpoint ${choice.checkpointId} is not served`);
    return served;
  }

  /**
   * Serves with a progress notification; a failure is shown with its way out, and answers undefined.
   * Another checkpoint still used by rollouts is replaced only when the person says so.
   */
  private async serve(client: DaemonClient, checkpointId: string, force = false): Promise<ServedPolicy | undefined> {
    try {
      return await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: `Lightning: loading checkpoint ${checkpointId}…` },
        () => client.request('servePolicy', { checkpointId, ...(force ? { force } : {}) }),
      );
    } catch (error) {
      if (!force && error instanceof DaemonError && error.kind === 'conflict')
        return this.replaceBusy(client, checkpointId, error.message);
      void this.explain(
        `cannot serve checkpoint ${checkpointId}: ${errorMessage(error)}`,
        error instanceof DaemonError ? error.kind : null,
      );
      return undefined;
    }
  }

  /** The checkpoint served is busy with rollouts started elsewhere: told so; served instead only on Replace Anyway. */
  private async replaceBusy(
    client: DaemonClient,
    checkpointId: string,
    daemonMessage: string,
  ): Promise<ServedPolicy | undefined> {
    const message = busyCheckpointMessage(checkpointId, daemonMessage);
    this.log.warn(`[checkpoint] ${message}`);
    const choice = await vscode.window.showWarningMessage(`Lightning: ${message}`, 'Replace Anyway', 'Show Logs');
    if (choice === 'Show Logs') this.log.show();
    return choice === 'Replace Anyway' ? this.serve(client, checkpointId, true) : undefined;
  }

  private async explain(message: string, kind: ErrorKind | null = null): Promise<void> {
    this.log.error(`[checkpoint] ${message}`);
    const setup = needsTrainerSetup(kind);
    const actions = [
      ...(setup ? ['Set Up Trainer'] : []),
      ...(this.choice ? ['Stop Using Checkpoint'] : []),
      'Show Logs',
    ];
    const choice = await vscode.window.showErrorMessage(
      `Lightning: ${inEditorWords(message.split('\n')[0] ?? '')}`,
      ...actions,
    );
    if (choice === 'Set Up Trainer') await vscode.commands.executeCommand('lightning.setUpTrainer');
    if (choice === 'Stop Using Checkpoint') await this.stop();
    if (choice === 'Show Logs') this.log.show();
  }

  /** A crash of the worker serving the checkpoint in use is reported; the next rollout loads it again. */
  private listen(client: DaemonClient): void {
    this.notifications?.dispose();
    this.notifications = client.onNotification('policyChanged', ({ error }) => {
      const choice = this.choice;
      if (error && choice && error.startsWith(`checkpoint ${choice.checkpointId}:`))
        void this.explain(`${error} — it is loaded again for the next rollout`);
    });
  }

  private render(): void {
    const choice = this.choice;
    if (!choice) {
      this.item.hide();
      return;
    }
    this.item.text = `$(beaker) checkpoint step ${choice.step}`;
    this.item.tooltip = `Lightning: rollouts use checkpoint ${choice.checkpointId} (run ${choice.runId}, step ${choice.step}). Click to choose another or stop using it.`;
    this.item.show();
  }

  dispose(): void {
    this.notifications?.dispose();
    for (const disposable of this.disposables) disposable.dispose();
  }
}
