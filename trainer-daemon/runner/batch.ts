/**
 * The batch runner: runs queued rollouts (of one batch) to a final status, in one of two modes
 * (docs/datasets.md):
 * * `process` — the agent command once per attempt (any unchanged agent), through a bounded pool;
 * * `worker` — N long-lived agent workers that pull rollouts from the daemon
 *   (`LIGHTNING_RUNNER_URL`), for thousands of short rollouts where process start-up dominates.
 * Both share the retry policy (failed and timed-out attempts run again while the rollout has
 * attempts left), per-attempt timeouts, cancel, the per-attempt progress callback, and automatic
 * scoring of each rollout once it is final (runner/scoring.ts).
 */
import { ensurePrivateDir } from '../util/privateFiles';
import type { RolloutScore } from '../protocol';
import { hasOutcome } from '../protocol/status';
import type { AttemptEvent, BatchPool, BatchRunnerOptions } from './pool';
import { ProcessPool } from './processPool';
import { ScoringQueue } from './scoring';
import { WorkerPool } from './workerPool';
import { RayPool } from './rayPool';

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
    ensurePrivateDir(options.logDir);
    const scoring = options.scoring && new ScoringQueue(options.client, options.scoring, options.onScored);
    const onAttempt = (event: AttemptEvent): void => {
      options.onAttempt(event);
      if (!event.retrying && hasOutcome(event.rollout.status)) scoring?.add(event.rollout.id);
    };
    const poolOptions = { ...options, onAttempt };
    this.pool = options.ray
      ? new RayPool(poolOptions, options.mode, options.ray)
      : options.mode.kind === 'process'
        ? new ProcessPool(poolOptions, options.mode)
        : new WorkerPool(poolOptions, options.mode);
    this.scoring = scoring;
  }

  /**
   * Runs the given queued rollouts to a final status, scoring each as it ends; resolves when none is queued, running or
   * being scored. `unscored`: rollouts that ended before (a resumed batch's) and are scored with them.
   */
  async run(rolloutIds: readonly string[], unscored: readonly string[] = []): Promise<void> {
    for (const id of unscored) this.scoring?.add(id);
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
