/**
 * The Python trainer worker on the CPU (`python3 -m lightning_trainer.bench`, tiny model): one update on
 * 16 × 64 tokens against one bare torch step on the same batch, and serving throughput through its HTTP
 * endpoint at 1 and 8 concurrent requests against calling its batched generate() directly (no HTTP)
 * with batch 1 and 8.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fmt, rows } from './table';

interface TrainerBench {
  updateSeconds16x64: number;
  bareStepSeconds16x64: number;
  directTokensPerSecondBatch1: number;
  directTokensPerSecondBatch8: number;
  httpTokensPerSecondConcurrency1: number;
  httpTokensPerSecondConcurrency8: number;
}

export function trainerBenchmark(): void {
  const python = process.env.LIGHTNING_PYTHON ?? '/usr/bin/python3';
  const run = spawnSync(python, ['-m', 'lightning_trainer.bench'], {
    env: { ...process.env, PYTHONPATH: path.resolve(__dirname, '../../trainer-daemon/python') },
    encoding: 'utf8',
  });
  if (run.status !== 0) throw new Error(`trainer bench failed: ${run.stderr || run.error?.message}`);
  const result = JSON.parse(run.stdout) as TrainerBench;
  rows.push({
    metric: 'trainer: one update, 16 × 64 tokens (tiny model, CPU)',
    result: `${fmt(result.updateSeconds16x64 * 1000)} ms`,
    baseline: `${fmt(result.bareStepSeconds16x64 * 1000)} ms (one bare forward, loss, backward, AdamW step in plain torch)`,
    ratio: `${fmt(result.updateSeconds16x64 / result.bareStepSeconds16x64, 2)}×`,
    target: 'reported',
    met: '—',
  });
  for (const n of [1, 8] as const) {
    const http = n === 1 ? result.httpTokensPerSecondConcurrency1 : result.httpTokensPerSecondConcurrency8;
    const direct = n === 1 ? result.directTokensPerSecondBatch1 : result.directTokensPerSecondBatch8;
    rows.push({
      metric: `trainer: serving, ${n} concurrent HTTP request${n > 1 ? 's' : ''} (tiny model, CPU)`,
      result: `${fmt(http)} tokens/s`,
      baseline: `${fmt(direct)} tokens/s (batched generate(), batch ${n}, no HTTP)`,
      ratio: `${fmt(http / direct, 2)}×`,
      target: 'reported',
      met: '—',
    });
  }
}
