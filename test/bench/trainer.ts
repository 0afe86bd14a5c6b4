/**
 * The Python trainer worker on the CPU (`python3 -m lightning_trainer.bench`): one update on 16 × 64 tokens
 * for each loss type against one bare torch step on the same batch (same run), and serving throughput through
 * its HTTP endpoint (continuous batching) at 1, 8 and 32 concurrent requests against the same requests as
 * batched generate() calls made directly (no HTTP) with batch 1, 8 and 32 — for the built-in tiny policy and
 * for a tiny Hugging Face model with LoRA.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fmt, rows } from './table';

const LOSS_TYPES = ['grpo', 'bnpo', 'dr_grpo', 'dapo'] as const;
const CONCURRENCY = [1, 8, 32] as const;

interface TrainerBench {
  model: string;
  parameters: number;
  updateSeconds16x64: number;
  bareStepSeconds16x64: number;
  [key: `updateSeconds16x64_${string}`]: number;
  [key: `directTokensPerSecondBatch${number}`]: number;
  [key: `httpTokensPerSecondConcurrency${number}`]: number;
}

function runBench(python: string, model: 'tiny' | 'hf'): TrainerBench {
  const run = spawnSync(python, ['-m', 'lightning_trainer.bench', '--model', model], {
    env: { ...process.env, PYTHONPATH: path.resolve(__dirname, '../../trainer-daemon/python') },
    encoding: 'utf8',
  });
  if (run.status !== 0) throw new Error(`trainer bench (${model}) failed: ${run.stderr || run.error?.message}`);
  return JSON.parse(run.stdout) as TrainerBench;
}

function benchRows(result: TrainerBench, label: string): void {
  const bare = `${fmt(result.bareStepSeconds16x64 * 1000)} ms (one bare forward, loss, backward, AdamW step in plain torch)`;
  for (const lossType of LOSS_TYPES) {
    const seconds = result[`updateSeconds16x64_${lossType}`]!;
    rows.push({
      metric: `trainer: one update, 16 × 64 tokens, lossType ${lossType} (${label}, CPU)`,
      result: `${fmt(seconds * 1000)} ms`,
      baseline: bare,
      ratio: `${fmt(seconds / result.bareStepSeconds16x64, 2)}×`,
      target: 'reported',
      met: '—',
    });
  }
  for (const n of CONCURRENCY) {
    const http = result[`httpTokensPerSecondConcurrency${n}`]!;
    const direct = result[`directTokensPerSecondBatch${n}`]!;
    rows.push({
      metric: `trainer: serving, ${n} concurrent HTTP request${n > 1 ? 's' : ''} (${label}, CPU)`,
      result: `${fmt(http)} tokens/s`,
      baseline: `${fmt(direct)} tokens/s (the same requests as batched generate() calls, batch ${n}, no HTTP)`,
      ratio: `${fmt(http / direct, 2)}×`,
      target: n > 1 ? '≥ 0.9×' : 'reported',
      met: n > 1 ? (http / direct >= 0.9 ? 'yes' : 'NO') : '—',
    });
  }
}

/**
 * The built-in tiny policy on the trainer's Python (LIGHTNING_PYTHON, else Debian's), then a tiny Hugging Face
 * Qwen2 (from a config, LoRA) on LIGHTNING_TEST_PYTHON (the venv with transformers + peft), next to it.
 */
export function trainerBenchmark(): void {
  benchRows(runBench(process.env.LIGHTNING_PYTHON ?? '/usr/bin/python3', 'tiny'), 'tiny model');
  const hfPython = process.env.LIGHTNING_TEST_PYTHON;
  if (!hfPython) {
    rows.push({
      metric: 'trainer: tiny Hugging Face Qwen2 + LoRA (CPU)',
      result: 'not run',
      baseline: '—',
      ratio: '—',
      target: 'set LIGHTNING_TEST_PYTHON to a Python with transformers + peft',
      met: '—',
    });
    return;
  }
  const hf = runBench(hfPython, 'hf');
  benchRows(hf, `HF Qwen2 ${fmt(hf.parameters / 1e3)}k params + LoRA`);
}
