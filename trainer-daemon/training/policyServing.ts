/**
 * Serving one saved checkpoint outside training (`policy/serve`, "Lightning: Use Checkpoint"): a
 * trainer worker of its own loads the checkpoint (its folder's config.json names the model and
 * adapter) and serves it with exact token ids. One checkpoint at a time — serving another stops
 * the old worker first, but only when no queued or running rollout is pinned to the old one (else
 * ConflictError, unless `force`); asking for the one already served answers at once. A worker that crashes
 * clears the state and is reported (`onDidChange` with the Python traceback); the daemon's
 * shutdown stops it. A training run's own worker is separate: both may run at once.
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  type Checkpoint,
  type PolicyChanged,
  type PolicyDevice,
  type ServedPolicy,
  type ServePolicyParams,
  weightsConfig,
} from '../protocol';
import { ConflictError, NotFoundError } from '../protocol/errors';
import type { Logger } from '../log';
import type { Store } from '../store/store';
import { Emitter, type Disposable, type Event } from '../protocol/event';
import { findPython } from './python';
import { TrainerWorker } from './worker';

interface Serving {
  readonly served: ServedPolicy;
  readonly worker: TrainerWorker;
}

export class PolicyServing implements Disposable {
  private serving: Serving | undefined;
  /** The worker loading a checkpoint now: the daemon's shutdown stops it rather than wait for the load. */
  private loading: TrainerWorker | undefined;
  /** serve/stop run one after another: a switch never leaves two checkpoint workers behind. */
  private queue: Promise<unknown> = Promise.resolve();
  /** Set by the daemon's shutdown: no worker is started after it. */
  private closed = false;
  private readonly _onDidChange = new Emitter<PolicyChanged>();
  /** Serving started, stopped, or the worker crashed (`error`). */
  readonly onDidChange: Event<PolicyChanged> = this._onDidChange.event;

  constructor(
    private readonly store: Store,
    private readonly logger: Logger,
  ) {}

  get current(): ServedPolicy | null {
    return this.serving?.served ?? null;
  }

  /**
   * Serves `checkpointId` (stopping what was served before, unless rollouts still use it and
   * `force` is not set); the checkpoint already served is answered as it is.
   */
  serve(params: ServePolicyParams): Promise<ServedPolicy> {
    return this.enqueue(async () => {
      this.checkOpen();
      const checkpoint = this.checkpoint(params.checkpointId);
      const served = this.serving?.served;
      if (
        served?.checkpointId === checkpoint.id &&
        (params.device === undefined || params.device === 'auto' || served.device.startsWith(params.device))
      )
        return served;
      if (served && !params.force) this.checkIdle(served);
      await this.stopServing();
      return this.start(checkpoint, params);
    });
  }

  /** Stops serving; answers what was served (null: nothing was). */
  stop(): Promise<ServedPolicy | null> {
    return this.enqueue(() => this.stopServing());
  }

  private checkOpen(): void {
    if (this.closed)
      throw new ConflictError(
        'the daemon is shutting down: it serves no checkpoint now; start it again (`lightning serve`) and retry',
      );
  }

  /**
   * Refuses to unload a checkpoint that queued or running rollouts are pinned to: their agents would lose their model
   * mid-run.
   */
  private checkIdle(served: ServedPolicy): void {
    const using = this.store.activeRolloutsPinnedTo('policy', served.policyVersion);
    if (using === 0) return;
    throw new ConflictError(
      `checkpoint ${served.checkpointId} (run ${served.runId}, step ${served.step}) is serving running rollouts (${using} queued or running); ` +
        'wait for them to finish, or Stop Using Checkpoint where they were started — or replace it anyway (policy/serve with force: true; their agents then lose their model)',
    );
  }

  private checkpoint(id: string): Checkpoint {
    const checkpoint = this.store.checkpoint(id);
    if (!fs.existsSync(path.join(checkpoint.path, 'config.json'))) {
      throw new NotFoundError(
        `checkpoint ${id}'s files are missing: ${checkpoint.path} has no config.json (was the checkpoints folder moved or deleted?)`,
      );
    }
    return checkpoint;
  }

  private async start(checkpoint: Checkpoint, params: ServePolicyParams): Promise<ServedPolicy> {
    const run = this.store.trainingRun(checkpoint.runId);
    // Checkpoints are GRPO's or SFT's: the run says which device and Python trained them.
    const trained = weightsConfig(run);
    const device: PolicyDevice = params.device ?? trained?.device ?? 'auto';
    const python = await findPython(this.store.file, params.python ?? trained?.python ?? undefined);
    const logger = this.logger.child(checkpoint.id);
    const worker = await TrainerWorker.start({ python: python.executable, logger });
    this.loading = worker;
    try {
      this.checkOpen();
      const loaded = await worker.request('load', {
        checkpoint: checkpoint.path,
        device,
        ...(device === 'cuda' ? {} : { threads: 1 }),
      });
      const { url } = await worker.request('serve', {});
      const policyVersion = this.store.policyVersionFor(checkpoint);
      const served: ServedPolicy = {
        checkpointId: checkpoint.id,
        runId: checkpoint.runId,
        step: checkpoint.step,
        url,
        policyVersion,
        device: loaded.device,
        startedAt: Date.now(),
      };
      this.serving = { served, worker };
      worker.onDidExit((error) => this.crashed(worker, error.message));
      if (worker.failed) this.crashed(worker, worker.failed.message);
      logger.info('serving checkpoint', {
        checkpointId: checkpoint.id,
        url,
        device: loaded.device,
        modelName: loaded.modelName,
      });
      this._onDidChange.fire({ served, error: null });
      return served;
    } catch (error) {
      await worker.shutdown();
      throw error;
    } finally {
      this.loading = undefined;
    }
  }

  private crashed(worker: TrainerWorker, message: string): void {
    if (this.serving?.worker !== worker) return;
    const { checkpointId } = this.serving.served;
    this.serving = undefined;
    this.logger.error('checkpoint server crashed', { checkpointId });
    this._onDidChange.fire({ served: null, error: `checkpoint ${checkpointId}: ${message}` });
  }

  private async stopServing(): Promise<ServedPolicy | null> {
    const serving = this.serving;
    if (!serving) return null;
    this.serving = undefined;
    await serving.worker.shutdown();
    this._onDidChange.fire({ served: null, error: null });
    return serving.served;
  }

  private enqueue<T>(job: () => Promise<T>): Promise<T> {
    const next = this.queue.then(job, job);
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Stops the worker and waits for it (the daemon's shutdown). */
  async shutdown(): Promise<void> {
    this.closed = true;
    this.loading?.dispose();
    await this.stop();
    this._onDidChange.dispose();
  }

  dispose(): void {
    this.loading?.dispose();
    this.serving?.worker.dispose();
    this.serving = undefined;
    this._onDidChange.dispose();
  }
}
