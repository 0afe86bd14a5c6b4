/**
 * **Lightning: Delete Checkpoint…** (the palette, or the Delete button of a checkpoint row in the panel or a run tab,
 * with `{ checkpointId }`): pick a checkpoint (newest first, with its size), refuse the one in use with what to do
 * (Stop Using Checkpoint), ask for a confirmation that names it and its size, then `checkpoints/delete`: the record
 * and its folder. The daemon's own refusals (being exported, the newest of a running run) are shown as it words them.
 */
import * as vscode from 'vscode';
import { errorMessage } from '../../trainer-daemon/protocol/errors';
import { checkpointSize, formatBytes } from '../../trainer-daemon/protocol/format';
import type { DaemonSupervisor } from '../supervisor';
import { checkpointName, deleteConfirmation, deleteRefusal } from './deleteText';
import { chooseCheckpoint } from './chooseCheckpoint';
import type { CheckpointSource } from './useCheckpoint';

const TITLE = 'Lightning: Delete Checkpoint';

export async function deleteCheckpointCommand(
  supervisor: DaemonSupervisor,
  inUse: Pick<CheckpointSource, 'choice'>,
  log: vscode.LogOutputChannel,
  argument?: unknown,
): Promise<void> {
  const client = await supervisor.ensureRunning();
  const checkpoint = await chooseCheckpoint(client, argument, {
    command: 'lightning.deleteCheckpoint',
    title: `${TITLE}: which checkpoint?`,
    none: 'Lightning: no checkpoints to delete.',
    inUse: inUse.choice?.checkpointId,
    row: (item) => ({
      ...item,
      description: [checkpointSize(item.checkpoint), item.description].filter(Boolean).join(' · '),
    }),
  });
  if (!checkpoint) return;
  // The daemon may have restarted while the pick or the confirmation was open: each request takes its connection now.
  const { served } = await (await supervisor.ensureRunning()).request('currentPolicy', {});
  const refusal = deleteRefusal(checkpoint, served, inUse.choice);
  if (refusal) {
    if ((await vscode.window.showErrorMessage(refusal, 'Stop Using Checkpoint')) === 'Stop Using Checkpoint')
      await vscode.commands.executeCommand('lightning.stopUsingCheckpoint');
    return;
  }
  const confirmed = await vscode.window.showWarningMessage(deleteConfirmation(checkpoint), { modal: true }, 'Delete');
  if (confirmed !== 'Delete') return;
  try {
    const { bytes } = await (await supervisor.ensureRunning()).request('deleteCheckpoint', { id: checkpoint.id });
    log.info(`[checkpoint] deleted ${checkpoint.id} (${formatBytes(bytes)} freed)`);
    void vscode.window.showInformationMessage(
      `Lightning: deleted checkpoint ${checkpointName(checkpoint)} (${formatBytes(bytes)} freed).`,
    );
  } catch (error) {
    log.error(`[checkpoint] delete of ${checkpoint.id} failed: ${errorMessage(error)}`);
    void vscode.window.showErrorMessage(
      `Lightning: cannot delete checkpoint ${checkpointName(checkpoint)}: ${errorMessage(error).split('\n')[0]}`,
    );
  }
}
