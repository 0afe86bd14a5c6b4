/**
 * Which checkpoint a checkpoint command acts on: the one its argument names (`{ checkpointId }`, from a panel or run
 * tab row), else the one picked from the store's checkpoints, newest first. Shared by Delete and Export Checkpoint.
 */
import * as vscode from 'vscode';
import type { Checkpoint } from '../../trainer-daemon/protocol';
import type { DaemonClient } from '../daemonClient';
import { checkpointItems, UseCheckpointArgument, type CheckpointItem } from './routing';

export interface CheckpointChoice {
  /** The command's id, named when its argument is not `{ checkpointId }`. */
  readonly command: string;
  /** The quick pick's title. */
  readonly title: string;
  /** What to tell when the store has no checkpoint. */
  readonly none: string;
  /** The checkpoint marked as in use in the list, if any. */
  readonly inUse?: string;
  /** Each row as the command shows it (default: as checkpointItems writes it). */
  readonly row?: (item: CheckpointItem) => CheckpointItem;
}

/** The checkpoint, or undefined when the user picked none (or there is none: then `none` is shown). */
export async function chooseCheckpoint(
  client: Pick<DaemonClient, 'request'>,
  argument: unknown,
  choice: CheckpointChoice,
): Promise<Checkpoint | undefined> {
  const { items } = await client.request('listCheckpoints', {});
  let checkpointId: string | undefined;
  if (argument !== undefined) {
    const parsed = UseCheckpointArgument.safeParse(argument);
    if (!parsed.success) throw new Error(`${choice.command} takes { checkpointId: string }`);
    checkpointId = parsed.data.checkpointId;
  } else {
    if (items.length === 0) {
      void vscode.window.showInformationMessage(choice.none);
      return undefined;
    }
    const rows = checkpointItems(items, choice.inUse);
    const picked = await vscode.window.showQuickPick(choice.row ? rows.map(choice.row) : rows, {
      title: choice.title,
      // The first step of a flow (Export: three steps; Delete: a confirmation): a focus change must not drop it.
      ignoreFocusOut: true,
      matchOnDescription: true,
      matchOnDetail: true,
    });
    if (!picked) return undefined;
    checkpointId = picked.checkpoint.id;
  }
  const checkpoint = items.find((c) => c.id === checkpointId);
  if (!checkpoint) throw new Error(`checkpoint ${checkpointId} does not exist in this store`);
  return checkpoint;
}
