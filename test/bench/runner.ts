/**
 * Batch runner overhead: a dataset of trivial agents (a `node` process that exits at once) run
 * through `lightning dataset run` at concurrency 8, against spawning the same processes directly
 * with the same concurrency. Overhead per rollout = (batch − direct) / rollouts, the extra wall time
 * each rollout costs the batch (the whole command: daemon start, creating the rollouts, RPCs, logs).
 * Then worker mode against process mode on the same trivial agent logic (take a rollout, end it
 * successfully) at the same concurrency: the whole command's wall time per rollout.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { runCli } from '../helpers/daemon';
import { fmt, rows } from './table';
import { importTrivialDataset } from './trivialDataset';

const ROLLOUTS = 96;
const CONCURRENCY = 8;
const WORKER_ROLLOUTS = 400;

/** Wall time of `dataset run` over the dataset, checking every rollout succeeded. */
async function timedRun(cwd: string, args: string[], rollouts: number): Promise<{ ms: number; ok: boolean }> {
  const started = performance.now();
  const result = await runCli(['dataset', 'run', 'tasks', '--concurrency', String(CONCURRENCY), '--json', ...args], {
    cwd,
  });
  const ms = performance.now() - started;
  const ok =
    result.code === 0 &&
    (JSON.parse(result.stdout) as { tasks: Array<{ succeeded: number }> }).tasks.at(-1)!.succeeded === rollouts;
  return { ms, ok };
}

/** Worker mode (2 workers × 4) against process mode, the same trivial agent, at concurrency 8. */
async function workerModeBenchmark(work: string): Promise<void> {
  const cwd = path.join(work, 'runner-workers');
  await importTrivialDataset(cwd, WORKER_ROLLOUTS, { worker: true });
  const processMode = await timedRun(cwd, ['--', process.execPath, '-e', ''], WORKER_ROLLOUTS);
  const workerMode = await timedRun(cwd, ['--workers', '2', '--', process.execPath, 'worker.js'], WORKER_ROLLOUTS);
  const perRollout = workerMode.ms / WORKER_ROLLOUTS;
  rows.push({
    metric: `runner time per rollout in worker mode (2 workers × 4), ${WORKER_ROLLOUTS} trivial rollouts, concurrency ${CONCURRENCY} (whole command)`,
    result: `${fmt(perRollout, 2)} ms/rollout (${fmt(workerMode.ms)} ms in all)`,
    baseline: `${fmt(processMode.ms / WORKER_ROLLOUTS, 2)} ms/rollout in process mode, same agent logic (${fmt(processMode.ms)} ms)`,
    ratio: `${fmt(workerMode.ms / processMode.ms, 2)}×`,
    target: '≤ 20 ms/rollout',
    met: processMode.ok && workerMode.ok && perRollout <= 20 ? 'yes' : 'NO',
  });
}

async function direct(): Promise<number> {
  let next = 0;
  const started = performance.now();
  const worker = async (): Promise<void> => {
    while (next++ < ROLLOUTS) {
      await new Promise((resolve) => spawn(process.execPath, ['-e', ''], { stdio: 'ignore' }).on('exit', resolve));
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return performance.now() - started;
}

export async function runnerBenchmark(work: string): Promise<void> {
  const cwd = path.join(work, 'runner');
  await importTrivialDataset(cwd, ROLLOUTS);
  const baseline = await direct();
  const started = performance.now();
  const result = await runCli(
    ['dataset', 'run', 'tasks', '--concurrency', String(CONCURRENCY), '--json', '--', process.execPath, '-e', ''],
    { cwd },
  );
  const batch = performance.now() - started;
  const ok =
    result.code === 0 &&
    (JSON.parse(result.stdout) as { tasks: Array<{ task: string; succeeded: number }> }).tasks.at(-1)!.succeeded ===
      ROLLOUTS;
  const overhead = (batch - baseline) / ROLLOUTS;
  rows.push({
    metric: `batch runner overhead per rollout, ${ROLLOUTS} trivial agents, concurrency ${CONCURRENCY} (whole command, daemon start included)`,
    result: `${fmt(overhead, 1)} ms/rollout of wall time (${fmt(batch)} ms in all)`,
    baseline: `${fmt(baseline)} ms (same processes spawned directly, same concurrency)`,
    ratio: `${fmt(batch / baseline, 2)}×`,
    target: '≤ 20 ms/rollout',
    met: ok && overhead <= 20 ? 'yes' : 'NO',
  });
  await workerModeBenchmark(work);
}
