/**
 * Pure parts of **Lightning: Use Checkpoint**, kept free of `vscode` so they are unit-tested: the
 * choice kept in workspace state, how checkpoints are offered, which upstream a debug session's
 * rollout gets, what a dataset run is given, and how a checkpoint busy elsewhere is explained.
 */
import { z } from 'zod';
import {
  checkpointRouting,
  describeMetrics,
  userProviderUpstreams,
  type Checkpoint,
  type ProviderUpstreams,
  type ServedPolicy,
} from '../../trainer-daemon/protocol';
import { baseEnvironment, upstreamFor, type LaunchConfig } from '../debug/launchConfig';
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

/** Which upstream, token ids and resource pins a new debug rollout gets. */
export interface RolloutRoute {
  readonly upstream: string | null;
  readonly tokenIds: boolean;
  readonly providerUpstreams?: ProviderUpstreams;
  readonly resources: Readonly<Record<string, number>>;
}

/**
 * A checkpoint in use (served as `served`) answers the session's LLM calls, whatever the launch
 * configuration's own OPENAI_BASE_URL says — choosing it is the explicit choice — with exact token
 * ids, and the rollout records it. Without one, the configuration's OPENAI_BASE_URL stays the
 * upstream (capture never changes which model answers), else the daemon's.
 */
export function debugRoute(
  launch: LaunchConfig,
  processEnv: Readonly<Record<string, string | undefined>>,
  served: ServedPolicy | null,
): RolloutRoute {
  if (served) return checkpointRouting(served);
  return {
    upstream: upstreamFor(launch, processEnv),
    providerUpstreams: userProviderUpstreams(baseEnvironment(launch, processEnv)),
    tokenIds: false,
    resources: {},
  };
}

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

/** Problems a person fixes by setting up the trainer's Python: the same test as a failed training run's. */
export { needsTrainerSetup } from '../training/runText';

/**
 * policy/serve refused (kind `conflict`) to replace the checkpoint that queued or running rollouts — another
 * window's batch or debug session, a `dataset run --checkpoint` — still use: said with the editor's
 * way out. The daemon's message names that checkpoint and counts the rollouts; its API hint (after
 * " — ") is replaced by the button.
 */
export function busyCheckpointMessage(chosen: string, daemonMessage: string): string {
  return `cannot use checkpoint ${chosen} now: ${daemonMessage.split(' — ')[0]} (Replace Anyway stops them)`;
}
