/**
 * The daemon's training runs (GRPO, SFT): `training/start` creates (or resumes) a run and drives its loop in the
 * background; `trainingRuns/cancel` aborts it; the daemon's shutdown cancels what still runs. A run
 * left `running` by a daemon that died is marked failed when the next daemon starts, so it can be
 * resumed. One loop per run; a failure fails that run only.
 */
import type { z } from 'zod';
import type { DaemonTrainingConfig, GrpoConfig, StartTrainingParams, TrainingRun } from '../protocol';
import { assertNever } from '../protocol/assert';
import { daemonDriven } from '../protocol/status';
import { ConflictError, InvalidInputError, errorMessage, mapError } from '../protocol/errors';
import type { Logger } from '../log';
import type { Disposable } from '../protocol/event';
import { defaultRewardsFile } from '../rewards/config';
import { scoringFor } from '../runner/scoring';
import type { BatchFollower, RolloutScoring } from '../runner/pool';
import { checkFsdpTorch } from './doctor';
import { runGrpo } from './grpo';
import { readSftRows, runSft } from './sft';
import type { Caller } from './rollouts';
import type { TrainingService } from './service';

/** A run about to be driven: its id, configuration and (GRPO) how its rollouts are scored. */
interface Prepared {
  readonly runId: string;
  readonly config: DaemonTrainingConfig;
  readonly scoring: RolloutScoring | undefined;
}

export class TrainingManager implements Disposable {
  private readonly active = new Map<string, { controller: AbortController; done: Promise<void> }>();

  constructor(
    private readonly training: TrainingService,
    /** The daemon's RPC methods, for the runs' batch runners. */
    private readonly call: Caller,
    /** The daemon's worker-batch queue (runner/workerBatches.ts), which the loops follow in process. */
    private readonly batches: BatchFollower,
    private readonly logger: Logger,
  ) {
    for (const run of training.runs()) {
      if (run.status === 'running' || run.status === 'queued') {
        // Its driver (this daemon's loop, or an APO process talking through the daemon) is gone.
        const error = `the daemon stopped during this run${daemonDriven(run.algorithm) ? `; resume it with \`lightning train --resume ${run.id}\`` : ''}`;
        training.setRunStatus(run.id, 'failed', { error });
      }
    }
  }

  async start(params: z.output<typeof StartTrainingParams>): Promise<TrainingRun> {
    const { runId, config, scoring } =
      params.resume !== undefined ? this.resumable(params.resume) : await this.recorded(params.config!);
    const started = this.training.setRunStatus(runId, 'running');
    const controller = new AbortController();
    const done = this.drive(runId, config, scoring, controller.signal).finally(() => this.active.delete(runId));
    this.active.set(runId, { controller, done });
    return started;
  }

  /** A cancelled or failed GRPO or SFT run, with its configuration and (GRPO) scoring, checked again. */
  private resumable(id: string): Prepared {
    const run = this.training.run(id);
    if (this.active.has(run.id)) throw new ConflictError(`training run ${run.id} is already running`);
    switch (run.algorithm) {
      case 'grpo':
        // Its rewards file may have been deleted or broken since.
        return {
          runId: run.id,
          config: run.config,
          scoring: checkedScoring(
            run.config,
            this.training.storeFile,
            `params.resume: run ${run.id}'s config.rewardsFile`,
          ),
        };
      case 'sft':
        return { runId: run.id, config: run.config, scoring: undefined };
      case 'apo':
        throw new InvalidInputError(
          `params.resume: training run ${run.id} is an apo run; the daemon resumes GRPO and SFT runs (run APO again with \`lightning train --algorithm apo\`)`,
        );
      default:
        return assertNever(run);
    }
  }

  /**
   * A new run, recorded once what cannot run has been refused: an unknown dataset, no train tasks, a torch too old
   * for `--fsdp` (GRPO); no rated rows (SFT).
   */
  private async recorded(config: DaemonTrainingConfig): Promise<Prepared> {
    switch (config.algorithm) {
      case 'grpo': {
        if (this.training.tasks(config.dataset, 'train').items.length === 0) {
          throw new InvalidInputError(
            `params.config.dataset: ${config.dataset} has no train tasks (import tasks with "split": "train")`,
          );
        }
        if (config.valDataset !== null) this.training.tasks(config.valDataset);
        const scoring = checkedScoring(config, this.training.storeFile, 'params.config.rewardsFile');
        if (config.distributed?.fsdp) await checkFsdpTorch(this.training.storeFile, config.python);
        return { runId: this.training.recordRun({ algorithm: 'grpo', config }).id, config, scoring };
      }
      case 'sft':
        // The rows are read again when the loop starts; reading them here refuses a run with nothing to learn.
        readSftRows(this.training, config);
        return { runId: this.training.recordRun({ algorithm: 'sft', config }).id, config, scoring: undefined };
      default:
        return assertNever(config);
    }
  }

  /** Whether this daemon drives run `id` now. */
  isRunning(id: string): boolean {
    return this.active.has(id);
  }

  /** Stops run `id`, which this daemon drives: its loop stops its agents and worker and records the run cancelled. */
  async cancel(id: string): Promise<TrainingRun> {
    const active = this.active.get(id);
    if (!active) throw new ConflictError(`training run ${id} is not running in this daemon`);
    active.controller.abort();
    await active.done;
    return this.training.run(id);
  }

  private async drive(
    runId: string,
    config: DaemonTrainingConfig,
    scoring: RolloutScoring | undefined,
    signal: AbortSignal,
  ): Promise<void> {
    const logger = this.logger.child(runId);
    try {
      switch (config.algorithm) {
        case 'grpo':
          await runGrpo(runId, config, {
            training: this.training,
            call: this.call,
            batches: this.batches,
            logger,
            signal,
            scoring,
          });
          break;
        case 'sft':
          await runSft(runId, config, { training: this.training, logger, signal });
          break;
        default:
          assertNever(config);
      }
      if (!this.training.isOpen) return;
      this.training.setRunStatus(runId, signal.aborted ? 'cancelled' : 'succeeded', {
        error: signal.aborted ? 'cancelled' : null,
      });
    } catch (error) {
      logger.error('training run failed', { error: errorMessage(error) });
      if (this.training.isOpen)
        this.training.setRunStatus(runId, 'failed', { error: errorMessage(error), errorKind: mapError(error).kind });
    }
  }

  /** Cancels every run and waits for their loops (agents and workers stopped). */
  async shutdown(): Promise<void> {
    for (const { controller } of this.active.values()) controller.abort();
    await Promise.all([...this.active.values()].map((a) => a.done));
  }

  dispose(): void {
    for (const { controller } of this.active.values()) controller.abort();
  }
}

/**
 * The run's scoring — its rewards file, else the default `.lightning/rewards.json` when there is
 * one — built when the run starts, so a missing or broken file is refused before the run is
 * recorded or marked running, not after its worker has loaded the model.
 */
function checkedScoring(config: GrpoConfig, storeFile: string, field: string): RolloutScoring | undefined {
  try {
    return scoringFor(config.rewardsFile, storeFile, process.env);
  } catch (error) {
    const which = config.rewardsFile === null ? ` (null: the default ${defaultRewardsFile(storeFile)})` : '';
    throw new InvalidInputError(`${field}${which}: ${errorMessage(error)}`);
  }
}
