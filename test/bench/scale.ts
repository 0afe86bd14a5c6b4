/**
 * Scale-out (docs/scale-out.md), each beside its same-run baseline:
 * * 400 trivial rollouts in worker mode (2 workers × 4) with the workers as Ray tasks on a local Ray head
 *   (`--ray`, 2 CPUs) against the same run with local workers. Needs a Python with ray: LIGHTNING_TEST_PYTHON.
 * * A GRPO run's rollout time per iteration (tiny model, 16 rollouts, worker mode 2 × 8) with the workers as Ray
 *   tasks against the same run with local workers: the run's one Ray driver serves every batch.
 * * One policy update of the same batch (tiny model, CPU) on 2 gloo ranks under torchrun against 1 process,
 *   both through the trainer worker protocol (`lightning train --nproc-per-node 2` vs the default); and on 2 FSDP
 *   ranks (`--fsdp`, torch 2: LIGHTNING_TEST_PYTHON) against 1 process and 2 replicas of the same Python.
 */
import path from 'node:path';
import { silentLogger } from '../../trainer-daemon/log';
import { TrainerWorker } from '../../trainer-daemon/training/worker';
import fs from 'node:fs';
import { toolsTasks } from '../../trainer-daemon/demo/tasks';
import { REPO_ROOT, runCli } from '../helpers/daemon';
import { rayPython, startRayHead } from '../helpers/ray';
import { fmt, median, rows } from './table';
import { importTrivialDataset } from './trivialDataset';

const ROLLOUTS = 400;

async function timedRun(cwd: string, args: string[]): Promise<{ seconds: number; ok: boolean; stderr: string }> {
  const started = performance.now();
  const result = await runCli(
    [
      'dataset',
      'run',
      'tasks',
      '--concurrency',
      '8',
      '--workers',
      '2',
      '--json',
      ...args,
      '--',
      process.execPath,
      path.join(cwd, 'worker.js'),
    ],
    { cwd },
  );
  const seconds = (performance.now() - started) / 1000;
  const ok =
    result.code === 0 &&
    (JSON.parse(result.stdout) as { tasks: Array<{ succeeded: number }> }).tasks.at(-1)!.succeeded === ROLLOUTS;
  return { seconds, ok, stderr: result.stderr };
}

/** The median `rollout/seconds` of a 4-iteration GRPO run's iterations (worker mode 2 × 8, 16 rollouts each). */
async function grpoRolloutSeconds(cwd: string, args: string[]): Promise<number> {
  const agent = path.join(REPO_ROOT, 'test', 'fixtures', 'agents', 'parity-worker.mjs');
  const run = await runCli(
    [
      'train',
      '--model',
      'tiny',
      '--dataset',
      'tools',
      '--iterations',
      '4',
      '--samples',
      '4',
      '--tasks-per-iteration',
      '4',
      '--eval-every',
      '100',
      '--agent-mode',
      'worker',
      '--workers',
      '2',
      '--per-worker',
      '8',
      '--device',
      'cpu',
      '--python',
      process.env.LIGHTNING_PYTHON ?? '/usr/bin/python3',
      '--keep-checkpoints',
      'all',
      '--json',
      ...args,
      '--',
      process.execPath,
      agent,
    ],
    { cwd, env: { OPENAI_BASE_URL: '', OPENAI_API_KEY: '' } },
  );
  if (run.code !== 0) throw new Error(`the GRPO run failed: ${run.stderr}`);
  const { checkpoints } = JSON.parse(run.stdout.trim().split('\n').at(-1)!) as {
    checkpoints: Array<{ step: number; metrics: Record<string, number> }>;
  };
  return median(checkpoints.filter((c) => c.step > 0).map((c) => c.metrics['rollout/seconds']!));
}

async function rayTraining(work: string, python: string, address: string): Promise<void> {
  const cwd = path.join(work, 'scale-ray-grpo');
  fs.mkdirSync(cwd, { recursive: true });
  fs.writeFileSync(
    path.join(cwd, 'tasks.jsonl'),
    toolsTasks(8, 4)
      .map((task) => JSON.stringify(task))
      .join('\n'),
  );
  await runCli(['dataset', 'import', 'tasks.jsonl', '--name', 'tools'], { cwd });
  const local = await grpoRolloutSeconds(cwd, []);
  const ray = await grpoRolloutSeconds(cwd, ['--ray', address, '--ray-python', python]);
  rows.push({
    metric:
      "scale: a GRPO iteration's rollouts (tiny model, 16 rollouts, worker mode 2 × 8), workers as Ray tasks on a local head (median of 4 iterations)",
    result: `${fmt(ray, 2)} s per iteration`,
    baseline: `${fmt(local, 2)} s, local workers`,
    ratio: `${fmt(ray / local, 2)}× the local time`,
    target: 'reported (one Ray driver per run: no reconnect per batch)',
    met: '—',
  });
}

async function rayRollouts(work: string): Promise<void> {
  const python = rayPython();
  const cwd = path.join(work, 'scale-ray');
  await importTrivialDataset(cwd, ROLLOUTS, { worker: true });
  const head = await startRayHead(python);
  try {
    const local = await timedRun(cwd, []);
    const ray = await timedRun(cwd, ['--ray', head.address, '--ray-python', python]);
    if (!ray.ok) throw new Error(`the Ray run failed: ${ray.stderr}`);
    rows.push({
      metric: `scale: ${ROLLOUTS} trivial rollouts, worker mode 2 × 4, workers as Ray tasks on a local head (whole command, incl. connecting to Ray)`,
      result: `${fmt(ROLLOUTS / ray.seconds)} rollouts/s (${fmt(ray.seconds, 1)} s)`,
      baseline: `${fmt(ROLLOUTS / local.seconds)} rollouts/s, local workers (${fmt(local.seconds, 1)} s)`,
      ratio: `${fmt(local.seconds / ray.seconds, 2)}×`,
      target: 'reported',
      met: local.ok && ray.ok ? '—' : 'NO',
    });
    await rayTraining(work, python, head.address);
  } finally {
    await head.stop();
  }
}

/** 128 transitions of 32 prompt + 32 response tokens inside the tiny model's vocabulary, fixed. */
function batch(): Array<{ promptIds: number[]; responseIds: number[]; logprobs: null; advantage: number }> {
  let seed = 7;
  const next = (): number => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) % 256;
  return Array.from({ length: 128 }, (_, i) => ({
    promptIds: [256, ...Array.from({ length: 31 }, next)],
    responseIds: Array.from({ length: 32 }, next),
    logprobs: null,
    advantage: i % 2 === 0 ? 1 : -1,
  }));
}

async function updateSeconds(python: string, ranks: number, fsdp = false): Promise<number> {
  const worker = await TrainerWorker.start({
    python,
    logger: silentLogger,
    ...(ranks > 1 ? { distributed: { nprocPerNode: ranks, nnodes: 1, rdzvEndpoint: null } } : {}),
  });
  try {
    await worker.request('load', {
      model: { kind: 'tiny' },
      adapter: { kind: 'full' },
      device: 'cpu',
      seed: 0,
      threads: 1,
      ...(fsdp ? { fsdp: true } : {}),
    });
    const transitions = batch();
    await worker.request('train', { transitions, epochs: 1, minibatch: 128 }); // warm-up
    const samples: number[] = [];
    for (let i = 0; i < 3; i += 1)
      samples.push((await worker.request('train', { transitions, epochs: 1, minibatch: 128 })).seconds);
    return samples.sort((a, b) => a - b)[1]!;
  } finally {
    await worker.shutdown();
  }
}

async function gloo(): Promise<void> {
  const python = process.env.LIGHTNING_PYTHON ?? '/usr/bin/python3';
  const one = await updateSeconds(python, 1);
  const two = await updateSeconds(python, 2);
  rows.push({
    metric: 'scale: one update, 128 × (32 + 32) tokens (tiny model, CPU), 2 gloo ranks under torchrun (median of 3)',
    result: `${fmt(two * 1000)} ms`,
    baseline: `${fmt(one * 1000)} ms, one process`,
    ratio: `${fmt(one / two, 2)}× speed-up`,
    target: 'reported (2 ranks share 2 cores with the machine)',
    met: '—',
  });
  const torch2 = process.env.LIGHTNING_TEST_PYTHON;
  if (!torch2)
    throw new Error(
      'LIGHTNING_TEST_PYTHON is unset: the FSDP row needs a Python with torch 2 (trainer-daemon/python/requirements-test.txt)',
    );
  const [single, replicas, sharded] = [
    await updateSeconds(torch2, 1),
    await updateSeconds(torch2, 2),
    await updateSeconds(torch2, 2, true),
  ];
  rows.push({
    metric: 'scale: the same update on 2 FSDP ranks (--fsdp, torch 2, gloo; median of 3)',
    result: `${fmt(sharded * 1000)} ms`,
    baseline: `${fmt(single * 1000)} ms one process, ${fmt(replicas * 1000)} ms 2 replicas`,
    ratio: `${fmt(single / sharded, 2)}× vs 1, ${fmt(replicas / sharded, 2)}× vs replicas`,
    target: 'reported (FSDP trades all-gathers for memory; on CPU it is not faster)',
    met: '—',
  });
}

export async function scaleBenchmark(work: string): Promise<void> {
  await gloo();
  await rayRollouts(work);
}
