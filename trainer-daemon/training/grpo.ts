/**
 * GRPO, the closed RL loop (docs/training.md, "Training"): the trainer worker serves the policy;
 * each iteration runs the dataset's train tasks × G samples as rollouts against it, LightningRL turns
 * them into transitions (identical credit, GRPO advantages, exact token ids from the spans), the
 * worker updates the weights and saves a checkpoint, and the next rollouts use the new weights.
 * Validation rollouts (greedy) run every few iterations. Everything lands in the store as it happens.
 */
import { readFileBounded } from '../util/readFileBounded';
import {
  describeSkipped,
  skippedCallMetrics,
  noSkippedCalls,
  addSkipped,
  type SftExample,
  type GrpoConfig,
  type PolicySpec,
  type Task,
} from '../protocol';
import { InvalidInputError, errorMessage } from '../protocol/errors';
import type { Logger } from '../log';
import type { Disposable } from '../protocol/event';
import type { TrainingService } from './service';
import { findPython } from './python';
import type { BatchFollower, RolloutScoring } from '../runner/pool';
import { RolloutExecutor, type Caller } from './rollouts';
import { TrainerWorker } from './worker';
import { shuffled } from '../util/random';
import { chatToSftExample } from './sftRows';
import {
  groupMetrics,
  iterationTransitions,
  metricKey,
  policyCheckpointDir,
  policyValMetrics,
  resumePolicies,
  updateMetrics,
} from './grpoPolicies';
import { grpoAdvantageOptions, requestedMaxTokens, policyUpdate, workerTrainParams } from './grpoUpdate';

/**
 * How long a step waits for a dying trainer worker to report its exit before blaming the rollouts (torchrun takes
 * ~1–5 s to stop its other ranks).
 */
const WORKER_DEATH_GRACE_MS = 10_000;

export interface GrpoContext {
  /** Everything the loop reads and writes: tasks, batches, steps, checkpoints. */
  readonly training: TrainingService;
  /** The daemon's RPC methods, for the batch runner that runs the agents. */
  readonly call: Caller;
  /** The daemon's worker-batch queue: worker-mode rollouts are followed on it in process. */
  readonly batches: BatchFollower;
  readonly logger: Logger;
  readonly signal: AbortSignal;
  /** How rollouts are scored (the run's rewards file, else the default one), built and checked when the run started. */
  readonly scoring: RolloutScoring | undefined;
  /** The daemon's router of calls to several policies' adapters (capture/policyRoutes.ts's PolicyRouter). */
  readonly policies: PolicyRegistry;
}

/** Where a run with several policies registers its policy servers, for the proxy to route each call to its adapter. */
export interface PolicyRegistry {
  /** Until disposed, calls to these upstreams go to the adapter of the policy whose pattern matches them. */
  register(upstreams: readonly string[], policies: readonly PolicySpec[]): Disposable;
}

/**
 * Reads a chat JSONL file (`lightning export --format chat`): the last assistant message of each line is the
 * completion.
 */
export function readDemonstrations(file: string): SftExample[] {
  const text = readFileBounded(file, 1024 * 1024 * 1024, 'warmStart.file');
  return text.split('\n').flatMap((line, index) => {
    if (!line.trim()) return [];
    const where = `warmStart.file ${file}:${index + 1}`;
    const notObject = new InvalidInputError(
      `${where}: not a JSON object (one chat example per line, as \`lightning export --format chat\` writes)`,
    );
    let example: unknown;
    try {
      example = JSON.parse(line);
    } catch {
      throw notObject;
    }
    if (typeof example !== 'object' || example === null || Array.isArray(example)) throw notObject;
    return [chatToSftExample(example, where)];
  });
}

function meanStd(values: readonly number[]): { mean: number; std: number } {
  if (values.length === 0) return { mean: Number.NaN, std: Number.NaN };
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  return { mean, std: Math.sqrt(values.reduce((a, b) => a + (b - mean) ** 2, 0) / values.length) };
}

class Iterations {
  private readonly executor: RolloutExecutor;

  constructor(
    private readonly runId: string,
    private readonly config: GrpoConfig,
    private readonly ctx: GrpoContext,
    private readonly worker: TrainerWorker,
    private readonly upstreams: { readonly train: string; readonly val: string },
  ) {
    this.executor = new RolloutExecutor({
      call: ctx.call,
      batches: ctx.batches,
      mode:
        config.agentMode === 'worker'
          ? {
              kind: 'worker',
              command: config.command.argv,
              cwd: config.command.cwd,
              workers: config.workers,
              concurrencyPerWorker: config.perWorker,
            }
          : { kind: 'process', command: config.command.argv, cwd: config.command.cwd, concurrency: config.workers },
      timeoutMs: config.timeoutSeconds * 1000,
      logDir: ctx.training.logDir(runId),
      // Rollouts are scored before transitions are built: the reward policy picks human > agent > automatic.
      scoring: ctx.scoring,
      env: config.command.env,
      ray: config.ray
        ? {
            address: config.ray.address,
            python: config.ray.python ?? process.env.LIGHTNING_RAY_PYTHON ?? 'python3',
            ...(config.ray.workingDir ? { workingDir: config.ray.workingDir } : {}),
          }
        : undefined,
    });
    ctx.signal.addEventListener('abort', () => this.executor.cancel(), { once: true });
  }

  /** Creates and runs one batch of rollouts; returns them with their episode rewards (0 when none). */
  async rollouts(
    tasks: readonly Task[],
    samples: number,
    mode: 'train' | 'val',
    step: number,
    checkpoint: string | null,
  ): Promise<{ batchId: string; rewards: number[]; seconds: number; completionTokens: number }> {
    const started = performance.now();
    const source = { kind: 'command' as const, argv: [...this.config.command.argv], cwd: this.config.command.cwd };
    const { batchId, rolloutIds: ids } = await this.ctx.training.openBatch({
      runId: this.runId,
      mode,
      step,
      checkpoint,
      tasks,
      samples,
      source,
    });
    try {
      await this.executor.run({ batchId, rolloutIds: ids, upstream: this.upstreams[mode] });
    } catch (error) {
      // The run fails with it: its rollouts not started are not left queued for good.
      await this.ctx.training
        .settleBatch(batchId, `the training run stopped: ${errorMessage(error)}`)
        .catch(() => undefined);
      throw error;
    } finally {
      // Where the agents ran, also when the batch failed: a failure's nodes are the ones to look at.
      if (this.config.ray && this.ctx.training.isOpen) {
        await this.ctx.training.recordRayNodes(this.runId).catch((error: unknown) =>
          this.ctx.logger.warn('could not record where the rollouts ran', {
            runId: this.runId,
            error: errorMessage(error),
          }),
        );
      }
    }
    // Cancelled before the runner took them: nothing will run those still queued.
    const rollouts = await this.ctx.training.settleBatch(batchId, 'the training run was cancelled');
    const byId = new Map(rollouts.map((r) => [r.id, r]));
    return {
      batchId,
      rewards: ids.map((id) => byId.get(id)?.reward ?? 0),
      seconds: (performance.now() - started) / 1000,
      completionTokens: rollouts.reduce((sum, r) => sum + r.completionTokens, 0),
    };
  }

  async evaluate(valTasks: readonly Task[], step: number, checkpoint: string | null): Promise<Record<string, number>> {
    if (valTasks.length === 0) return {};
    const { batchId, rewards } = await this.rollouts(valTasks, 1, 'val', step, checkpoint);
    const perPolicy =
      this.config.policies.length === 0
        ? {}
        : policyValMetrics([...this.ctx.training.trajectories(batchId)], this.config.policies);
    return { 'val/reward': meanStd(rewards).mean, ...perPolicy };
  }

  /** One GRPO iteration: rollouts, transitions, update, checkpoint. */
  async step(
    trainTasks: readonly Task[],
    step: number,
    checkpoint: string | null,
  ): Promise<{ metrics: Record<string, number>; checkpoint: string } | undefined> {
    const subset =
      this.config.tasksPerIteration === null
        ? trainTasks
        : shuffled(trainTasks, this.config.seed * 100_003 + step).slice(0, this.config.tasksPerIteration);
    const batch = await this.rollouts(subset, this.config.samples, 'train', step - 1, checkpoint);
    if (this.ctx.signal.aborted) return undefined;
    const trajectories = [...this.ctx.training.trajectories(batch.batchId)];
    const rewards = meanStd(batch.rewards);
    const metrics: Record<string, number> = {
      'reward/mean': rewards.mean,
      'reward/std': rewards.std,
      'rollout/seconds': batch.seconds,
      'rollout/tokensPerSecond': batch.completionTokens / Math.max(batch.seconds, 1e-9),
    };
    const policies = this.config.policies;
    const built = iterationTransitions(trajectories, this.config, grpoAdvantageOptions(this.config));
    const all = built.flatMap((b) => b.transitions);
    const skipped = noSkippedCalls();
    for (const { report } of built) addSkipped(skipped, report.skipped);
    Object.assign(metrics, groupMetrics(built));
    for (const { policy, report } of built) {
      if (report.filledNoReward > 0)
        this.ctx.logger.warn(
          `GRPO step ${step}: ${report.filledNoReward} rollout(s) had no ${policy === null ? '' : `${policy}'s `}reward (the agent posted none and no scorer gave one): trained with reward 0`,
          { runId: this.runId },
        );
    }
    Object.assign(metrics, {
      // Calls left out of the batch because they were not whole answers (lightningrl/wholeAnswers.ts).
      ...skippedCallMetrics(skipped),
      // Replies that stopped at their output-token cap: trained as sampled (their rewards teach the policy to finish
      // within the cap), counted so a rising share shows.
      'calls/stoppedAtTokenCap': all.filter((t) => t.stoppedAtTokenCap).length,
    });
    const left = describeSkipped(skipped);
    if (left)
      this.ctx.logger.info(`GRPO step ${step}: ${left} (not whole answers: left out of the batch)`, {
        runId: this.runId,
      });
    // Rollouts against a dead policy server fail for that reason: report the crash, not its symptoms.
    if (this.worker.failed) throw this.worker.failed;
    if (all.length > 0 && all.every((t) => t.needsTokenization)) {
      // No call reached the policy: a worker that is going down is the likelier cause than the agent.
      const failure = await this.worker.failureWithin(WORKER_DEATH_GRACE_MS);
      if (failure) throw failure;
      throw new InvalidInputError(
        'the rollouts recorded no token ids: the agent must send its LLM calls to OPENAI_BASE_URL, ANTHROPIC_BASE_URL or GOOGLE_GEMINI_BASE_URL (the policy being trained answers them)',
      );
    }
    if (
      policies.length > 0 &&
      all.length === 0 &&
      trajectories.some((tr) => tr.spans.some((sp) => sp.category === 'llm'))
    )
      this.ctx.logger.warn(
        `GRPO step ${step}: no call went to a policy (each was answered by the base model): check each --policy REGEX against the agent names (baggage gen_ai.agent.name) and the models the calls ask for`,
        { runId: this.runId },
      );
    const maxTokens = requestedMaxTokens(trajectories);
    let trained = 0;
    let noTokenIds = 0;
    for (const { policy, transitions } of built) {
      const key = metricKey(policy);
      const update = policyUpdate(transitions, this.config.zeroAdvantage, maxTokens);
      const { trainable } = update;
      trained += trainable.length;
      noTokenIds += update.noTokenIds;
      if (policy !== null) metrics[key('transitions')] = trainable.length;
      if (trainable.length === 0) continue;
      const params = workerTrainParams(this.config, trainable, update.requestedCaps, step);
      const result = await this.worker.request('train', policy === null ? params : { ...params, adapter: policy });
      Object.assign(metrics, updateMetrics(result, key));
    }
    metrics.transitions = trained;
    // Calls with no token ids (a model other than the policy answered them) train nothing: counted, and said.
    metrics['skipped/noTokenIds'] = noTokenIds;
    if (noTokenIds > 0)
      this.ctx.logger.warn(
        `GRPO step ${step}: ${noTokenIds} call(s) had no token ids (answered by a model other than the policy being trained, or with no response): left out of the update`,
        { runId: this.runId },
      );
    const dir = this.ctx.training.checkpointDir(this.runId, step);
    if (policies.length === 0) {
      await this.worker.request('save', { dir, metrics });
      await this.ctx.training.recordStep(this.runId, step, metrics, { dir, metrics });
    } else {
      // A checkpoint per policy, each its adapter alone, all saved before the step is recorded (in one commit).
      const saved: Array<{ dir: string; metrics: Record<string, number> }> = [];
      for (const { name } of policies) {
        const own = policyCheckpointDir(dir, name);
        await this.worker.request('save', { dir: own, metrics, adapter: name });
        saved.push({ dir: own, metrics });
      }
      await this.ctx.training.recordPolicySteps(this.runId, step, metrics, saved);
    }
    await retain(this.ctx, this.runId, this.config);
    return { metrics, checkpoint: dir };
  }

  cancel(): void {
    this.executor.cancel();
  }

  /** After the last batch: ends what the rollouts kept across batches (the Ray driver). */
  close(): Promise<void> {
    return this.executor.close();
  }
}

/**
 * The run's retention as each checkpoint lands (training/retention.ts); a file that will not go is a warning, never a
 * failed run.
 */
export async function retain(
  ctx: Pick<GrpoContext, 'training' | 'logger'>,
  runId: string,
  config: Pick<GrpoConfig, 'keepCheckpoints'>,
): Promise<void> {
  try {
    const { remove } = await ctx.training.applyRetention(runId, config.keepCheckpoints);
    if (remove.length > 0)
      ctx.logger.info(`retention: deleted checkpoints of steps ${remove.map((c) => c.step).join(', ')}`, {
        runId,
        keep: config.keepCheckpoints,
      });
  } catch (error) {
    ctx.logger.warn('checkpoint retention failed; the checkpoints stay', { runId, error: errorMessage(error) });
  }
}

function tasksOf(training: TrainingService, dataset: string, split: 'train' | 'val' | undefined): Task[] {
  return training.tasks(dataset, split).items;
}

/**
 * Runs (or, with a checkpoint, continues) run `runId` to its last iteration or until `ctx.signal`
 * aborts. The caller owns the run's status; this throws on failure (with the worker's traceback).
 */
export async function runGrpo(runId: string, config: GrpoConfig, ctx: GrpoContext): Promise<void> {
  const trainTasks = tasksOf(ctx.training, config.dataset, 'train');
  if (trainTasks.length === 0)
    throw new InvalidInputError(`dataset ${config.dataset} has no train tasks (import tasks with "split": "train")`);
  let valTasks: Task[];
  if (config.valDataset) {
    valTasks = tasksOf(ctx.training, config.valDataset, 'val');
    if (valTasks.length === 0) valTasks = tasksOf(ctx.training, config.valDataset, undefined);
  } else valTasks = tasksOf(ctx.training, config.dataset, 'val');

  const python = await findPython(ctx.training.storeFile, config.python ?? undefined);
  const worker = await TrainerWorker.start({
    python: python.executable,
    logger: ctx.logger.child('worker'),
    distributed: config.distributed,
  });
  const stop = (): void => worker.dispose();
  let opened: Iterations | undefined;
  let routes: Disposable | undefined;
  try {
    const ranks = worker.ready.distributed?.ranks;
    if (ranks)
      await ctx.training.recordRanks(
        runId,
        ranks.map(({ rank, localRank, host }) => ({ rank, localRank, host })),
      );
    const last = ctx.training.checkpoints(runId).at(-1);
    const chosen =
      config.adapter ?? (config.model.kind === 'tiny' ? { kind: 'full' as const } : { kind: 'lora' as const });
    // Several policies share the base's norms: only their LoRA weights train (the schema refuses trainNorms: true).
    const adapter = config.policies.length > 0 && chosen.kind === 'lora' ? { ...chosen, trainNorms: false } : chosen;
    const loaded = await worker.request('load', {
      model: config.model,
      adapter,
      optimizer: { lr: config.lr },
      device: config.device,
      seed: config.seed,
      ...(config.device === 'cuda' ? {} : { threads: 1 }),
      ...(config.policies.length > 0
        ? { policies: resumePolicies(ctx.training.checkpoints(runId), config.policies) }
        : last
          ? { checkpoint: last.path }
          : {}),
      ...(config.distributed?.fsdp ? { fsdp: true } : {}),
    });
    ctx.logger.info('policy loaded', { runId, ...loaded });
    const { url } = await worker.request('serve', {});
    // Validation is greedy where the worker serves a /greedy prefix (temperature 0 whatever the agent asks).
    const greedy = await fetch(`${url}/greedy/v1/models`).then(
      (r) => r.ok,
      () => false,
    );
    if (!greedy) ctx.logger.warn('the trainer worker serves no /greedy prefix: validation rollouts are sampled');
    const upstreams = { train: `${url}/v1`, val: `${url}${greedy ? '/greedy' : ''}/v1` };
    // Several policies: the proxy sends each call of these rollouts to its policy's adapter (capture/policyRoutes.ts).
    if (config.policies.length > 0) routes = ctx.policies.register([upstreams.train, upstreams.val], config.policies);
    const iterations = new Iterations(runId, config, ctx, worker, upstreams);
    opened = iterations;
    ctx.signal.addEventListener('abort', stop, { once: true });
    // A worker that dies takes the policy server with it: stop the agents now; the next request reports the crash.
    worker.onDidExit(() => iterations.cancel());
    let checkpoint = last?.path ?? null;
    const first = (last?.step ?? 0) + 1;
    if (!last) {
      const start: Record<string, number> = { parameters: loaded.parameters, trainable: loaded.trainable };
      if (config.warmStart) {
        const { file, steps, lr, untilSampledAccuracy } = config.warmStart;
        const examples = readDemonstrations(file);
        const sft = await worker.request('sft', {
          examples,
          steps,
          lr,
          seed: config.seed,
          // Checking costs a batch of generations: every 20 steps is enough to stop near the cliff.
          ...(untilSampledAccuracy === null
            ? {}
            : { untilSampledAccuracy: { threshold: untilSampledAccuracy, every: 20 } }),
        });
        Object.assign(start, {
          'sft/loss': sft.loss,
          'sft/steps': sft.steps,
          'sft/seconds': sft.seconds,
          ...(typeof sft.sampledAccuracy === 'number' ? { 'sft/sampledAccuracy': sft.sampledAccuracy } : {}),
        });
        checkpoint = ctx.training.checkpointDir(runId, 0);
        await worker.request('save', { dir: checkpoint, metrics: start });
        await ctx.training.recordStep(runId, 0, {}, { dir: checkpoint, metrics: start });
      }
      Object.assign(start, await iterations.evaluate(valTasks, 0, checkpoint));
      await ctx.training.recordStep(runId, 0, start);
    }
    for (let step = first; step <= config.iterations && !ctx.signal.aborted; step += 1) {
      const done = await iterations.step(trainTasks, step, checkpoint);
      if (!done) break;
      checkpoint = done.checkpoint;
      if (step % config.evalEvery === 0 || step === config.iterations) {
        const val = await iterations.evaluate(valTasks, step, checkpoint);
        if (ctx.signal.aborted) break;
        await ctx.training.recordStep(runId, step, val);
      }
    }
    // The last validation may have named a new best: the one kept before it can go.
    if (!ctx.signal.aborted) await retain(ctx, runId, config);
  } catch (error) {
    // A cancel stops the worker under a pending request: that is the cancel, not a failure.
    if (!ctx.signal.aborted) throw error;
  } finally {
    ctx.signal.removeEventListener('abort', stop);
    routes?.dispose();
    await opened?.close();
    await worker.shutdown();
  }
}
