/**
 * `lightning train --algorithm apo … -- CMD`: flags → APO configuration (errors name the flag); starts the run in the
 * store's daemon (or one started here), which runs it (apo/loop.ts) with this command's environment for its agents;
 * follows it with a progress line per round on stderr, Ctrl-C as a cancel, then a summary (best prompt, its
 * validation score against the seed's, the diff) or, with --json, the run's result.
 */
import type { TrainingFinished, TrainingStarted } from '../../protocol/cliLines';
import path from 'node:path';
import {
  ApoConfig,
  describeIssues,
  userUpstream,
  type ApoConfigInput,
  type ApoResult,
  type ApoTrainingRun,
  type StartEnv,
  type TrainingRunDetail,
} from '../../protocol';
import { assertNever } from '../../protocol/assert';
import { InvalidInputError, LightningError } from '../../protocol/errors';
import { endLines } from '../../apo/roundLines';
import { connectOrStartDaemon } from '../../client/daemonConnection';
import { trainAndFollow } from '../../client/trainAndFollow';
import { num } from '../textTable';
import { resolveStore, type GlobalOptions } from '../options';
import { parseUpstream } from './serve';

export interface ApoFlags extends GlobalOptions {
  algorithm: 'apo';
  resource?: string;
  dataset?: string;
  val?: string;
  beam?: string;
  branch?: string;
  rounds?: string;
  gradientBatch?: string;
  valBatch?: string;
  critiqueModel?: string;
  editModel?: string;
  temperature?: string;
  budgetCalls?: string;
  budgetRollouts?: string;
  seed?: string;
  callAttempts?: string;
  concurrency?: string;
  workers?: string;
  agentMode?: 'process' | 'worker';
  timeout?: string;
  match?: ApoConfig['match'];
  upstream?: string;
  promptFile?: string;
  rewards?: string;
}

/** The flag a configuration field comes from, for error messages. */
const FLAG: Partial<Record<keyof ApoConfig, string>> = {
  valDataset: '--val',
  timeoutMs: '--timeout',
  rewardsFile: '--rewards',
  command: 'the agent command (after --)',
  upstream: 'OPENAI_BASE_URL or --upstream',
};
const flagOf = (field: string): string =>
  FLAG[field as keyof ApoConfig] ?? `--${field.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;

/** A flag's number; text that is not one stays text, so the schema names the flag; absent: the schema's default. */
const number = (value: string | undefined): number | string | undefined =>
  value === undefined || value.trim() === '' || !Number.isFinite(Number(value)) ? value : Number(value);

/** `--agent-mode worker` alone: one worker; `--workers N` alone: worker mode; neither: a process per rollout. */
function workersOf(flags: Pick<ApoFlags, 'workers' | 'agentMode'>): number | string | null {
  if (flags.agentMode === 'process' && flags.workers !== undefined)
    throw new InvalidInputError(
      '--workers: with --agent-mode process APO runs --concurrency agent processes at once; workers are for --agent-mode worker',
    );
  if (flags.workers !== undefined) return number(flags.workers)!;
  return flags.agentMode === 'worker' ? 1 : null;
}

/**
 * The run's configuration from the flags, the agent command and where it runs, and the environment (the user's own
 * OPENAI_BASE_URL is the upstream, else --upstream, else the daemon's).
 */
export function apoConfigFromFlags(
  flags: ApoFlags,
  argv: readonly string[],
  cwd: string,
  env: NodeJS.ProcessEnv,
): ApoConfig {
  if (!flags.resource)
    throw new InvalidInputError('--resource: required with --algorithm apo (the prompt template resource to optimize)');
  if (!flags.dataset) throw new InvalidInputError('--dataset: required (the training tasks)');
  if (argv.length === 0)
    throw new InvalidInputError(
      'give the agent command after --, e.g. lightning train --algorithm apo --resource P --dataset D -- node agent.js',
    );
  const own = userUpstream(env);
  const timeout = number(flags.timeout);
  const input: { [K in keyof ApoConfigInput]: unknown } = {
    algorithm: 'apo',
    command: { argv: [...argv], cwd },
    upstream:
      own !== null ? parseUpstream(own, 'OPENAI_BASE_URL') : flags.upstream ? parseUpstream(flags.upstream) : null,
    resource: flags.resource,
    dataset: flags.dataset,
    valDataset: flags.val ?? null,
    beam: number(flags.beam),
    branch: number(flags.branch),
    rounds: number(flags.rounds),
    gradientBatch: number(flags.gradientBatch),
    valBatch: number(flags.valBatch),
    critiqueModel: flags.critiqueModel,
    editModel: flags.editModel,
    temperature: number(flags.temperature),
    budgetCalls: number(flags.budgetCalls),
    budgetRollouts: number(flags.budgetRollouts),
    seed: number(flags.seed),
    callAttempts: number(flags.callAttempts),
    concurrency: number(flags.concurrency),
    workers: workersOf(flags),
    timeoutMs: typeof timeout === 'number' ? Math.round(timeout * 1000) : timeout,
    match: flags.match,
    promptFile: flags.promptFile === undefined ? null : path.resolve(flags.promptFile),
    rewardsFile: flags.rewards === undefined ? null : path.resolve(flags.rewards),
  };
  const parsed = ApoConfig.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = String(issue.path[0] ?? '');
    throw new InvalidInputError(
      `${flagOf(field)}: ${
        describeIssues(parsed.error, '')
          .replace(/^[^:]*: /, '')
          .split('; ')[0]
      } (got ${JSON.stringify(input[field as keyof ApoConfig])})`,
    );
  }
  return parsed.data;
}

function summary(result: ApoResult): string {
  const lines = [
    `APO run ${result.runId}: ${result.roundsCompleted} round(s), ${result.llmCalls} LLM calls, ${result.rollouts} rollouts (${result.stopReason}).`,
    `Validation score: seed ${num(result.seed.valScore)} → best ${num(result.best.valScore)} (${result.best.candidateId}, ${result.resource} version ${result.best.version}).`,
  ];
  if (result.skipped.length)
    lines.push(
      `Skipped branches: ${result.skipped.map((s) => `round ${s.round} ${s.parentId} ${s.stage}: ${s.error}`).join('; ')}`,
    );
  if (result.diff)
    lines.push(
      '',
      'Best prompt vs the seed:',
      result.diff,
      '',
      `Keep it: npx lightning resource set-current ${result.resource} ${result.best.version}`,
    );
  else lines.push('No candidate beat the seed prompt.');
  return lines.join('\n');
}

/** This command's environment, for the run's agents (and the optimizer's key): they run as if started from here. */
function startEnv(env: NodeJS.ProcessEnv): StartEnv {
  return Object.fromEntries(Object.entries(env).filter((entry): entry is [string, string] => entry[1] !== undefined));
}

/** The daemon names a configuration field (`params.config.budgetRollouts: …`); the user typed a flag. */
function inFlagWords(error: unknown): unknown {
  if (error instanceof LightningError)
    error.message = error.message.replace(/^params\.config\.(\w+)/, (_, field: string) => flagOf(field));
  return error;
}

/** The run followed, as the APO run it was started as. */
function apoRun(detail: TrainingRunDetail): ApoTrainingRun {
  switch (detail.algorithm) {
    case 'apo':
      return detail.run;
    case 'grpo':
    case 'sft':
      throw new LightningError(`training run ${detail.run.id} is a ${detail.algorithm} run, not the APO run started`);
    default:
      return assertNever(detail);
  }
}

/** The run's result, or (none: cancelled before the seed was scored, or failed) why there is none. */
function outcome(run: ApoTrainingRun): { result: ApoResult } | { exitCode: number; message: string } {
  if (run.result !== null) return { result: run.result };
  switch (run.status) {
    case 'cancelled':
      return { exitCode: 130, message: 'the training run was cancelled before the seed prompt was scored' };
    case 'failed':
      return { exitCode: 1, message: `training run ${run.id} failed: ${run.error ?? 'no message'}` };
    case 'succeeded':
    case 'queued':
    case 'running':
      return { exitCode: 1, message: `training run ${run.id} ended ${run.status} without a result` };
    default:
      return assertNever(run.status);
  }
}

export async function runApoCommand(argv: string[], flags: ApoFlags): Promise<void> {
  const config = apoConfigFromFlags(flags, argv, process.cwd(), process.env);
  const { client, close } = await connectOrStartDaemon(resolveStore(flags));
  try {
    const detail = await trainAndFollow(client, { config, env: startEnv(process.env) }, flags.json ?? false, (run) =>
      process.stdout.write(
        flags.json
          ? `${JSON.stringify({ event: 'training-started', algorithm: 'apo', runId: run.id } satisfies TrainingStarted)}\n`
          : `APO run ${run.id}\n`,
      ),
    ).catch((error: unknown) => {
      throw inFlagWords(error);
    });
    const ended = outcome(apoRun(detail));
    if (!('result' in ended)) {
      process.stderr.write(`lightning: ${ended.message}\n`);
      process.exitCode = ended.exitCode;
      return;
    }
    const { result } = ended;
    for (const line of endLines(result, config)) process.stderr.write(`apo: ${line}\n`);
    if (result.stopReason === 'cancelled') process.exitCode = 130;
    process.stdout.write(
      flags.json
        ? `${JSON.stringify({ event: 'training-finished', algorithm: 'apo', ...result } satisfies TrainingFinished)}\n`
        : `${summary(result)}\n`,
    );
  } finally {
    await close();
  }
}
