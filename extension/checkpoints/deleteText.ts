/**
 * Pure parts of **Lightning: Delete Checkpoint…**, free of `vscode` so they are unit-tested: why a checkpoint
 * cannot be deleted from here (the daemon serves it, or this workspace's rollouts are pointed at it) and the
 * confirmation that names what goes and how much disk comes back.
 */
import type { Checkpoint, ServedPolicy } from '../../trainer-daemon/protocol';
import { checkpointSize } from '../../trainer-daemon/protocol/format';
import type { CheckpointChoice } from './routing';

/** "step 2 of run-abc": how a checkpoint is named to a person. */
export function checkpointName(checkpoint: Pick<Checkpoint, 'step' | 'runId'>): string {
  return `step ${checkpoint.step} of ${checkpoint.runId}`;
}

/**
 * Why `checkpoint` may not be deleted now, or undefined. The one the daemon serves (Use Checkpoint, `--checkpoint`)
 * answers rollouts; the one this workspace chose is served again before its next rollout: both are stopped first.
 */
export function deleteRefusal(
  checkpoint: Pick<Checkpoint, 'id' | 'step' | 'runId'>,
  served: Pick<ServedPolicy, 'checkpointId'> | null,
  inUse: Pick<CheckpointChoice, 'checkpointId'> | undefined,
): string | undefined {
  if (served?.checkpointId === checkpoint.id || inUse?.checkpointId === checkpoint.id)
    return `Lightning: checkpoint ${checkpointName(checkpoint)} is in use (Use Checkpoint): your rollouts are answered by it. Stop Using Checkpoint first, then delete it.`;
  return undefined;
}

/** The modal question before deleting: what, how much disk, and that it cannot be undone. */
export function deleteConfirmation(
  checkpoint: Pick<Checkpoint, 'step' | 'runId' | 'bytes' | 'optimizerState'>,
): string {
  const size = checkpointSize(checkpoint);
  return `Delete checkpoint ${checkpointName(checkpoint)}${size === '-' ? '' : ` (${size})`}? Its folder is removed from disk; this cannot be undone.`;
}
