/**
 * Pure parts of **Lightning: Use Checkpoint**, kept free of `vscode` so they are unit-tested: the
 * choice kept in workspace state, how checkpoints are offered, what a dataset run is given, and how a
 * checkpoint busy elsewhere is explained. Which upstream a debug session's rollout gets is `debug/route.ts`.
 */
import { z } from 'zod';
import { describeMetrics, type Checkpoint, type ServedPolicy } from '../../trainer-daemon/protocol';
import { checkpointTitle } from '../../trainer-daemon/protocol/policyCheckpoint';

/** The checkpoint rollouts are pointed at (workspace state); what the status bar shows. */
export const CheckpointChoice = z.object({
  checkpointId: z.string().min(1),
  runId: z.string(),
  step: z.number().int().nonnegative(),
});
export type CheckpointChoice = z.infer<typeof CheckpointChoice>;

/** The command's argument from a panel button: `{ checkpointId }`. */
export const UseCheckpointArgument = z.object({ checkpointId: z.string().min(1) });

/** `lightning dataset run` options (placed before `--`): the checkpoint served for the batch, if any. */
export function checkpointArgs(served: Pick<ServedPolicy, 'checkpointId'> | null): string[] {
  return served ? ['--checkpoint', served.checkpointId] : [];
}

export interface CheckpointItem {
  readonly label: string;
  readonly description: string;
  readonly detail: string;
  readonly checkpoint: Checkpoint;
}

/** Quick-pick items: newest first, each with its run, step and key metrics; the one in use is marked. */
export function checkpointItems(checkpoints: readonly Checkpoint[], inUse: string | undefined): CheckpointItem[] {
  return [...checkpoints]
    .sort((a, b) => b.createdAt - a.createdAt || b.step - a.step)
    .map((checkpoint) => ({
      label: `${checkpoint.id === inUse ? '$(check) ' : ''}${checkpointTitle(checkpoint, 'step')} · ${checkpoint.runId}`,
      description: describeMetrics(checkpoint.metrics),
      detail: `${checkpoint.id} · ${new Date(checkpoint.createdAt).toLocaleString()}`,
      checkpoint,
    }));
}

/**
 * policy/serve refused (kind `conflict`) to replace the checkpoint that queued or running rollouts — another
 * window's batch or debug session, a `dataset run --checkpoint` — still use: said with the editor's
 * way out. The daemon's message names that checkpoint and counts the rollouts; its API hint (after
 * " — ") is replaced by the button.
 */
export function busyCheckpointMessage(chosen: string, daemonMessage: string): string {
  return `cannot use checkpoint ${chosen} now: ${daemonMessage.split(' — ')[0]} (Replace Anyway stops them)`;
}
