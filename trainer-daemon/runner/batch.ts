/**
 * The batch runner: runs queued rollouts (of one batch) to a final status, in one of two modes
 * (DESIGN.md, "Batch rollouts"):
 * * `process` — the agent command once per attempt (any unchanged agent), through a bounded pool;
 * * `worker` — N long-lived agent workers that pull rollouts from the daemon
 *   (`LIGHTNING_RUNNER_URL`), for thousands of short rollouts where process start-up dominates.
 * Both share the retry policy (failed and timed-out attempts run again while the rollout has
 * attempts left), per-attempt timeouts, cancel, the per-attempt progress callback, and automatic
 * scoring of each rollout once it is final (runner/scoring.ts).
 */
import fs from 'node:fs';
import type { MethodName, ParamsOf, ResultOf, RolloutScore } from '../protocol';
import { hasOutcome } from '../protocol/status';
import type { AttemptEnded } from '../protocol/runner';
import { ProcessPool } from './processPool';
import { ScoringQueue, type RolloutScoring } from './scoring';
import { WorkerPool } from './workerPool';

/** What the runner needs of the daemon: an `RpcClient`, or anything that answers its methods the same way. */
export interface RunnerClient {
  request<M extends MethodName>(name: M, params: ParamsOf<M>): Promise<ResultOf<M>>;
}

/** One attempt that ended: the rollout as it ended, how long the attempt took, whether it runs again. */
export type AttemptEvent = AttemptEnded;

/**
 * How the agents run. `cwd`: the folder the command runs in (default: this process's), so a daemon
 * started elsewhere runs `node agent.mjs` where the user meant it.
 */
export type BatchMode =
  /** The command once per attempt, `concurrency` at once, with `LIGHTNING_TASK` and the capture environment. */
  | { readonly kind: 'process'; readonly command: readonly string[]; readonly cwd?: string; readonly concurrency: number }
  /**
   * `workers` long-lived copies of the command, each with `LIGHTNING_RUNNER_URL` and
   * `LIGHTNING_RUNNER_CONCURRENCY` (= `concurrencyPerWorker`, the rollouts it may hold at once). A
   * worker that exits before the batch is done has its rollouts failed (retried per policy) and is
   * restarted, at most `maxRestarts` times in all (default: 3 × workers); then the batch fails.
   */
  | { readonly kind: 'worker'; readonly command: readonly string[]; readonly cwd?: string; readonly workers: number; readonly concurrencyPerWorker: number; readonly maxRestarts?: number };

export interface BatchRunnerOptions {
  readonly client: RunnerClient;
  readonly mode: BatchMode;
  /** Per-attempt time limit: the attempt becomes `timeout` (its process group stopped / its URL revoked). */
  readonly timeoutMs: number;
  /** Where the rollouts' LLM calls go (e.g. the policy server); null for the daemon's upstream. */
  readonly upstream: string | null;
  /** Ask the serving engine for exact token ids and logprobs on every call (what training needs). */
  readonly tokenIds: boolean;
  /** Agent output goes to `<logDir>/<rollout>.<attempt>.log` (process) or `<logDir>/worker-<W>.log` (worker). */
  readonly logDir: string;
  /** The agents' environment before Lightning's variables are added. */
  readonly env: NodeJS.ProcessEnv;
  readonly onAttempt: (event: AttemptEvent) => void;
  /** Called with each agent process started (pid), e.g. to record it so a later `--resume` can stop it. */
  readonly onSpawn?: (pid: number) => void;
  /** How long a stopped agent gets between SIGTERM and SIGKILL. */
  readonly killGraceMs?: number;
  /** Automatic rewards for each rollout once it is final; without it, nothing is scored. */
  readonly scoring?: RolloutScoring;
  /** Called with each rollout's scoring result (its reward, or why there is none). */
  readonly onScored?: (score: RolloutScore) => void;
}

/** How one mode runs a batch. */
export interface BatchPool {
  run(rolloutIds: readonly string[]): Promise<void>;
  cancel(): void;
  killAll(): void;
  readonly wasCancelled: boolean;
}

/**
 * Runs a batch's queued rollouts. Programmatic use (e.g. a training loop):
 * ```ts
 * const runner = new BatchRunner({
 *   client,                      // RpcClient connected to the daemon
 *   mode: { kind: 'worker', command: ['python', 'agent.py'], workers: 2, concurrencyPerWorker: 8 },
 *   timeoutMs: 120_000, upstream: policyServerUrl, tokenIds: true,
 *   logDir, env: process.env, onAttempt: (event) => …,
 * });
 * await runner.run(queuedRolloutIds);   // resolves when every rollout is final (and, with `scoring`,
 *                                       // scored); throws if the daemon went away or the workers kept dying
 * runner.cancel();                     // from elsewhere: stop the agents, cancel what is left
 * ```
 */
export class BatchRunner implements BatchPool {
  private readonly pool: BatchPool;
  private readonly scoring: ScoringQueue | undefined;

  constructor(options: BatchRunnerOptions) {
    fs.mkdirSync(options.logDir, { recursive: true });
    const scoring = options.scoring && new ScoringQueue(options.client, options.scoring, options.onScored);
    const onAttempt = (event: AttemptEvent): void => {
      options.onAttempt(event);
      if (!event.retrying && hasOutcome(event.rollout.status)) scoring?.add(event.rollout.id);
    };
    const poolOptions = { ...options, onAttempt };
    this.pool = options.mode.kind === 'process' ? new ProcessPool(poolOptions, options.mode) : new WorkerPool(poolOptions, options.mode);
    this.scoring = scoring;
  }

  /** Runs the given queued rollouts to a final status, scoring each as it ends; resolves when none is queued, running or being scored. */
  async run(rolloutIds: readonly string[]): Promise<void> {
    try {
      await this.pool.run(rolloutIds);
    } catch (error) {
      this.scoring?.cancel();
      throw error;
    }
    await this.scoring?.drain();
  }

  /** Stops launching, stops the running agents (their rollouts become cancelled) and the scoring, cancels the rest. */
  cancel(): void {
    this.pool.cancel();
    this.scoring?.cancel();
  }

  /** Each scored rollout's result, by rollout id (empty without `scoring`). */
  get scores(): ReadonlyMap<string, RolloutScore> {
    return this.scoring?.results ?? new Map();
  }

  /** Kills every running agent's process group at once (the runner is exiting). */
  killAll(): void {
    this.pool.killAll();
  }

  get wasCancelled(): boolean {
    return this.pool.wasCancelled;
  }
}
