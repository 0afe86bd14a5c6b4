/**
 * Worker mode of the batch runner, runner side: opens the batch on the daemon (which holds its
 * queue, see workerBatches.ts), starts `workers` long-lived agent processes with
 * `LIGHTNING_RUNNER_URL`, follows the attempts (BatchFollower: the queue itself in the daemon, else
 * `workerBatches/events`), and supervises the
 * workers: one that exits before the batch is done has its rollouts failed (retried per policy) and
 * is replaced, up to a bound; past it the batch is cancelled and fails with the worker's error.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { PRIVATE_FILE_MODE } from '../util/privateFiles';
import path from 'node:path';
import { PLACEHOLDER_API_KEY } from '../protocol';
import { errorMessage } from '../protocol/errors';
import type { BatchMode, BatchPool, BatchRunnerOptions } from './pool';
import { followOverRpc } from './followBatch';
import { killGroup, stopGroup } from './processGroup';
import { WorkerRestarts } from './workerRestarts';

/** How long workers get to exit by themselves (on their 204) once the batch is done, or once retired as stuck. */
const EXIT_GRACE_MS = 5_000;

export class WorkerPool implements BatchPool {
  private readonly workers = new Map<string, ChildProcess>();
  private batchId: string | undefined;
  private cancelled = false;
  private finished = false;
  private failure: { error: unknown } | undefined;
  private spawned = 0;
  private restarts: WorkerRestarts | undefined;

  constructor(
    private readonly options: BatchRunnerOptions,
    private readonly mode: Extract<BatchMode, { kind: 'worker' }>,
  ) {}

  async run(rolloutIds: readonly string[]): Promise<void> {
    if (rolloutIds.length === 0) return;
    const { client } = this.options;
    const batch = await client.request('openWorkerBatch', {
      rolloutIds: [...rolloutIds],
      upstream: this.options.upstream,
      providerUpstreams: this.options.providerUpstreams,
      tokenIds: this.options.tokenIds,
      timeoutMs: this.options.timeoutMs,
      concurrencyPerWorker: this.mode.concurrencyPerWorker,
    });
    this.batchId = batch.id;
    this.restarts = new WorkerRestarts({
      client,
      batchId: batch.id,
      maxRestarts: this.mode.maxRestarts ?? 3 * this.mode.workers,
      stopped: () => this.finished || this.cancelled,
      restart: () => this.startWorker(batch.url),
      fail: (error) => (this.failure ??= { error }),
      cancel: () => this.cancel(),
    });
    try {
      if (this.cancelled) await client.request('cancelWorkerBatch', { id: batch.id });
      else for (let i = 0; i < this.mode.workers; i += 1) this.startWorker(batch.url);
      await (this.options.follower ?? followOverRpc(client)).follow(batch.id, {
        onAttempt: (event) => {
          if (event.restartWorker !== undefined) this.stopStuck(event.restartWorker);
          this.options.onAttempt(event);
        },
        // Cancelled by someone else (`workerBatches/cancel`): stop the workers at once, as for Ctrl-C.
        onCancelled: () => this.cancel(),
      });
    } catch (error) {
      // The daemon went away or refused: stop every worker rather than leave them unsupervised.
      this.failure ??= { error };
    } finally {
      this.finished = true;
      await this.stopWorkers();
      await client.request('cancelWorkerBatch', { id: batch.id }).catch(() => undefined);
    }
    if (this.failure) throw this.failure.error;
  }

  private startWorker(url: string): void {
    const worker = `w${this.spawned++}`;
    const [program, ...args] = this.mode.command;
    const env = {
      ...this.options.env,
      LIGHTNING_RUNNER_URL: `${url}/${worker}`,
      LIGHTNING_RUNNER_CONCURRENCY: String(this.mode.concurrencyPerWorker),
      ...(this.options.env.OPENAI_API_KEY ? {} : { OPENAI_API_KEY: PLACEHOLDER_API_KEY }),
    };
    const logFile = path.join(this.options.logDir, `worker-${worker}.log`);
    const log = fs.openSync(logFile, 'a', PRIVATE_FILE_MODE);
    const child = spawn(program!, args, { env, cwd: this.mode.cwd, detached: true, stdio: ['ignore', log, log] });
    fs.closeSync(log);
    this.workers.set(worker, child);
    if (child.pid !== undefined) this.options.onSpawn?.(child.pid);
    let unstartable: string | undefined;
    child.once('error', (error) => (unstartable = `could not start (${program}: ${errorMessage(error)})`));
    child.once('close', (code, signal) => {
      this.workers.delete(worker);
      killGroup(child, 'SIGKILL');
      // One the daemon retired after a timeout is replaced without counting as a restart (workerExited says so).
      void this.restarts?.workerEnded(
        worker,
        unstartable ?? (signal ? `was killed by ${signal}` : `exited with code ${code}`),
        unstartable !== undefined,
        logFile,
      );
    });
  }

  /**
   * A worker whose attempt timed out and that holds no other is replaced: the daemon answers its next `/next` 204, so
   * one that was only slow exits by itself; one still running after EXIT_GRACE_MS, stuck where its revoked URL cannot
   * reach it, is stopped (its process group, as process mode stops a timed-out agent).
   */
  private stopStuck(worker: string): void {
    const child = this.workers.get(worker);
    if (!child || this.finished || this.cancelled) return;
    setTimeout(() => {
      if (this.workers.get(worker) === child && !this.finished && !this.cancelled)
        stopGroup(child, this.options.killGraceMs);
    }, EXIT_GRACE_MS).unref();
  }

  /** Waits for the workers to exit on their own (they got 204), then stops what is left. */
  private async stopWorkers(): Promise<void> {
    const exited = [...this.workers.values()].map(
      (child) =>
        new Promise((resolve) =>
          child.exitCode !== null || child.signalCode !== null ? resolve(null) : child.once('exit', resolve),
        ),
    );
    const timer = setTimeout(
      () => {
        for (const child of this.workers.values()) stopGroup(child, this.options.killGraceMs);
      },
      this.cancelled ? 0 : EXIT_GRACE_MS,
    );
    await Promise.all(exited);
    clearTimeout(timer);
  }

  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    if (this.batchId !== undefined)
      void this.options.client.request('cancelWorkerBatch', { id: this.batchId }).catch(() => undefined);
    for (const child of this.workers.values()) stopGroup(child, this.options.killGraceMs);
  }

  killAll(): void {
    for (const child of this.workers.values()) killGroup(child, 'SIGKILL');
  }

  get wasCancelled(): boolean {
    return this.cancelled;
  }
}
