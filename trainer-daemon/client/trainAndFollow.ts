/**
 * A training run followed from a terminal (`lightning train`, the demo): started or resumed in the daemon, its steps
 * printed as they come (GRPO's and SFT's table, APO's progress lines: training/follow.ts), resolved with the run and
 * its checkpoints or leaderboard at the end.
 */
import type { DaemonTrainingConfig, StartEnv, TrainingRun, TrainingRunDetail } from '../protocol';
import { placementOf } from '../protocol';
import { assertNever } from '../protocol/assert';
import { resumesFromCheckpoints } from '../protocol/status';
import type { RunnerClient } from '../runner/pool';
import { followRun, runLines } from '../training/follow';
import { otherNodeCommand } from '../training/torchrun';

export type TrainingStart =
  { readonly config: DaemonTrainingConfig; readonly env?: StartEnv } | { readonly resume: string };

/** With `--nnodes`, what to run on each other machine. */
function otherNodes(start: TrainingStart): string | null {
  if (!('config' in start)) return null;
  switch (start.config.algorithm) {
    case 'grpo': {
      const distributed = start.config.distributed;
      const command = distributed ? otherNodeCommand(distributed) : null;
      return distributed && command
        ? `on each other machine (node rank I = 1…${distributed.nnodes - 1}), run: ${command}`
        : null;
    }
    case 'sft':
    case 'apo':
      return null;
    default:
      return assertNever(start.config);
  }
}

/**
 * Starts (or resumes) a run in the daemon and follows it to the end; prints its algorithm's lines as it goes.
 * `onStarted`: the run exists (before its first step).
 */
export async function trainAndFollow(
  client: RunnerClient,
  start: TrainingStart,
  json: boolean,
  onStarted: (run: TrainingRun) => void = () => undefined,
): Promise<TrainingRunDetail> {
  const run = await client.request('startTraining', start);
  process.stderr.write(
    `lightning: training run ${run.id} (${run.algorithm}, ${placementOf(run)}) ${'resume' in start ? 'resumed' : 'started'}; Ctrl-C cancels\n`,
  );
  const others = otherNodes(start);
  if (others) process.stderr.write(`lightning: ${others}\n`);
  onStarted(run);
  const lines = runLines(run);
  if (!json && lines.header !== null) process.stdout.write(`${lines.header}\n`);
  return followRun(client, run.id, {
    completeWhenRecorded: lines.completeWhenRecorded,
    onCancel: resumesFromCheckpoints(run.algorithm)
      ? `its last checkpoint stays (resume with --resume ${run.id})`
      : 'stopping the running agents; its candidates and best prompt so far stay',
    onStep: (step, metrics, detail) => {
      const line = lines.line(step, metrics, detail);
      if (lines.to === 'progress') process.stderr.write(`${line}\n`);
      else if (!json) process.stdout.write(`${line}\n`);
    },
  });
}
