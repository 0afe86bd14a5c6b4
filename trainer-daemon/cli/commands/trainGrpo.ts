/**
 * `lightning train --algorithm grpo --model tiny|HF_NAME --dataset D [--val V] [--iterations K] … -- CMD`:
 * flags → GRPO configuration (errors name the flag); starts a training run in the store's daemon (or
 * one started here), prints a row per iteration and the checkpoints at the end; Ctrl-C cancels,
 * `--resume RUN` continues from the last checkpoint. The loop itself is `runGrpo` (training/grpo.ts),
 * run by the daemon.
 */
import type { TrainingFinished } from '../../protocol/cliLines';
import path from 'node:path';
import { GrpoConfig, checkpointsOf, describeIssues, type GrpoConfigInput, type SftConfig } from '../../protocol';
import { parseKeepCheckpoints, type KeepCheckpoints } from '../../protocol/checkpoints';
import { InvalidInputError } from '../../protocol/errors';
import { MAX_ATTEMPT_TIMEOUT_SECONDS } from '../../protocol/runner';
import { connectOrStartDaemon } from '../../client/daemonConnection';
import { trainAndFollow } from '../../client/trainAndFollow';
import { resolveStore, type GlobalOptions } from '../options';
import { assertRayFlagsWithRay } from '../rayOptions';
import { policiesFromFlags, regexFlag } from './trainPolicies';

export interface GrpoFlags extends GlobalOptions {
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
  lossType?: 'grpo' | 'bnpo' | 'dr_grpo' | 'dapo';
  clip?: string;
  clipHigh?: string;
  scaleRewards?: 'group' | 'none';
  std?: 'sample' | 'population';
  maxResponseLength?: string;
  klBiasCorrection?: boolean;
  zeroAdvantage?: 'keep' | 'drop';
  device?: 'auto' | 'cpu' | 'cuda';
  python?: string;
  resume?: string;
  rewards?: string;
  nprocPerNode?: string;
  fsdp?: boolean;
  nnodes?: string;
  rdzvEndpoint?: string;
  ray?: string;
  rayPython?: string;
  rayWorkingDir?: string;
  keepCheckpoints?: string;
  agent?: string;
  /** `--policy NAME=REGEX`, once per policy. */
  policy?: string[];
  /** `--policy-reward NAME=DIMENSION`: a policy's episode reward read from another reward dimension. */
  policyReward?: string[];
}

/** Config keys → the flag a user typed, so errors name what they can fix. */
const FLAGS: Record<string, string> = {
  model: '--model',
  dataset: '--dataset',
  valDataset: '--val',
  iterations: '--iterations',
  samples: '--samples',
  tasksPerIteration: '--tasks-per-iteration',
  lr: '--lr',
  workers: '--workers',
  perWorker: '--per-worker',
  evalEvery: '--eval-every',
  seed: '--seed',
  timeoutSeconds: '--timeout',
  warmStart: '--warm-start',
  klCoef: '--kl-coef',
  lossType: '--loss-type',
  clip: '--clip',
  clipHigh: '--clip-high',
  scaleRewards: '--scale-rewards',
  std: '--std',
  maxResponseLength: '--max-response-length',
  klBiasCorrection: '--kl-bias-correction',
  zeroAdvantage: '--zero-advantage',
  command: 'the agent command (after --)',
  rewardsFile: '--rewards',
  distributed: '--nproc-per-node / --nnodes / --rdzv-endpoint / --fsdp',
  ray: '--ray',
  keepCheckpoints: '--keep-checkpoints',
  agent: '--agent',
  policies: '--policy',
  adapter: '--lora',
};

function keepFlag(value: string | undefined): KeepCheckpoints | undefined {
  if (value === undefined) return undefined;
  const keep = parseKeepCheckpoints(value);
  if (typeof keep === 'object') throw new InvalidInputError(`--${keep.error}`);
  return keep;
}

function numberFlag(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n)) throw new InvalidInputError(`${flag} ${value}: not a number`);
  return n;
}

/** `--nproc-per-node N [--nnodes M --rdzv-endpoint HOST:PORT] [--fsdp]`, null without them. */
function distributedFromFlags(options: GrpoFlags): GrpoConfigInput['distributed'] {
  if (options.nprocPerNode === undefined) {
    if (options.fsdp)
      throw new InvalidInputError(
        '--fsdp shards the policy across torchrun ranks: it goes with --nproc-per-node N (N ≥ 2)',
      );
    if (options.nnodes !== undefined || options.rdzvEndpoint !== undefined)
      throw new InvalidInputError('--nnodes and --rdzv-endpoint go with --nproc-per-node (ranks per machine)');
    return null;
  }
  return {
    nprocPerNode: numberFlag(options.nprocPerNode, '--nproc-per-node')!,
    nnodes: numberFlag(options.nnodes, '--nnodes'),
    rdzvEndpoint: options.rdzvEndpoint ?? null,
    fsdp: options.fsdp === true,
  };
}

/** The run's config from the flags, checked by the protocol schema (errors name the flag). */
export function grpoConfigFromFlags(options: GrpoFlags, argv: string[], cwd: string): GrpoConfig {
  if (!options.model)
    throw new InvalidInputError('--model is required: tiny (the built-in policy) or a Hugging Face model name or path');
  if (!options.dataset) throw new InvalidInputError('--dataset is required (see `lightning dataset list`)');
  if (options.maxResponseLength !== undefined && options.lossType !== 'dr_grpo')
    throw new InvalidInputError(
      `--max-response-length: only --loss-type dr_grpo reads it (this run's loss type is ${options.lossType ?? 'dapo, the default'})`,
    );
  // Past a week a rollout's timer would not hold it (Node's timers end at 2^31 ms, ~24.8 days, then fire at once).
  if (options.timeout !== undefined && Number(options.timeout) > MAX_ATTEMPT_TIMEOUT_SECONDS)
    throw new InvalidInputError(
      `--timeout ${options.timeout}: at most ${MAX_ATTEMPT_TIMEOUT_SECONDS} seconds (a week)`,
    );
  assertRayFlagsWithRay(options);
  const warmStartFlag =
    options.warmStartSteps !== undefined
      ? '--warm-start-steps'
      : options.warmStartUntil !== undefined
        ? '--warm-start-until'
        : null;
  if (warmStartFlag !== null && !options.warmStart)
    throw new InvalidInputError(`${warmStartFlag} applies with --warm-start FILE only: add it, or leave the flag out`);
  const input: GrpoConfigInput = {
    algorithm: 'grpo',
    model:
      options.model === 'tiny'
        ? { kind: 'tiny' }
        : { kind: 'hf', name: options.model, ...(options.fromConfig ? { fromConfig: true } : {}) },
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
    lossType: options.lossType,
    clip: numberFlag(options.clip, '--clip'),
    clipHigh: numberFlag(options.clipHigh, '--clip-high') ?? null,
    scaleRewards: options.scaleRewards,
    std: options.std,
    maxResponseLength: numberFlag(options.maxResponseLength, '--max-response-length') ?? null,
    klBiasCorrection: options.klBiasCorrection,
    zeroAdvantage: options.zeroAdvantage,
    warmStart: options.warmStart
      ? {
          file: path.resolve(options.warmStart),
          steps: numberFlag(options.warmStartSteps, '--warm-start-steps'),
          untilSampledAccuracy: numberFlag(options.warmStartUntil, '--warm-start-until') ?? null,
        }
      : null,
    device: options.device,
    python: options.python ?? null,
    rewardsFile: options.rewards === undefined ? null : path.resolve(options.rewards),
    distributed: distributedFromFlags(options),
    ray:
      options.ray === undefined
        ? null
        : {
            address: options.ray,
            python: options.rayPython ?? null,
            workingDir: options.rayWorkingDir === undefined ? null : path.resolve(options.rayWorkingDir),
          },
    command: { argv, cwd },
    keepCheckpoints: keepFlag(options.keepCheckpoints),
    agent: regexFlag(options.agent, '--agent') ?? null,
    policies: policiesFromFlags(options.policy, options.policyReward),
  };
  const parsed = GrpoConfig.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const key = String(issue.path[0] ?? '');
    throw new InvalidInputError(`${FLAGS[key] ?? key}: ${describeIssues(parsed.error, '').replace(/^[^:]*: /, '')}`);
  }
  return parsed.data;
}

export async function runGrpoCommand(argv: string[], options: GrpoFlags): Promise<void> {
  let start: { config: GrpoConfig } | { resume: string };
  if (options.resume) start = { resume: options.resume };
  else {
    if (argv.length === 0)
      throw new InvalidInputError(
        'give the agent command after --, e.g. lightning train --model tiny --dataset D -- node agent.js',
      );
    start = { config: grpoConfigFromFlags(options, argv, process.cwd()) };
  }
  await startAndReport(start, options);
}

/** Starts or resumes a run (GRPO or SFT, which a resumed run's record says), follows it, then prints how it ended. */
export async function startAndReport(
  start: { config: GrpoConfig | SftConfig } | { resume: string },
  options: GlobalOptions,
): Promise<void> {
  const { client, close } = await connectOrStartDaemon(resolveStore(options));
  try {
    const detail = await trainAndFollow(client, start, options.json ?? false);
    const { run } = detail;
    const checkpoints = checkpointsOf(detail);
    if (options.json)
      process.stdout.write(
        `${JSON.stringify({ event: 'training-finished', run, checkpoints } satisfies TrainingFinished)}\n`,
      );
    else {
      process.stdout.write(
        `Run ${run.id} ${run.status}${run.error && run.status !== 'cancelled' ? `: ${run.error}` : ''}. ${checkpoints.length} checkpoint(s)${checkpoints.length ? `, the last: ${checkpoints.at(-1)!.path}` : ''}.\n`,
      );
    }
    if (run.status === 'cancelled') process.exitCode = 130;
    else if (run.status === 'failed') process.exitCode = 1;
  } finally {
    await close();
  }
}
