/**
 * **Lightning: Export Checkpoint…** (the palette, or the Export button of a checkpoint row with `{ checkpointId }`):
 * pick a checkpoint (newest first), a format (the adapter or the merged model for LoRA runs, the model folder for
 * full fine-tunes) and a folder; the daemon writes it there (`checkpoints/export`, a trainer worker with transformers
 * + peft) under a progress notification, and the result can be revealed. The daemon's refusals (the tiny built-in
 * policy has no standard format; a PEFT export of a base built from a config) are shown as it words them.
 */
import fs from 'node:fs';
import * as vscode from 'vscode';
import { formatBytes } from '../../trainer-daemon/protocol/format';
import { weightsConfig } from '../../trainer-daemon/protocol/training';
import { errorMessage } from '../../trainer-daemon/protocol/errors';
import type { DaemonSupervisor } from '../supervisor';
import { chooseCheckpoint } from './chooseCheckpoint';
import { exportFolder, formatItems } from './exportChoices';

const TITLE = 'Lightning: Export Checkpoint';

export async function exportCheckpointCommand(
  supervisor: DaemonSupervisor,
  log: vscode.LogOutputChannel,
  argument?: unknown,
): Promise<void> {
  const client = await supervisor.ensureRunning();
  const checkpoint = await chooseCheckpoint(client, argument, {
    command: 'lightning.exportCheckpoint',
    title: `${TITLE} (1/3): which checkpoint?`,
    none: 'Lightning: no checkpoints yet. Training (lightning train --algorithm grpo) saves one per iteration.',
  });
  if (!checkpoint) return;
  const { run } = await client.request('getTrainingRun', { id: checkpoint.runId });
  const trained = weightsConfig(run);
  const adapter = trained ? (trained.adapter?.kind ?? (trained.model.kind === 'tiny' ? 'full' : 'lora')) : 'full';
  const format = await vscode.window.showQuickPick(formatItems(adapter), {
    title: `${TITLE} (2/3): format of step ${checkpoint.step} of ${checkpoint.runId}`,
    ignoreFocusOut: true,
  });
  if (!format) return;
  const parents = await vscode.window.showOpenDialog({
    canSelectFiles: false,
    canSelectFolders: true,
    canSelectMany: false,
    openLabel: 'Export Here',
    title: `${TITLE} (3/3): the folder to export into (a new subfolder is made in it)`,
    defaultUri: vscode.workspace.workspaceFolders?.[0]?.uri,
  });
  const parent = parents?.[0];
  if (!parent) return;
  const out = exportFolder(parent.fsPath, checkpoint, format.format, (dir) => fs.existsSync(dir));
  try {
    const written = await vscode.window.withProgress(
      {
        location: vscode.ProgressLocation.Notification,
        title: `Lightning: exporting checkpoint step ${checkpoint.step} as ${format.label}…`,
      },
      () => client.request('exportCheckpoint', { id: checkpoint.id, format: format.format, out }),
    );
    log.info(
      `[checkpoint] exported ${checkpoint.id} as ${written.format} to ${written.path} (${formatBytes(written.bytes)}, ${written.seconds.toFixed(1)} s)`,
    );
    const onto = written.baseModel ? ` (an adapter for ${written.baseModel})` : '';
    const action = await vscode.window.showInformationMessage(
      `Lightning: exported step ${checkpoint.step} as ${format.label}${onto} to ${written.path} (${formatBytes(written.bytes)}).`,
      'Reveal',
    );
    if (action === 'Reveal') await vscode.commands.executeCommand('revealFileInOS', vscode.Uri.file(written.path));
  } catch (error) {
    log.error(`[checkpoint] export of ${checkpoint.id} failed: ${errorMessage(error)}`);
    const action = await vscode.window.showErrorMessage(
      `Lightning: cannot export checkpoint ${checkpoint.id}: ${errorMessage(error).split('\n')[0]}`,
      'Show Logs',
    );
    if (action === 'Show Logs') log.show();
  }
}
