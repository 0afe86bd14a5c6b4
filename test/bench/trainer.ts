/**
 * The Python trainer worker on the CPU (`python3 -m lightning_trainer.bench`): one update on 16 × 64 tokens
 * for each loss type against one bare torch step on the same batch (same run), and serving throughput through
 * its HTTP endpoint (continuous batching) at 1, 8 and 32 concurrent requests against the same requests as
 * batched generate() calls made directly (no HTTP) with batch 1, 8 and 32 — for the built-in tiny policy and
 * for a tiny Hugging Face model with LoRA. Where that Python sees a CUDA device, the same rows again on it (wall
 * seconds, the device synchronised).
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fmt, rows } from './table';

const LOSS_TYPES = ['grpo', 'bnpo', 'dr_grpo', 'dapo'] as const;
const CONCURRENCY = [1, 8, 32] as const;

/** Seconds per phase of one update or bare step (median over rounds; `other` is the rest of the total). */
type Phases = Record<string, number>;

interface TrainerBench {
  model: string;
  kind: 'tiny' | 'hf';
  parameters: number;
  updateSeconds16x64: number;
  bareStepSeconds16x64: number;
  barePhases: Phases;
  [key: `updatePhases_${string}`]: Phases;
  [key: `updateSeconds16x64_${string}`]: number;
  [key: `directTokensPerSecondBatch${number}`]: number;
  [key: `httpTokensPerSecondConcurrency${number}`]: number;
  [key: `servingRatioConcurrency${number}`]: number;
  [key: `httpStepsPerRequestConcurrency${number}`]: number;
  [key: `httpPrefillsPerRequestConcurrency${number}`]: number;
}

type Device = 'cpu' | 'cuda';

/** The model as the rows name it. */
function modelLabel(result: TrainerBench): string {
  return result.kind === 'tiny' ? 'tiny model' : `HF Qwen2 ${fmt(result.parameters / 1e3)}k params + LoRA`;
}

function runBench(python: string, model: 'tiny' | 'hf', device: Device = 'cpu'): TrainerBench {
  const run = spawnSync(python, ['-m', 'lightning_trainer.bench', '--model', model, '--device', device], {
    env: { ...process.env, PYTHONPATH: path.resolve(__dirname, '../../trainer-daemon/python') },
    encoding: 'utf8',
  });
  if (run.status !== 0)
    throw new Error(`trainer bench (${model}, ${device}) failed: ${run.stderr || run.error?.message}`);
  return JSON.parse(run.stdout) as TrainerBench;
}

/** "forward 12.3 · backward 14.0 · …" in ms, largest first. */
function phaseList(phases: Phases): string {
  return Object.entries(phases)
    .filter(([, seconds]) => seconds >= 0.00005)
    .sort(([, a], [, b]) => b - a)
    .map(([name, seconds]) => `${name} ${fmt(seconds * 1000, 1)}`)
    .join(' · ');
}

/**
 * How a row's times were taken: the CPU bench counts the one-thread worker's CPU seconds, the GPU bench wall seconds.
 */
function clockOf(device: Device): string {
  return device === 'cpu' ? 'CPU seconds' : 'GPU wall seconds';
}

function updateRows(result: TrainerBench, label: string, device: Device): void {
  const bareSeconds = result.bareStepSeconds16x64;
  const bare = `${fmt(bareSeconds * 1000, 1)} ms (one bare forward, loss, backward, AdamW step in plain torch)`;
  const ratios = LOSS_TYPES.map((lossType) => result[`updateSeconds16x64_${lossType}`]! / bareSeconds);
  LOSS_TYPES.forEach((lossType, i) => {
    rows.push({
      metric: `trainer: one update, 16 × 64 tokens, lossType ${lossType} (${label}, klCoef 0, ${clockOf(device)}, median)`,
      result: `${fmt(result[`updateSeconds16x64_${lossType}`]! * 1000, 1)} ms`,
      baseline: bare,
      ratio: `${fmt(ratios[i]!, 2)}×`,
      target: '≤ 1.25×',
      met: ratios[i]! <= 1.25 ? 'yes' : 'NO',
    });
  });
  // The update that also measures the KL (klCoef 0: the loop's first, validated and last iterations).
  const measured = result.updateSeconds16x64_dapo_kl!;
  rows.push({
    metric: `trainer: one update that also measures the KL (klCoef 0, a reference forward over every 8th row: the GRPO loop's first, validated and last iterations), lossType dapo (${label}, ${clockOf(device)}, median)`,
    result: `${fmt(measured * 1000, 1)} ms (reference ${fmt(result.updatePhases_dapo_kl!.reference! * 1000, 1)} ms)`,
    baseline: bare,
    ratio: `${fmt(measured / bareSeconds, 2)}×`,
    target: 'reported',
    met: '—',
  });
  // Where the slowest loss type's time goes, next to the bare step's phases.
  const slowest = LOSS_TYPES[ratios.indexOf(Math.max(...ratios))]!;
  rows.push({
    metric: `trainer: where one update's time goes, lossType ${slowest} (${label}, ms per phase, median)`,
    result: phaseList(result[`updatePhases_${slowest}`]!),
    baseline: `bare step: ${phaseList(result.barePhases)}`,
    ratio: '—',
    target: 'reported',
    met: '—',
  });
}

function benchRows(result: TrainerBench, label: string, device: Device = 'cpu'): void {
  updateRows(result, label, device);
  for (const n of CONCURRENCY) {
    const http = result[`httpTokensPerSecondConcurrency${n}`]!;
    const direct = result[`directTokensPerSecondBatch${n}`]!;
    const ratio = result[`servingRatioConcurrency${n}`]!;
    // How the engine batched them: generate() makes one prefill per round of n and max_tokens steps at most.
    const steps = result[`httpStepsPerRequestConcurrency${n}`]!;
    const prefills = result[`httpPrefillsPerRequestConcurrency${n}`]!;
    rows.push({
      metric: `trainer: serving, ${n} concurrent HTTP client${n > 1 ? 's' : ''}, kept-alive (${label}, ${device === 'cpu' ? 'CPU' : 'GPU'}, medians)`,
      result: `${fmt(http)} tokens/s (per request: ${fmt(steps, 2)} decoding steps, ${fmt(prefills, 3)} prefills)`,
      baseline: `${fmt(direct)} tokens/s (the same requests as batched generate() calls, batch ${n}, no HTTP)`,
      ratio: `${fmt(ratio, 2)}× (median of pairs)`,
      target: n > 1 ? '≥ 0.9×' : 'reported',
      met: n > 1 ? (ratio >= 0.9 ? 'yes' : 'NO') : '—',
    });
  }
}

/**
 * The built-in tiny policy on the trainer's Python (LIGHTNING_PYTHON, else Debian's), then a tiny Hugging Face
 * Qwen2 (from a config, LoRA) on LIGHTNING_TEST_PYTHON (the venv with transformers + peft), next to it.
 */
export function trainerBenchmark(): void {
  const tiny = runBench(process.env.LIGHTNING_PYTHON ?? '/usr/bin/python3', 'tiny');
  benchRows(tiny, modelLabel(tiny));
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
  benchRows(hf, modelLabel(hf));
  gpuRows(hfPython);
}

/** The name of the CUDA device `python` sees, or undefined (no CUDA build of torch, no device). */
function cudaDevice(python: string): string | undefined {
  const probe = spawnSync(
    python,
    ['-c', 'import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else "")'],
    { encoding: 'utf8' },
  );
  return probe.status === 0 && probe.stdout.trim() ? probe.stdout.trim() : undefined;
}

/**
 * The same rows on the GPU where the test Python sees one: the tiny policy and the tiny HF model + LoRA, under the
 * worker's bf16 autocast. A failure there is a row saying so; the CPU rows above stay.
 */
function gpuRows(python: string): void {
  const device = cudaDevice(python);
  if (!device) {
    rows.push({
      metric: 'trainer: the same rows on a GPU',
      result: 'not run (no CUDA device here)',
      baseline: '—',
      ratio: '—',
      target: 'reported where a GPU is (docs/benchmarks.md: a run on an H200)',
      met: '—',
    });
    return;
  }
  for (const model of ['tiny', 'hf'] as const) {
    try {
      const result = runBench(python, model, 'cuda');
      benchRows(result, `${modelLabel(result)}, ${device}`, 'cuda');
    } catch (error) {
      rows.push({
        metric: `trainer: ${model} model on ${device}`,
        result: `failed: ${String((error as Error).message).slice(0, 300)}`,
        baseline: '—',
        ratio: '—',
        target: 'runs',
        met: 'NO',
      });
    }
  }
}
