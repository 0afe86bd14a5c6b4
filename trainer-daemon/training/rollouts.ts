/**
 * How a training iteration runs its rollouts: through the batch runner, with every LLM call sent to
 * the policy being trained (the batch's upstream is the worker's serving URL) and exact token ids
 * requested. The runner is given the daemon's own handlers, so no RPC hop is spent in-process, and
 * the daemon's worker-batch queue, which it subscribes to for the attempts (it never polls its own daemon).
 */
import path from 'node:path';
import { BatchRunner } from '../runner/batch';
import type { BatchFollower, BatchMode, RolloutScoring, RunnerClient } from '../runner/pool';
import { SharedRayDriver, type RayOptions } from '../runner/rayDriver';

/** What the loop needs of the daemon: its RPC methods (the daemon passes its own handler table). */
export type Caller = RunnerClient;

export interface RolloutBatch {
  readonly batchId: string;
  readonly rolloutIds: readonly string[];
  /** The OpenAI-compatible base URL (…/v1) that serves this batch's LLM calls. */
  readonly upstream: string;
}

export interface RolloutExecutorOptions {
  readonly call: Caller;
  /** Worker mode: the daemon's batch queue, followed in process. */
  readonly batches: BatchFollower;
  readonly mode: BatchMode;
  readonly timeoutMs: number;
  readonly logDir: string;
  /** Automatic rewards for each rollout as it finishes; the batch ends once all are scored. */
  readonly scoring: RolloutScoring | undefined;
  /** Added to the daemon's environment for the agents (the run's `command.env`). */
  readonly env?: Readonly<Record<string, string>>;
  /** Run the agents as Ray tasks on this cluster (`--ray`). */
  readonly ray?: RayOptions;
}

/**
 * Runs one batch at a time; `cancel` stops the agents of the batch in flight. With `ray`, one Ray
 * driver serves every batch (connecting to the cluster costs seconds); `close` ends it.
 */
export class RolloutExecutor {
  private current: BatchRunner | undefined;
  private cancelled = false;
  private readonly rayDriver: SharedRayDriver | undefined;

  constructor(private readonly options: RolloutExecutorOptions) {
    this.rayDriver = options.ray && new SharedRayDriver(options.ray, path.join(options.logDir, 'ray-driver.log'));
  }

  async run(batch: RolloutBatch): Promise<void> {
    if (this.cancelled) return;
    // The policy server is local and needs no key: the user's OpenAI key stays out of these rollouts.
    const env = { ...process.env, ...this.options.env };
    delete env.OPENAI_API_KEY;
    const runner = new BatchRunner({
      client: this.options.call,
      follower: this.options.batches,
      mode: this.options.mode,
      timeoutMs: this.options.timeoutMs,
      upstream: batch.upstream,
      tokenIds: true,
      logDir: path.join(this.options.logDir, batch.batchId),
      env,
      onAttempt: () => undefined,
      scoring: this.options.scoring,
      ray: this.options.ray,
      rayDriver: this.rayDriver,
    });
    this.current = runner;
    try {
      await runner.run(batch.rolloutIds);
    } finally {
      this.current = undefined;
    }
  }

  cancel(): void {
    this.cancelled = true;
    this.current?.cancel();
  }

  /** Ends the Ray driver, if any (after the last batch). */
  async close(): Promise<void> {
    await this.rayDriver?.close();
  }
}
