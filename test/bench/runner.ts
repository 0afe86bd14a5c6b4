/**
 * Batch runner overhead: a dataset of trivial agents (a `node` process that exits at once) run
 * through `lightning dataset run` at concurrency 8, against spawning the same processes directly
 * with the same concurrency. Overhead per rollout = (batch − direct) / rollouts, the extra wall time
 * each rollout costs the batch (the whole command: daemon start, creating the rollouts, RPCs, logs).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { runCli } from '../helpers/daemon';
import { fmt, rows } from './table';

const ROLLOUTS = 96;
const CONCURRENCY = 8;

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
  fs.mkdirSync(cwd, { recursive: true });
  fs.writeFileSync(path.join(cwd, 'tasks.jsonl'), Array.from({ length: ROLLOUTS }, (_, i) => JSON.stringify({ id: `t${i}` })).join('\n'));
  await runCli(['dataset', 'import', 'tasks.jsonl'], { cwd });
  const baseline = await direct();
  const started = performance.now();
  const result = await runCli(['dataset', 'run', 'tasks', '--concurrency', String(CONCURRENCY), '--json', '--', process.execPath, '-e', ''], { cwd });
  const batch = performance.now() - started;
  const ok = result.code === 0 && (JSON.parse(result.stdout) as { tasks: Array<{ task: string; succeeded: number }> }).tasks.at(-1)!.succeeded === ROLLOUTS;
  const overhead = (batch - baseline) / ROLLOUTS;
  rows.push({
    metric: `batch runner overhead per rollout, ${ROLLOUTS} trivial agents, concurrency ${CONCURRENCY} (whole command, daemon start included)`,
    result: `${fmt(overhead, 1)} ms/rollout of wall time (${fmt(batch)} ms in all)`,
    baseline: `${fmt(baseline)} ms (same processes spawned directly, same concurrency)`,
    ratio: `${fmt(batch / baseline, 2)}×`,
    target: '≤ 20 ms/rollout',
    met: ok && overhead <= 20 ? 'yes' : 'NO',
  });
}
