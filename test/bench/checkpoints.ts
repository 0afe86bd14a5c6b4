/**
 * Checkpoints on disk and out of the run, through the real trainer worker: the time a `save` takes and its size per
 * checkpoint (the demo's tiny policy, full fine-tune; a tiny Hugging Face Qwen2 with LoRA), next to copying the same
 * files (the disk's own cost, same run); the time of an `export` (PEFT adapter, merged model) next to loading that
 * checkpoint in the same worker (the rebuild every export starts with); and the disk a 40-iteration demo's checkpoints
 * take — 41 checkpoints of the demo's model (warm start + 40 iterations) saved by the worker, validated every 10
 * iterations with scripted rewards (best at iteration 20) — with every checkpoint kept whole (before retention) and
 * with the default retention applied as each lands, by the daemon's own code (training/service.ts).
 */
import fs from 'node:fs';
import path from 'node:path';
import { GrpoConfig } from '../../trainer-daemon/protocol';
import { formatBytes } from '../../trainer-daemon/protocol/format';
import { silentLogger } from '../../trainer-daemon/log';
import { Store } from '../../trainer-daemon/store/store';
import { TrainingService } from '../../trainer-daemon/training/service';
import { TrainerWorker } from '../../trainer-daemon/training/worker';
import { measureCheckpoint } from '../../trainer-daemon/training/checkpointFiles';
import { saveTinyQwen } from '../helpers/tinyHf';
import { fmt, median, rows } from './table';

const DEMO_MODEL = { kind: 'tiny' as const, config: { context: 64 } };

/** One update, so the optimizer holds its state (AdamW's two moments per weight) as a training run's checkpoints do. */
async function update(worker: TrainerWorker, promptIds: number[]): Promise<void> {
  const transitions = [0, 1, 2, 3].map((i) => ({
    promptIds,
    responseIds: [97 + i, 98, 10],
    logprobs: null,
    advantage: i % 2 ? 1 : -1,
  }));
  await worker.request('train', { transitions, epochs: 1 });
}

function copySeconds(dir: string, target: string): number {
  const started = performance.now();
  fs.cpSync(dir, target, { recursive: true });
  return (performance.now() - started) / 1000;
}

/** Median save time of `saves` checkpoints of the loaded policy, with the median time to copy each folder. */
async function saveTimes(worker: TrainerWorker, work: string, label: string, saves = 5): Promise<void> {
  const times: number[] = [];
  const copies: number[] = [];
  let last = '';
  for (let i = 0; i < saves; i += 1) {
    last = path.join(work, `save-${i}`);
    const started = performance.now();
    await worker.request('save', { dir: last });
    times.push((performance.now() - started) / 1000);
    copies.push(copySeconds(last, path.join(work, `copy-${i}`)));
  }
  const whole = measureCheckpoint(last).bytes!;
  const optimizer = fs.statSync(path.join(last, 'optimizer.pt')).size;
  rows.push({
    metric: `checkpoint save (${label}): time and size per checkpoint, median of ${saves}`,
    result: `${fmt(median(times) * 1000)} ms, ${formatBytes(whole)} (${formatBytes(optimizer)} of it optimizer state)`,
    baseline: `${fmt(median(copies) * 1000, 1)} ms (copying the same files)`,
    ratio: `${fmt(median(times) / median(copies), 1)}×`,
    target: 'reported',
    met: '—',
  });
}

async function tinySaves(work: string): Promise<void> {
  const worker = await TrainerWorker.start({
    python: process.env.LIGHTNING_PYTHON ?? '/usr/bin/python3',
    logger: silentLogger,
  });
  try {
    await worker.request('load', { model: DEMO_MODEL, adapter: { kind: 'full' }, device: 'cpu', threads: 1 });
    await update(worker, (await worker.request('tokenize', { messages: [{ role: 'user', content: '2 plus 3' }] })).ids);
    await saveTimes(worker, path.join(work, 'tiny'), "tiny policy, the demo's model, full fine-tune");
    await demoDisk(worker, work);
  } finally {
    await worker.shutdown();
  }
}

/** 41 checkpoints as the demo's run saves them; the disk they take kept whole, and with the default retention. */
async function demoDisk(worker: TrainerWorker, work: string): Promise<void> {
  const store = Store.open(path.join(work, 'demo', 'store.db'));
  try {
    const training = new TrainingService(store);
    const config = GrpoConfig.parse({
      model: DEMO_MODEL,
      adapter: { kind: 'full' },
      dataset: 'tools',
      command: { argv: ['agent'], cwd: work },
    });
    const run = store.recordTrainingRun({ algorithm: 'grpo', config });
    const val: Record<number, number> = { 0: 0.2, 10: 0.6, 20: 0.95, 30: 0.85, 40: 0.9 };
    let whole = 0;
    for (let step = 0; step <= 40; step += 1) {
      const dir = training.checkpointDir(run.id, step);
      await worker.request('save', { dir, metrics: {} });
      whole += measureCheckpoint(dir).bytes!;
      await training.recordStep(run.id, step, { 'reward/mean': step / 40 }, { dir, metrics: {} });
      // As the loop does: retention after each checkpoint lands, the step's validation after it.
      await training.applyRetention(run.id, config.keepCheckpoints);
      const reward = val[step];
      if (reward !== undefined) await training.recordStep(run.id, step, { 'val/reward': reward });
    }
    await training.applyRetention(run.id, config.keepCheckpoints);
    const kept = training.measuredCheckpoints(run.id);
    const after = kept.reduce((sum, c) => sum + (c.bytes ?? 0), 0);
    rows.push({
      metric:
        "disk: a 40-iteration demo's checkpoints (41 saved by the worker; validation every 10, scripted, best at 20)",
      result: `${formatBytes(after)} with retention (${kept.length} kept: steps ${kept.map((c) => c.step).join(', ')}; optimizer state in ${kept.filter((c) => c.optimizerState).length})`,
      baseline: `${formatBytes(whole)} (every checkpoint kept whole, as before retention)`,
      ratio: `${fmt(after / whole, 3)}×`,
      target: 'reported',
      met: '—',
    });
  } finally {
    store.close();
  }
}

async function hfSavesAndExports(work: string): Promise<void> {
  const python = process.env.LIGHTNING_TEST_PYTHON;
  if (!python) {
    rows.push({
      metric: 'checkpoint save and export (tiny Hugging Face Qwen2 + LoRA)',
      result: 'not run',
      baseline: '—',
      ratio: '—',
      target: 'set LIGHTNING_TEST_PYTHON to a Python with transformers + peft',
      met: '—',
    });
    return;
  }
  const base = path.join(work, 'hf', 'qwen2');
  saveTinyQwen(python, base);
  const worker = await TrainerWorker.start({ python, logger: silentLogger });
  try {
    await worker.request('load', {
      model: { kind: 'hf', name: base },
      adapter: { kind: 'lora', rank: 8 },
      device: 'cpu',
      threads: 1,
    });
    await update(worker, (await worker.request('tokenize', { messages: [{ role: 'user', content: 'hi there' }] })).ids);
    await saveTimes(worker, path.join(work, 'hf'), 'tiny Hugging Face Qwen2 + LoRA rank 8');
    const checkpoint = path.join(work, 'hf', 'save-0');
    for (const format of ['peft', 'merged'] as const) {
      const exports: number[] = [];
      const loads: number[] = [];
      let bytes = 0;
      for (let i = 0; i < 3; i += 1) {
        let started = performance.now();
        await worker.request('load', { checkpoint, device: 'cpu', threads: 1 });
        loads.push((performance.now() - started) / 1000);
        started = performance.now();
        bytes = (
          await worker.request('export', { checkpoint, format, out: path.join(work, 'hf', `export-${format}-${i}`) })
        ).bytes;
        exports.push((performance.now() - started) / 1000);
      }
      rows.push({
        metric: `checkpoint export --format ${format} (tiny Hugging Face Qwen2 + LoRA), median of 3, in a running worker`,
        result: `${fmt(median(exports) * 1000)} ms, ${formatBytes(bytes)}`,
        baseline: `${fmt(median(loads) * 1000)} ms (load {checkpoint} of the same checkpoint)`,
        ratio: `${fmt(median(exports) / median(loads), 2)}×`,
        target: 'reported (process start not included)',
        met: '—',
      });
    }
  } finally {
    await worker.shutdown();
  }
}

export async function checkpointsBenchmark(work: string): Promise<void> {
  const dir = path.join(work, 'checkpoints');
  fs.mkdirSync(dir, { recursive: true });
  await tinySaves(dir);
  await hfSavesAndExports(dir);
}
