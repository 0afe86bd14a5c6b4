/**
 * The batch runner's types, shared by the runner (`batch.ts`), its two pools (`processPool.ts`,
 * `workerPool.ts`) and its scoring queue (`scoring.ts`), so none of them imports another back.
 */
import type { MethodName, ParamsOf, ProviderUpstreams, ResultOf, RewardSpecInput, RolloutScore } from '../protocol';
import type { RayOptions, SharedRayDriver } from './rayDriver';
import type { AttemptEnded } from '../protocol/runner';

/** What the runner needs of the daemon: an `RpcClient`, or anything that answers its methods the same way. */
export interface RunnerClient {
  request<M extends MethodName>(name: M, params: ParamsOf<M>): Promise<ResultOf<M>>;
}

/** One attempt that ended: the rollout as it ended, how long the attempt took, whether it runs again. */
export type AttemptEvent = AttemptEnded;

/** What a worker-mode batch tells the runner following it. */
export interface BatchListener {
  /** An attempt ended (in the order they ended). */
  onAttempt(event: AttemptEvent): void;
  /** Someone else cancelled the batch (`workerBatches/cancel`); called once. */
  onCancelled(): void;
}

/**
 * How a worker-mode pool follows its batch's attempts: the daemon's queue itself when the runner runs in
 * the daemon (its training loops subscribe, runner/workerBatches.ts), else `workerBatches/events` over
 * RPC (runner/followBatch.ts). Resolves once every rollout is final or the batch was cancelled.
 */
export interface BatchFollower {
  follow(batchId: string, listener: BatchListener): Promise<void>;
}

/**
 * How the agents run. `cwd`: the folder the command runs in (default: this process's), so a daemon
 * started elsewhere runs `node agent.mjs` where the user meant it.
 */
export type BatchMode =
  /** The command once per attempt, `concurrency` at once, with `LIGHTNING_TASK` and the capture environment. */
  | {
      readonly kind: 'process';
      readonly command: readonly string[];
      readonly cwd?: string;
      readonly concurrency: number;
    }
  /**
   * `workers` long-lived copies of the command, each with `LIGHTNING_RUNNER_URL` and
   * `LIGHTNING_RUNNER_CONCURRENCY` (= `concurrencyPerWorker`, the rollouts it may hold at once). A
   * worker that exits before the batch is done has its rollouts failed (retried per policy) and is
   * restarted, at most `maxRestarts` times in all (default: 3 × workers); then the batch fails.
   */
  | {
      readonly kind: 'worker';
      readonly command: readonly string[];
      readonly cwd?: string;
      readonly workers: number;
      readonly concurrencyPerWorker: number;
      readonly maxRestarts?: number;
    };

export interface BatchRunnerOptions {
  readonly client: RunnerClient;
  readonly mode: BatchMode;
  /** Per-attempt time limit: the attempt becomes `timeout` (its process group stopped / its URL revoked). */
  readonly timeoutMs: number;
  /** Where the rollouts' LLM calls go (e.g. the policy server); null for the daemon's upstream. */
  readonly upstream: string | null;
  /** Where their Anthropic and Gemini calls go (the user's own base URLs); absent, the providers'. */
  readonly providerUpstreams?: ProviderUpstreams;
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
  /** Run the agents (either mode) as Ray tasks on this cluster instead of on this machine (runner/rayPool.ts). */
  readonly ray?: RayOptions;
  /** With `ray`: a driver kept across batches (a training run's), instead of one started and ended for this batch. */
  readonly rayDriver?: SharedRayDriver;
  /** Worker mode: how the batch's attempts are followed; default: `workerBatches/events` through `client`. */
  readonly follower?: BatchFollower;
}

/** How one mode runs a batch. */
export interface BatchPool {
  run(rolloutIds: readonly string[]): Promise<void>;
  cancel(): void;
  killAll(): void;
  readonly wasCancelled: boolean;
}

/** What a batch's rollouts are scored with. */
export interface RolloutScoring {
  /** A rewards file (each rollout gets its dataset's spec, else the default), or one inline spec. */
  readonly source: { readonly rewardsFile: string } | { readonly spec: RewardSpecInput; readonly baseDir: string };
  /** Judge API keys by variable name, from the caller's environment; sent per call, never stored. */
  readonly apiKeys: Record<string, string>;
  /** Score the whole batch at its end rather than each rollout as it finishes (a relative judge ranks groups). */
  readonly atEnd: boolean;
  /**
   * Leave out rollouts that hold an automatic reward, checked again as the rows are written (`rewards/score`'s
   * `skipScored`): a dataset run's, since a resume and the stopped runner it follows (whose scoring job can outlive
   * it in the daemon) may score one rollout at once.
   */
  readonly skipScored?: boolean;
}
