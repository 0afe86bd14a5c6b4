/**
 * `lightning train --algorithm grpo --model tiny|HF_NAME --dataset D [--val V] [--iterations K] … -- CMD`:
 * starts a training run in the store's daemon (or one started here), prints a row per iteration and
 * the checkpoints at the end; Ctrl-C cancels, `--resume RUN` continues from the last checkpoint,
 * `--list` shows the runs. The loop itself is `runGrpo` (training/grpo.ts), run by the daemon.
 */
import path from 'node:path';
import { Option, type Command } from 'commander';
import { GrpoConfig, describeIssues, type GrpoConfigInput, type TrainingRun, type TrainingRunDetail } from '../../protocol';
import { InvalidInputError } from '../../errors';
import { followRun, iterationCells, iterationLine } from '../../training/follow';
import type { RunnerClient } from '../../runner/batch';
import { connectOrStartDaemon } from '../daemonConnection';
import { table, time } from '../format';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';

interface TrainOptions extends GlobalOptions {
  algorithm: 'grpo';
  model?: string;
  fromConfig?: boolean;
  lora?: boolean;
  dataset?: string;
  val?: string;
  iterations?: string;
  samples?: string;
  tasksPerIteration?: string;
  lr?: string;
  workers?: string;
  agentMode?: 'process' | 'worker';
  perWorker?: string;
  evalEvery?: string;
  seed?: string;
  timeout?: string;
  warmStart?: string;
  warmStartSteps?: string;
  warmStartUntil?: string;
  klCoef?: string;
  device?: 'auto' | 'cpu' | 'cuda';
  python?: string;
  resume?: string;
  list?: boolean;
}

/** Config keys → the flag a user typed, so errors name what they can fix. */
const FLAGS: Record<string, string> = {
  model: '--model', dataset: '--dataset', valDataset: '--val', iterations: '--iterations', samples: '--samples', tasksPerIteration: '--tasks-per-iteration',
  lr: '--lr', workers: '--workers', perWorker: '--per-worker', evalEvery: '--eval-every', seed: '--seed', timeoutSeconds: '--timeout',
  warmStart: '--warm-start', klCoef: '--kl-coef', command: 'the agent command (after --)',
};

function numberFlag(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n)) throw new InvalidInputError(`${flag} ${value}: not a number`);
  return n;
}

/** The run's config from the flags, checked by the protocol schema (errors name the flag). */
export function grpoConfigFromFlags(options: TrainOptions, argv: string[], cwd: string): GrpoConfig {
  if (!options.model) throw new InvalidInputError('--model is required: tiny (the built-in policy) or a Hugging Face model name or path');
  if (!options.dataset) throw new InvalidInputError('--dataset is required (see `lightning dataset list`)');
  const input: GrpoConfigInput = {
    algorithm: 'grpo',
    model: options.model === 'tiny' ? { kind: 'tiny' } : { kind: 'hf', name: options.model, ...(options.fromConfig ? { fromConfig: true } : {}) },
    ...(options.lora ? { adapter: { kind: 'lora' as const } } : {}),
    dataset: options.dataset,
    valDataset: options.val ?? null,
    iterations: numberFlag(options.iterations, '--iterations'),
    samples: numberFlag(options.samples, '--samples'),
    tasksPerIteration: numberFlag(options.tasksPerIteration, '--tasks-per-iteration') ?? null,
    lr: numberFlag(options.lr, '--lr'),
    workers: numberFlag(options.workers, '--workers'),
    agentMode: options.agentMode,
    perWorker: numberFlag(options.perWorker, '--per-worker'),
    evalEvery: numberFlag(options.evalEvery, '--eval-every'),
    seed: numberFlag(options.seed, '--seed'),
    timeoutSeconds: numberFlag(options.timeout, '--timeout'),
    klCoef: numberFlag(options.klCoef, '--kl-coef'),
    warmStart: options.warmStart
      ? { file: path.resolve(options.warmStart), steps: numberFlag(options.warmStartSteps, '--warm-start-steps'), untilSampledAccuracy: numberFlag(options.warmStartUntil, '--warm-start-until') ?? null }
      : null,
    device: options.device,
    python: options.python ?? null,
    command: { argv, cwd },
  };
  const parsed = GrpoConfig.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const key = String(issue.path[0] ?? '');
    throw new InvalidInputError(`${FLAGS[key] ?? key}: ${describeIssues(parsed.error, '').replace(/^[^:]*: /, '')}`);
  }
  return parsed.data;
}

function printRuns(runs: ReadonlyArray<TrainingRun & { step: number; latest: Record<string, number> }>): void {
  process.stdout.write(`${table(['RUN', 'ALGORITHM', 'STATUS', 'ITER', 'REWARD', 'VAL', 'CREATED'], runs.map((r) => [r.id, r.algorithm, r.status, String(r.step), r.latest['reward/mean']?.toFixed(2) ?? '-', r.latest['val/reward']?.toFixed(2) ?? '-', time(r.createdAt)]))}\n`);
}

/** Starts (or resumes) a run in the daemon and follows it to the end; prints the table as it goes. */
export async function trainAndFollow(client: RunnerClient, start: { config: GrpoConfig } | { resume: string }, json: boolean): Promise<TrainingRunDetail> {
  const run = await client.request('startTraining', start);
  process.stderr.write(`lightning: training run ${run.id} (${run.algorithm}) ${'resume' in start ? 'resumed' : 'started'}; Ctrl-C cancels\n`);
  if (!json) process.stdout.write(`${iterationLine()}\n`);
  return followRun(client, run.id, {
    onIteration: (step, metrics) => {
      if (!json) process.stdout.write(`${iterationLine(iterationCells(step, metrics))}\n`);
    },
  });
}

export function registerTrain(program: Command): void {
  program
    .command('train')
    .description('train the agent\'s model with reinforcement learning on a dataset: the policy serves the agent\'s LLM calls, each iteration rolls out, updates and checkpoints')
    .argument('[command...]', 'the agent command (after --); it reads its task from LIGHTNING_TASK, or takes rollouts from LIGHTNING_RUNNER_URL with --agent-mode worker')
    .addOption(storeOption())
    .addOption(jsonOption())
    .addOption(new Option('--algorithm <name>', 'training algorithm').choices(['grpo']).default('grpo'))
    .option('--model <model>', '"tiny" (built-in small policy, no download) or a Hugging Face model name or path')
    .option('--from-config', 'Hugging Face model: random weights from its config (no weights download)')
    .option('--lora', 'train LoRA adapters (the default for Hugging Face models)')
    .option('--dataset <name>', 'dataset (name or id) whose train split is rolled out')
    .option('--val <name>', 'dataset for validation (its val split); default: the training dataset\'s val split')
    .option('--iterations <n>', 'training iterations', '10')
    .option('--samples <n>', 'rollouts per task per iteration (GRPO group size)', '8')
    .option('--tasks-per-iteration <n>', 'train tasks sampled per iteration (default: all)')
    .option('--lr <rate>', 'learning rate', '3e-4')
    .option('--workers <n>', 'agents at once (process mode) or agent workers (worker mode)', '8')
    .addOption(new Option('--agent-mode <mode>', 'process: the command once per rollout; worker: long-lived workers (LIGHTNING_RUNNER_URL)').choices(['process', 'worker']).default('process'))
    .option('--per-worker <n>', 'worker mode: rollouts one worker runs at once', '16')
    .option('--eval-every <n>', 'validate every n iterations', '5')
    .option('--seed <n>', 'random seed', '0')
    .option('--timeout <seconds>', 'per-rollout time limit', '120')
    .option('--warm-start <file>', 'supervised warm start first, on a chat JSONL file (lightning export --format chat)')
    .option('--warm-start-steps <n>', 'warm start: at most this many steps', '200')
    .option('--warm-start-until <accuracy>', 'warm start: stop once this fraction of sampled completions matches the demonstrations')
    .option('--kl-coef <c>', 'KL penalty to the reference policy', '0')
    .addOption(new Option('--device <device>', 'where the policy runs').choices(['auto', 'cpu', 'cuda']).default('auto'))
    .option('--python <path>', 'the Python that runs the trainer (default: see `lightning doctor`)')
    .option('--resume <run>', 'continue a cancelled or failed run from its last checkpoint')
    .option('--list', 'list training runs')
    .action(async (argv: string[], options: TrainOptions) => {
      const storeFile = resolveStore(options);
      let start: { config: GrpoConfig } | { resume: string } | undefined;
      if (options.resume) start = { resume: options.resume };
      else if (!options.list) {
        if (argv.length === 0) throw new InvalidInputError('give the agent command after --, e.g. lightning train --model tiny --dataset D -- node agent.js');
        start = { config: grpoConfigFromFlags(options, argv, process.cwd()) };
      }
      const { client, close } = await connectOrStartDaemon(storeFile);
      try {
        if (!start) {
          const { items } = await client.request('listTraining', {});
          if (options.json) process.stdout.write(`${JSON.stringify(items)}\n`);
          else printRuns(items);
          return;
        }
        const detail = await trainAndFollow(client, start, options.json ?? false);
        const { run, checkpoints } = detail;
        if (options.json) process.stdout.write(`${JSON.stringify({ event: 'training-finished', run, checkpoints })}\n`);
        else {
          process.stdout.write(`Run ${run.id} ${run.status}${run.error && run.status !== 'cancelled' ? `: ${run.error}` : ''}. ${checkpoints.length} checkpoint(s)${checkpoints.length ? `, the last: ${checkpoints.at(-1)!.path}` : ''}.\n`);
        }
        if (run.status === 'cancelled') process.exitCode = 130;
        else if (run.status === 'failed') process.exitCode = 1;
      } finally {
        await close();
      }
    });
}
