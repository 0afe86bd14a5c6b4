/**
 * The batch runner's agents on a Ray cluster (`--ray ADDRESS`), beside the local pools: the same two
 * modes with the same semantics, each agent command a Ray task started through the Ray driver
 * (rayDriver.ts). Process mode: one task per attempt, `concurrency` at once, the per-attempt timeout
 * enforced on the node, retries and cancel as locally. Worker mode: `workers` long-lived tasks that
 * pull rollouts from the daemon's batch queue (workerBatches.ts, unchanged), replaced when they die.
 * Their LLM calls, spans and rewards go to the daemon's capability URLs over the network; each
 * attempt's output comes back into the same log files as locally, headed by the node it ran on, and
 * a failure names the node.
 */
import fs from 'node:fs';
import path from 'node:path';
import { PLACEHOLDER_API_KEY, instrumentationEnv, type RolloutStatus } from '../protocol';
import { LightningError } from '../protocol/errors';
import { describePlacement, type RayExit, type RayPlacement } from '../protocol/rayRunner';
import { canRetry } from '../protocol/status';
import type { BatchMode, BatchPool, BatchRunnerOptions } from './pool';
import { followOverRpc } from './followBatch';
import { RayDriver, type RayAgent, type RayOptions } from './rayDriver';
import { WorkerRestarts } from './workerRestarts';

/** How long workers get to exit by themselves (on their 204) once the batch is done. */
const EXIT_GRACE_MS = 5_000;

/** The variables an agent gets on its node, on top of the node's own: Lightning's only, never the user's secrets. */
function lightningEnv(env: Record<string, string>): {
  env: Record<string, string>;
  envDefaults: Record<string, string>;
} {
  const { OPENAI_API_KEY, ...rest } = env;
  return { env: rest, envDefaults: OPENAI_API_KEY ? { OPENAI_API_KEY } : { OPENAI_API_KEY: PLACEHOLDER_API_KEY } };
}

export class RayPool implements BatchPool {
  private driver: RayDriver | undefined;
  private readonly agents = new Set<RayAgent>();
  private cancelled = false;

  constructor(
    private readonly options: BatchRunnerOptions,
    private readonly mode: BatchMode,
    private readonly ray: RayOptions,
  ) {}

  async run(rolloutIds: readonly string[]): Promise<void> {
    if (rolloutIds.length === 0) return;
    const shared = this.options.rayDriver;
    this.driver = shared
      ? await shared.acquire()
      : await RayDriver.start(this.ray, path.join(this.options.logDir, 'ray-driver.log'));
    try {
      if (this.mode.kind === 'process') await this.runProcesses(rolloutIds, this.mode);
      else await this.runWorkers(rolloutIds, this.mode);
    } finally {
      // A shared driver stays connected for the next batch (its owner closes it); this batch's tasks have all ended.
      if (!shared) await this.driver.close();
    }
  }

  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.onCancel?.();
    for (const agent of this.agents) agent.stop();
  }

  killAll(): void {
    this.driver?.kill();
  }

  get wasCancelled(): boolean {
    return this.cancelled;
  }

  private onCancel: (() => void) | undefined;

  /** Starts one command on the cluster, its output appended to `logFile` after a line naming the node. */
  private launch(
    command: readonly string[],
    env: Record<string, string>,
    timeoutMs: number | null,
    logFile: string,
    onStarted?: (where: RayPlacement) => void,
  ): RayAgent {
    const agent = this.driver!.launch(
      {
        command,
        cwd: this.ray.workingDir ? null : (this.mode.cwd ?? process.cwd()),
        ...lightningEnv(env),
        timeoutMs,
        graceMs: this.options.killGraceMs ?? 2_000,
      },
      (data) => fs.appendFileSync(logFile, data),
      (where) => {
        fs.appendFileSync(logFile, `[lightning] running on Ray ${describePlacement(where)}, node id ${where.nodeId}\n`);
        onStarted?.(where);
      },
    );
    this.agents.add(agent);
    void agent.exited.then(() => this.agents.delete(agent));
    if (this.cancelled) agent.stop();
    return agent;
  }

  private async runProcesses(
    rolloutIds: readonly string[],
    mode: Extract<BatchMode, { kind: 'process' }>,
  ): Promise<void> {
    const queue = [...rolloutIds];
    let failure: { error: unknown } | undefined;
    const slot = async (): Promise<void> => {
      while (!this.cancelled && queue.length > 0) {
        try {
          const retry = await this.attempt(queue.shift()!, mode);
          if (retry) queue.push(retry);
        } catch (error) {
          failure ??= { error };
          this.cancel();
        }
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, mode.concurrency) }, slot));
    if (failure) throw failure.error;
    if (this.cancelled) {
      for (const id of queue.splice(0)) {
        await this.options.client
          .request('transitionRollout', { id, to: 'cancelled', error: 'the batch was cancelled' })
          .catch(() => undefined);
      }
    }
  }

  /** One attempt as a Ray task; the rollout id again when it is to be retried. */
  private async attempt(rolloutId: string, mode: Extract<BatchMode, { kind: 'process' }>): Promise<string | undefined> {
    const { client } = this.options;
    const started = Date.now();
    const { rollout, url } = await client.request('startAgentRun', {
      rolloutId,
      upstream: this.options.upstream,
      providerUpstreams: this.options.providerUpstreams,
      tokenIds: this.options.tokenIds,
    });
    if (this.cancelled) {
      await client.request('transitionRollout', { id: rolloutId, to: 'cancelled', error: 'the batch was cancelled' });
      return undefined;
    }
    const env = instrumentationEnv({ url, rolloutId, task: rollout.task?.input ?? null, base: this.options.env });
    const logFile = path.join(this.options.logDir, `${rolloutId}.${rollout.attemptCount}.log`);
    const exit = await this.launch(mode.command, env, this.options.timeoutMs, logFile).exited;
    const outcome = this.outcome(exit, mode.command[0]!);
    const finished = await client.request('transitionRollout', {
      id: rolloutId,
      ...outcome,
      ...(exit.where ? { node: exit.where } : {}),
    });
    const retrying = !this.cancelled && !exit.unstartable && canRetry(finished);
    this.options.onAttempt({ rollout: finished, durationMs: Date.now() - started, retrying });
    // A command the node cannot start fails every rollout the same way: the batch stops (a non-zero exit, what is
    // queued left queued), as it does locally, instead of failing each rollout in turn.
    if (exit.unstartable && !this.cancelled)
      throw new LightningError(`the agent command could not start (${outcome.error}); check the command after --`);
    if (!retrying) return undefined;
    await client.request('transitionRollout', { id: rolloutId, to: 'queued' });
    return rolloutId;
  }

  private outcome(
    exit: RayExit,
    program: string,
  ): { to: RolloutStatus; error: string | null; exitCode: number | null } {
    const on = describePlacement(exit.where);
    if (this.cancelled || exit.cancelled)
      return { to: 'cancelled', error: 'the batch was cancelled', exitCode: exit.code };
    if (exit.timedOut)
      return {
        to: 'timeout',
        error: `timed out after ${this.options.timeoutMs / 1000} s on Ray ${on}`,
        exitCode: exit.code,
      };
    if (exit.error !== undefined) return { to: 'failed', error: exit.error, exitCode: null };
    if (exit.code === 0) return { to: 'succeeded', error: null, exitCode: 0 };
    return {
      to: 'failed',
      error: `${program} ${exit.signal ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`} on Ray ${on}`,
      exitCode: exit.code,
    };
  }

  private async runWorkers(rolloutIds: readonly string[], mode: Extract<BatchMode, { kind: 'worker' }>): Promise<void> {
    const { client } = this.options;
    const batch = await client.request('openWorkerBatch', {
      rolloutIds: [...rolloutIds],
      upstream: this.options.upstream,
      providerUpstreams: this.options.providerUpstreams,
      tokenIds: this.options.tokenIds,
      timeoutMs: this.options.timeoutMs,
      concurrencyPerWorker: mode.concurrencyPerWorker,
    });
    let finished = false;
    let failure: { error: unknown } | undefined;
    let spawned = 0;
    this.onCancel = () => void client.request('cancelWorkerBatch', { id: batch.id }).catch(() => undefined);
    const startWorker = (): void => {
      const worker = `w${spawned++}`;
      const logFile = path.join(this.options.logDir, `worker-${worker}.log`);
      const env = {
        LIGHTNING_RUNNER_URL: `${batch.url}/${worker}`,
        LIGHTNING_RUNNER_CONCURRENCY: String(mode.concurrencyPerWorker),
        ...(this.options.env.OPENAI_API_KEY ? {} : { OPENAI_API_KEY: PLACEHOLDER_API_KEY }),
      };
      // The daemon records the node with each attempt this worker ends.
      const placed = (node: RayPlacement): void =>
        void client.request('workerPlaced', { id: batch.id, worker, node }).catch(() => undefined);
      const agent = this.launch(mode.command, env, null, logFile, placed);
      void agent.exited.then((exit) => {
        const on = describePlacement(exit.where);
        const reason =
          exit.error ??
          (exit.signal ? `was killed by ${exit.signal} on Ray ${on}` : `exited with code ${exit.code} on Ray ${on}`);
        return restarts.workerEnded(worker, reason, exit.unstartable === true, logFile);
      });
    };
    const restarts = new WorkerRestarts({
      client,
      batchId: batch.id,
      maxRestarts: mode.maxRestarts ?? 3 * mode.workers,
      stopped: () => finished || this.cancelled,
      restart: startWorker,
      fail: (error) => (failure ??= { error }),
      cancel: () => this.cancel(),
    });
    try {
      if (this.cancelled) await client.request('cancelWorkerBatch', { id: batch.id });
      else for (let i = 0; i < mode.workers; i += 1) startWorker();
      await (this.options.follower ?? followOverRpc(client)).follow(batch.id, {
        onAttempt: this.options.onAttempt,
        onCancelled: () => this.cancel(),
      });
    } catch (error) {
      failure ??= { error };
    } finally {
      finished = true;
      await this.stopWorkers();
      await client.request('cancelWorkerBatch', { id: batch.id }).catch(() => undefined);
    }
    if (failure) throw failure.error;
  }

  /** Waits for the workers to exit on their own (they got 204), then cancels the tasks left. */
  private async stopWorkers(): Promise<void> {
    const timer = setTimeout(
      () => {
        for (const agent of this.agents) agent.stop();
      },
      this.cancelled ? 0 : EXIT_GRACE_MS,
    );
    await Promise.all([...this.agents].map((agent) => agent.exited));
    clearTimeout(timer);
  }
}
