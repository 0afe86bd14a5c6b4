/**
 * What worker mode does when a worker ends before its batch is done, wherever the workers run
 * (local processes, workerPool.ts; Ray tasks, rayPool.ts): the daemon fails its rollouts in flight
 * (retried per policy) and a replacement starts, at most `maxRestarts` times in all; past that, or
 * for a command that cannot start at all, the batch is cancelled and fails with the worker's error.
 */
import { LightningError } from '../protocol/errors';
import type { RunnerClient } from './pool';

export interface WorkerRestartOptions {
  readonly client: RunnerClient;
  readonly batchId: string;
  readonly maxRestarts: number;
  /** Whether the batch is over for this pool (finished or cancelled): an ending worker is then expected. */
  readonly stopped: () => boolean;
  /** Starts a replacement worker. */
  readonly restart: () => void;
  /** Records why the batch fails (the first reason is kept). */
  readonly fail: (error: unknown) => void;
  /** Stops the batch's workers (the daemon could not be told of the dead one). */
  readonly cancel: () => void;
}

export class WorkerRestarts {
  private restarts = 0;

  constructor(private readonly options: WorkerRestartOptions) {}

  /** Worker `worker` ended with `reason` (its log in `logFile`); `unstartable`: its command could not start. */
  async workerEnded(worker: string, reason: string, unstartable: boolean, logFile: string): Promise<void> {
    const { client, batchId } = this.options;
    if (this.options.stopped()) return;
    try {
      const { done, retired } = await client.request('workerExited', { id: batchId, worker, error: reason });
      if (done || this.options.stopped()) return;
      // Retired by the daemon after a timeout (it exited on its 204, or was stopped as stuck): replaced, not counted.
      if (retired) return this.options.restart();
      if (unstartable || this.restarts >= this.options.maxRestarts) {
        this.options.fail(
          new LightningError(
            unstartable
              ? `the agent worker ${reason}`
              : `the agent worker ${reason}; ${this.restarts} restarts used up, so the batch stops (see ${logFile})`,
          ),
        );
        await client.request('cancelWorkerBatch', { id: batchId });
        return;
      }
      this.restarts += 1;
      this.options.restart();
    } catch (error) {
      this.options.fail(error);
      this.options.cancel();
    }
  }
}
