/**
 * `lightning dataset run DATASET -- CMD`: every task × samples as rollouts of one batch, run by
 * the batch runner (one process per rollout, or `--workers` long-lived agent workers); progress on
 * stderr (a bar on a terminal), a summary per task and overall at the end. With a rewards file
 * (`--rewards`, default `.lightning/rewards.json` when it exists) each rollout is scored as it
 * finishes. Ctrl-C stops the agents and marks what is left cancelled; `--resume BATCH` finishes an
 * interrupted batch (with the checkpoint it was started with, if any).
 */
import crypto from 'node:crypto';
import { ensurePrivateDir } from '../../util/privateFiles';
import path from 'node:path';
import { Option, type Command } from 'commander';
import { RolloutMode, type Dataset, type Rollout, type RolloutScore, type Task } from '../../protocol';
import { MAX_ATTEMPT_TIMEOUT_SECONDS } from '../../protocol/runner';
import { canRetry } from '../../protocol/status';
import { ConflictError, InvalidInputError, NotFoundError } from '../../protocol/errors';
import { AgentPidLog, liveRunner, recordRunner } from '../../runner/agentPids';
import { lockBatch, type BatchLock } from '../../runner/batchLock';
import { BatchRunner } from '../../runner/batch';
import type { BatchMode } from '../../runner/pool';
import { unrunnable } from '../../runner/processPool';
import { finishedUnscored, scoreErrors, scoringFor } from '../../runner/scoring';
import { DEFAULT_REWARDS_FILE } from '../../rewards/config';
import type { RpcClient } from '../../protocol/node/connection';
import { connectOrStartDaemon } from '../../client/daemonConnection';
import { Progress } from '../datasetRunProgress';
import { duration, num, table } from '../textTable';
import { rolloutDuration } from '../../protocol/format';
import type { BatchFinished, BatchStarted } from '../../protocol/cliLines';
import { jsonOption, resolveStore, storeOption, type GlobalOptions } from '../options';
import { assertRayImportable, rayOptions, rayOptionsFrom } from '../rayOptions';
import { addCheckpointOptions, resolveRouting, resumeRoutingOptions, type RoutingOptions } from '../callRouting';
import { checkResumedRouting, recordBatchRouting, resumedBatchRouting } from '../batchRouting';

interface DatasetRunOptions extends GlobalOptions, RoutingOptions {
  progress: 'human' | 'json';
  split?: 'train' | 'val' | 'test';
  samples: string;
  concurrency: string;
  timeout: string;
  retries: string;
  mode: RolloutMode;
  label?: string;
  resume?: string;
  workers?: string;
  rewards?: string;
  ray?: string;
  rayPython?: string;
  rayWorkingDir?: string;
}

export function positiveInt(value: string, flag: string, min = 1, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new InvalidInputError(
      `${flag} ${value}: expected an integer ≥ ${min}${max === Number.MAX_SAFE_INTEGER ? '' : ` and ≤ ${max}`}`,
    );
  return n;
}

/** Runs of one task in one batch: more is a typo (each is a rollout recorded before any agent starts). */
export const MAX_SAMPLES = 10_000;

async function batchRollouts(client: RpcClient, batchId: string): Promise<Rollout[]> {
  const all: Rollout[] = [];
  let cursor: string | undefined;
  do {
    const page = await client.request('listRollouts', { batchId, order: 'oldest', limit: 500, cursor });
    all.push(...page.items);
    cursor = page.nextCursor ?? undefined;
  } while (cursor);
  return all;
}

/** The checkpoint a batch's rollouts are pinned to (its first rollout's `policy`), null when none. */
async function pinnedCheckpoint(client: RpcClient, rollout: Rollout): Promise<string | null> {
  return (await client.request('getRollout', { id: rollout.id, spans: false })).servedBy?.checkpointId ?? null;
}

function percentile(values: number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/**
 * Per task and overall: rollouts, success rate, mean reward, p50/p95 duration, mean tokens, rollouts whose automatic
 * scoring reported errors.
 */
export function summarize(
  rollouts: readonly Rollout[],
  scores: ReadonlyMap<string, RolloutScore> = new Map(),
): Array<{
  task: string;
  rollouts: number;
  succeeded: number;
  meanReward: number | null;
  p50Ms: number | null;
  p95Ms: number | null;
  meanTokens: number;
  scoreErrors: number;
}> {
  const groups = new Map<string, Rollout[]>();
  for (const rollout of rollouts) {
    const key = rollout.task?.id ?? '-';
    groups.set(key, [...(groups.get(key) ?? []), rollout]);
  }
  const line = (task: string, list: readonly Rollout[]) => {
    const rewards = list.flatMap((r) => (r.reward === null ? [] : [r.reward]));
    const durations = list.flatMap((r) => (r.endedAt === null ? [] : [rolloutDuration(r)!]));
    return {
      task,
      rollouts: list.length,
      succeeded: list.filter((r) => r.status === 'succeeded').length,
      meanReward: rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : null,
      p50Ms: percentile(durations, 50),
      p95Ms: percentile(durations, 95),
      meanTokens: list.reduce((sum, r) => sum + r.promptTokens + r.completionTokens, 0) / Math.max(1, list.length),
      scoreErrors: list.filter((r) => scoringError(scores.get(r.id)) !== null).length,
    };
  };
  return [...[...groups].map(([task, list]) => line(task, list)), line('(all)', rollouts)];
}

export function registerDatasetRun(dataset: Command): void {
  const command = dataset
    .command('run')
    .description(
      'run an agent over a dataset: each task --samples times, --concurrency at once, as one batch of rollouts',
    )
    .argument('<dataset>', 'dataset name or id (see `lightning dataset list`)')
    .argument('<command...>', 'the agent command (after --); it reads its task from LIGHTNING_TASK')
    .addOption(storeOption())
    .addOption(jsonOption())
    .addOption(
      new Option(
        '--progress <format>',
        'progress on stderr: human lines (a bar on a terminal), or json lines (protocol/cliLines.ts) for programs',
      )
        .choices(['human', 'json'])
        .default('human'),
    )
    .addOption(new Option('--split <split>', 'only this split').choices(['train', 'val', 'test']))
    .option('--samples <n>', 'rollouts per task', '1')
    .option('--concurrency <n>', 'agents running at once', '4')
    .option(
      '--timeout <seconds>',
      'per-attempt time limit: the agent and its children are stopped (worker mode: the attempt ends, its URL is revoked, and a worker left holding nothing is restarted)',
      '120',
    )
    .option('--retries <n>', 'extra attempts after a failure or a timeout', '0')
    .addOption(new Option('--mode <mode>', 'rollout mode').choices(RolloutMode.options).default('train'))
    .option('--label <label>', 'rollout label (default: the dataset name)')
    .option('--upstream <url>', "the agents' upstream when they have no OPENAI_BASE_URL of their own")
    .option('--token-ids', 'ask the serving engine for token ids and logprobs on every call')
    .option('--resume <batch>', 'finish an interrupted batch instead of starting one')
    .option(
      '--rewards <file>',
      `score each rollout as it finishes with this rewards config (default: .lightning/${DEFAULT_REWARDS_FILE} beside the store, when it exists; see \`lightning score\`)`,
    )
    .option(
      '--workers <n>',
      'worker mode: start N long-lived agent processes that take rollouts from LIGHTNING_RUNNER_URL (POST …/next) instead of one process per rollout; --concurrency is then spread over them (see docs/datasets.md, "Worker mode")',
    );
  for (const option of rayOptions()) command.addOption(option);
  addCheckpointOptions(command).action(runDataset);
}

/** The batch's runner once made, and whether Ctrl-C (or SIGTERM, SIGHUP) asked to stop. */
interface Cancellation {
  cancelled: boolean;
  runner: BatchRunner | undefined;
}

async function runDataset(name: string, argv: string[], options: DatasetRunOptions): Promise<void> {
  const samples = positiveInt(options.samples, '--samples', 1, MAX_SAMPLES);
  const concurrency = positiveInt(options.concurrency, '--concurrency');
  const timeoutMs = positiveInt(options.timeout, '--timeout', 1, MAX_ATTEMPT_TIMEOUT_SECONDS) * 1000;
  const retries = positiveInt(options.retries, '--retries', 0);
  const workers = options.workers === undefined ? undefined : positiveInt(options.workers, '--workers');
  const mode: BatchMode =
    workers === undefined
      ? { kind: 'process', command: argv, concurrency }
      : { kind: 'worker', command: argv, workers, concurrencyPerWorker: Math.ceil(concurrency / workers) };
  const ray = rayOptionsFrom(options, process.env);
  // A command that cannot be found is bad input, said before any batch is made (on a Ray cluster it runs elsewhere).
  const missing = ray ? undefined : unrunnable(argv[0]!, process.cwd(), process.env.PATH);
  if (missing !== undefined)
    throw new InvalidInputError(`cannot run ${argv[0]}: ${missing}; check the agent command after --`);
  if (ray) assertRayImportable(ray);
  const storeFile = resolveStore(options);
  const logDirOf = (batch: string): string => path.join(path.dirname(storeFile), 'logs', batch);
  const scoring = scoringFor(
    options.rewards === undefined ? null : path.resolve(options.rewards),
    storeFile,
    process.env,
  );
  const rewardsFile = scoring && 'rewardsFile' in scoring.source ? scoring.source.rewardsFile : null;
  const { client, close } = await connectOrStartDaemon(storeFile);
  const state: Cancellation = { cancelled: false, runner: undefined };
  const cancel = (): void => {
    process.stderr.write('lightning: cancelling the batch: stopping the running agents\n');
    state.cancelled = true;
    state.runner?.cancel();
  };
  // Agents run in their own process groups, so the terminal's signals do not reach them: relay.
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
  const lastResort = (): void => state.runner?.killAll();
  for (const signal of signals) process.on(signal, cancel);
  process.on('exit', lastResort);
  // Held while this process runs the batch (batchLock.ts).
  let lock: BatchLock | undefined;
  try {
    const { dataset: found, items: tasks } = await client.request('listTasks', { dataset: name, split: options.split });
    // No task to run is a mistake in the flags, not an empty batch to record.
    if (!options.resume && tasks.length === 0)
      throw new InvalidInputError(
        options.split === undefined
          ? `dataset ${found.name} has no tasks`
          : `dataset ${found.name} has no ${options.split} tasks: leave out --split, or name a split it has`,
      );
    const existing = options.resume ? await batchRollouts(client, options.resume) : [];
    if (options.resume && existing.length === 0)
      throw new NotFoundError(`batch ${options.resume} has no rollouts in this store`);
    // A resume fails the attempts in flight and stops the agents it finds: never those of a runner still at work. The
    // batch's lock says whether one is (taken at once or not at all: of two resumes started together, one runs, where
    // the lock can be taken here); the runner runner.json names, or one of a build before the lock, is checked too.
    if (options.resume) {
      ensurePrivateDir(logDirOf(options.resume));
      lock = lockBatch(logDirOf(options.resume));
      const runningIt = liveRunner(logDirOf(options.resume));
      if (runningIt !== null || (!lock.held && lock.reason === 'taken'))
        throw new ConflictError(
          `batch ${options.resume} is still being run (lightning dataset run${runningIt === null ? '' : `, pid ${runningIt}`}): --resume finishes a batch whose runner died; wait for that run to finish (stopping it cancels what it has left, which a resume does not run again)`,
        );
      // This process runs the batch from here on.
      recordRunner(logDirOf(options.resume));
    }
    const routing = await resolveRouting(
      client,
      options.resume
        ? resumeRoutingOptions(
            resumedBatchRouting(logDirOf(options.resume), options.resume, options, process.env, (line) =>
              process.stderr.write(`${line}\n`),
            ),
            options.resume,
            await pinnedCheckpoint(client, existing[0]!),
          )
        : options,
      process.env,
    );
    if (options.resume) checkResumedRouting(logDirOf(options.resume), options.resume, routing, process.env);
    // A resumed batch's rollouts as the resume leaves them (what it queued again included).
    const resumed = options.resume ? await requeue(client, existing, logDirOf(options.resume)) : undefined;
    const { batchId, queued } = options.resume
      ? { batchId: options.resume, queued: resumed!.filter((r) => r.status === 'queued').map((r) => r.id) }
      : await createBatch(client, {
          tasks,
          dataset: found,
          samples,
          retries,
          argv,
          options,
          resources: routing.resources,
          state,
        });
    ensurePrivateDir(logDirOf(batchId));
    if (!options.resume) {
      lock = lockBatch(logDirOf(batchId));
      recordRunner(logDirOf(batchId));
      recordBatchRouting(logDirOf(batchId), options, routing);
    }
    const how = `${mode.kind === 'worker' ? `${mode.workers} workers × ${mode.concurrencyPerWorker}` : `${concurrency} at a time`}${ray ? ` on the Ray cluster ${ray.address}` : ''}`;
    if (options.progress === 'json')
      process.stderr.write(
        `${JSON.stringify({ event: 'batch-started', batchId, total: queued.length, scored: Boolean(rewardsFile) } satisfies BatchStarted)}\n`,
      );
    else
      process.stderr.write(
        `lightning: batch ${batchId}: ${queued.length} rollouts of ${found.name}, ${how}${rewardsFile ? `, scored with ${rewardsFile}` : ''}\n`,
      );
    if (state.cancelled) {
      for (const id of queued.splice(0))
        await client.request('transitionRollout', { id, to: 'cancelled', error: 'the batch was cancelled' });
    }
    // A resumed batch's rollouts that ended with no automatic reward (its runner stopped before it scored them, or the
    // batch ran without a rewards file) are scored now.
    const unscored = resumed && scoring ? await finishedUnscored(client, resumed) : [];
    if (unscored.length > 0)
      process.stderr.write(
        `lightning: scoring ${unscored.length} rollout${unscored.length === 1 ? '' : 's'} of the batch that ended unscored before the resume\n`,
      );
    const pids = new AgentPidLog(path.join(logDirOf(batchId), 'agents.jsonl'));
    const progress = new Progress(
      process.stderr,
      queued.length,
      process.stderr.isTTY === true,
      options.progress === 'json',
    );
    const runner = new BatchRunner({
      client,
      mode,
      timeoutMs,
      upstream: routing.upstream,
      providerUpstreams: routing.providerUpstreams,
      tokenIds: routing.tokenIds,
      logDir: logDirOf(batchId),
      env: process.env,
      onSpawn: (pid) => pids.record(pid),
      onAttempt: (event) => progress.attempt(event),
      // Each of the batch's rollouts gets one set of reward rows: a resume and the stopped runner it follows (whose
      // scoring job can outlive it in the daemon) may score one at once, and whichever commits second writes none.
      scoring: scoring && { ...scoring, skipScored: true },
      onScored: (score) => progress.scored(score),
      ray,
    });
    state.runner = runner;
    if (state.cancelled) runner.cancel();
    try {
      await runner.run(queued, unscored);
    } finally {
      progress.finish();
    }
    if (runner.wasCancelled) process.exitCode = 130;
    report(await batchRollouts(client, batchId), batchId, runner.scores, {
      json: options.json === true,
      rewardsFile,
      scored: Boolean(scoring),
    });
  } finally {
    for (const signal of signals) process.off(signal, cancel);
    process.off('exit', lastResort);
    await close();
    // After the daemon's connection is closed: a failure to release leaves nothing open (the system releases it).
    if (lock?.held) lock.release();
  }
}

/**
 * `--resume`: agents a runner that died left running are stopped (they would race the retries); attempts it left
 * running are failed attempts; those and the failed or timed-out rollouts with attempts left are queued again. The
 * batch's rollouts as they are then.
 */
async function requeue(client: RpcClient, existing: readonly Rollout[], logDir: string): Promise<Rollout[]> {
  const stopped = await new AgentPidLog(path.join(logDir, 'agents.jsonl')).stopSurvivors();
  if (stopped > 0)
    process.stderr.write(
      `lightning: stopped ${stopped} agent process${stopped === 1 ? '' : 'es'} left running by the interrupted runner\n`,
    );
  const now: Rollout[] = [];
  for (const rollout of existing) {
    let current = rollout;
    if (current.status === 'running')
      current = await client.request('transitionRollout', {
        id: current.id,
        to: 'failed',
        error: 'the runner stopped during this attempt',
      });
    if (canRetry(current)) current = await client.request('transitionRollout', { id: current.id, to: 'queued' });
    now.push(current);
  }
  return now;
}

/** A new batch: each task `--samples` times as a queued rollout (no more once cancelled). */
async function createBatch(
  client: RpcClient,
  batch: {
    readonly tasks: readonly Task[];
    readonly dataset: Dataset;
    readonly samples: number;
    readonly retries: number;
    readonly argv: string[];
    readonly options: DatasetRunOptions;
    readonly resources: Awaited<ReturnType<typeof resolveRouting>>['resources'];
    readonly state: Cancellation;
  },
): Promise<{ batchId: string; queued: string[] }> {
  const { options, samples, retries } = batch;
  const batchId = `batch-${crypto.randomBytes(6).toString('hex')}`;
  const queued: string[] = [];
  for (const task of batch.tasks) {
    for (let s = 0; s < samples && !batch.state.cancelled; s += 1) {
      const rollout = await client.request('createRollout', {
        mode: options.mode,
        label: options.label ?? batch.dataset.name,
        task: { id: task.id, input: task.input },
        datasetId: batch.dataset.id,
        batchId,
        maxAttempts: retries + 1,
        source: { kind: 'command', argv: batch.argv, cwd: process.cwd() },
        resources: batch.resources,
      });
      queued.push(rollout.id);
    }
  }
  return { batchId, queued };
}

/** The batch's summary on stdout: a `batch-finished` JSON line, or a table per task with the scoring errors. */
function report(
  rollouts: readonly Rollout[],
  batchId: string,
  scores: ReadonlyMap<string, RolloutScore>,
  how: { readonly json: boolean; readonly rewardsFile: string | null; readonly scored: boolean },
): void {
  const summary = summarize(rollouts, scores);
  const scoringErrors = scoringErrorList(rollouts, scores);
  if (how.json) {
    const scored = how.rewardsFile && {
      rewardsFile: how.rewardsFile,
      scored: [...scores.values()].filter((s) => s.value !== null).length,
      errors: scoringErrors,
    };
    process.stdout.write(
      `${JSON.stringify({ event: 'batch-finished', batchId, tasks: summary, ...(scored ? { scoring: scored } : {}) } satisfies BatchFinished)}\n`,
    );
    return;
  }
  const errorsColumn = how.scored ? ['SCORE ERRORS'] : [];
  process.stdout.write(
    `${table(
      ['TASK', 'ROLLOUTS', 'SUCCEEDED', 'MEAN REWARD', 'P50', 'P95', 'TOKENS', ...errorsColumn],
      summary.map((s) => [
        s.task,
        String(s.rollouts),
        `${Math.round((100 * s.succeeded) / Math.max(1, s.rollouts))}%`,
        num(s.meanReward),
        duration(s.p50Ms),
        duration(s.p95Ms),
        String(Math.round(s.meanTokens)),
        ...(how.scored ? [String(s.scoreErrors)] : []),
      ]),
    )}\n`,
  );
  for (const e of scoringErrors)
    process.stdout.write(`score error: ${e.rolloutId} (task ${e.task ?? '-'}): ${e.error}\n`);
  process.stdout.write(
    `Batch ${batchId}. Export it: npx lightning export --batch ${batchId} --out transitions.jsonl\n`,
  );
}

const scoringError = (score: RolloutScore | undefined): string | null => (score ? scoreErrors(score) : null);

/** The rollouts whose scoring reported errors, with them. */
function scoringErrorList(
  rollouts: readonly Rollout[],
  scores: ReadonlyMap<string, RolloutScore>,
): Array<{ rolloutId: string; task: string | null; error: string }> {
  return rollouts.flatMap((r) => {
    const error = scoringError(scores.get(r.id));
    return error ? [{ rolloutId: r.id, task: r.task?.id ?? null, error }] : [];
  });
}
