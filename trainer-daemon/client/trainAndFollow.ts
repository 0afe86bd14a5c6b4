/**
 * A training run followed from a terminal (`lightning train`, the demo): started or resumed in the daemon, its
 * iterations printed as a table as they come, resolved with the run and its checkpoints at the end.
 */
import type { GrpoConfig, TrainingRunDetail } from '../protocol';
import { placementOf } from '../protocol';
import type { RunnerClient } from '../runner/pool';
import { followRun, iterationCells, iterationLine } from '../training/follow';
import { otherNodeCommand } from '../training/torchrun';

/** Starts (or resumes) a run in the daemon and follows it to the end; prints the table as it goes. */
export async function trainAndFollow(
  client: RunnerClient,
  start: { config: GrpoConfig } | { resume: string },
  json: boolean,
): Promise<TrainingRunDetail> {
  const run = await client.request('startTraining', start);
  process.stderr.write(
    `lightning: training run ${run.id} (${run.algorithm}, ${placementOf(run)}) ${'resume' in start ? 'resumed' : 'started'}; Ctrl-C cancels\n`,
  );
  const distributed = 'config' in start ? start.config.distributed : null;
  const others = distributed ? otherNodeCommand(distributed) : null;
  if (others)
    process.stderr.write(
      `lightning: on each other machine (node rank I = 1…${distributed!.nnodes - 1}), run: ${others}\n`,
    );
  if (!json) process.stdout.write(`${iterationLine()}\n`);
  return followRun(client, run.id, {
    onIteration: (step, metrics) => {
      if (!json) process.stdout.write(`${iterationLine(iterationCells(step, metrics))}\n`);
    },
  });
}
