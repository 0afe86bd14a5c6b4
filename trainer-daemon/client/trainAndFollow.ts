/**
 * A training run followed from a terminal (`lightning train`, the demo): started or resumed in the daemon, its
 * iterations printed as a table as they come, resolved with the run and its checkpoints at the end.
 */
import type { DaemonTrainingConfig, TrainingRunDetail } from '../protocol';
import { placementOf } from '../protocol';
import type { RunnerClient } from '../runner/pool';
import { followRun, runTable } from '../training/follow';
import { otherNodeCommand } from '../training/torchrun';

/** Starts (or resumes) a run in the daemon and follows it to the end; prints its algorithm's table as it goes. */
export async function trainAndFollow(
  client: RunnerClient,
  start: { config: DaemonTrainingConfig } | { resume: string },
  json: boolean,
): Promise<TrainingRunDetail> {
  const run = await client.request('startTraining', start);
  process.stderr.write(
    `lightning: training run ${run.id} (${run.algorithm}, ${placementOf(run)}) ${'resume' in start ? 'resumed' : 'started'}; Ctrl-C cancels\n`,
  );
  const distributed = 'config' in start && start.config.algorithm === 'grpo' ? start.config.distributed : null;
  const others = distributed ? otherNodeCommand(distributed) : null;
  if (others)
    process.stderr.write(
      `lightning: on each other machine (node rank I = 1…${distributed!.nnodes - 1}), run: ${others}\n`,
    );
  const lines = runTable(run);
  if (!json) process.stdout.write(`${lines.header}\n`);
  return followRun(client, run.id, {
    onIteration: (step, metrics) => {
      if (!json) process.stdout.write(`${lines.row(step, metrics)}\n`);
    },
  });
}
