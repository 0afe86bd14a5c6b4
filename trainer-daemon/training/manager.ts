/**
 * The daemon's training runs (GRPO, SFT, APO): `training/start` creates (or resumes) a run and drives its loop in the
 * background; `trainingRuns/cancel` aborts it; the daemon's shutdown cancels what still runs. A run left `running` by
 * a daemon that died is marked failed when the next daemon starts, so it can be resumed (GRPO, SFT) or started again
 * (APO). One loop per run; a failure fails that run only.
 */
import type { z } from 'zod';
import type {
  ApoConfig,
  ApoResult,
  DaemonTrainingConfig,
  GrpoConfig,
  SftConfig,
  StartEnv,
  StartTrainingParams,
  TrainingRun,
} from '../protocol';
import { assertNever } from '../protocol/assert';
import { resumesFromCheckpoints } from '../protocol/status';
import { ConflictError, InvalidInputError, errorMessage, mapError } from '../protocol/errors';
import { isSecretVariable, registerSecretValue } from '../protocol/secrets';
import type { Logger } from '../log';
import type { Disposable } from '../protocol/event';
import { defaultRewardsFile } from '../rewards/config';
import { scoringFor } from '../runner/scoring';
import type { BatchFollower, RolloutScoring } from '../runner/pool';
import { CancelledError } from '../apo/evaluate';
import { runApo } from '../apo/loop';
import { prepareApo, type ApoPlan } from '../apo/prepare';
import { checkFsdpTorch } from './doctor';
import { runGrpo, type PolicyRegistry } from './grpo';
import { readSftRows, runSft } from './sft';
import type { Caller } from './rollouts';
import type { TrainingService } from './service';

/** A run about to be driven: its configuration and what was checked and built for it. */
type Prepared =
  | { readonly algorithm: 'grpo'; readonly config: GrpoConfig; readonly scoring: RolloutScoring | undefined }
  | { readonly algorithm: 'sft'; readonly config: SftConfig }
  | { readonly algorithm: 'apo'; readonly config: ApoConfig; readonly plan: ApoPlan; readonly env: NodeJS.ProcessEnv };

export interface TrainingManagerOptions {
  readonly training: TrainingService;
  /** The daemon's RPC methods, for the runs' batch runners. */
  readonly call: Caller;
  /** The daemon's worker-batch queue (runner/workerBatches.ts), which the loops follow in process. */
  readonly batches: BatchFollower;
  /** The daemon's router of calls to several policies' adapters, which GRPO runs with `--policy` register with. */
  readonly policies: PolicyRegistry;
  /** The most bytes of one answer APO's optimizer calls read (the daemon's limits.ts). */
  readonly maxAnswerBytes: number;
  readonly logger: Logger;
}

export class TrainingManager implements Disposable {
  private readonly active = new Map<string, { controller: AbortController; done: Promise<void> }>();

  private get training(): TrainingService {
    return this.options.training;
  }

  constructor(private readonly options: TrainingManagerOptions) {
    const { training } = options;
    for (const run of training.runs()) {
      if (run.status === 'running' || run.status === 'queued') {
        // Its loop, this daemon's predecessor's, is gone.
        training.setRunStatus(run.id, 'failed', { error: `the daemon stopped during this run; ${howToContinue(run)}` });
      }
    }
  }

  async start(params: z.output<typeof StartTrainingParams>): Promise<TrainingRun> {
    const { runId, prepared } =
      params.resume !== undefined
        ? { runId: params.resume, prepared: this.resumable(params.resume, params.env) }
        : await this.recorded(params.config!, params.env);
    const started = this.training.setRunStatus(runId, 'running');
    const controller = new AbortController();
    const done = this.drive(runId, prepared, controller.signal).finally(() => this.active.delete(runId));
    this.active.set(runId, { controller, done });
    return started;
  }

  /** A cancelled or failed GRPO or SFT run, with its configuration and (GRPO) scoring, checked again. */
  private resumable(id: string, env: StartEnv): Prepared {
    const run = this.training.run(id);
    if (this.active.has(run.id)) throw new ConflictError(`training run ${run.id} is already running`);
    switch (run.algorithm) {
      case 'grpo':
        refuseEnv(env, 'grpo');
        // Its rewards file may have been deleted or broken since.
        return {
          algorithm: 'grpo',
          config: run.config,
          scoring: checkedScoring(
            run.config,
            this.training.storeFile,
            `params.resume: run ${run.id}'s config.rewardsFile`,
          ),
        };
      case 'sft':
        refuseEnv(env, 'sft');
        return { algorithm: 'sft', config: run.config };
      case 'apo':
        throw new InvalidInputError(`params.resume: training run ${run.id} is an APO run; ${howToContinue(run)}`);
      default:
        return assertNever(run);
    }
  }

  /**
   * A new run, recorded once what cannot run has been refused: an unknown dataset, no train tasks, a torch too old
   * for `--fsdp` (GRPO); no rated rows (SFT); no prompt template, no tasks, a budget too small for the seed (APO).
   */
  private async recorded(config: DaemonTrainingConfig, env: StartEnv): Promise<{ runId: string; prepared: Prepared }> {
    switch (config.algorithm) {
      case 'grpo': {
        refuseEnv(env, 'grpo');
        if (this.training.tasks(config.dataset, 'train').items.length === 0) {
          throw new InvalidInputError(
            `params.config.dataset: ${config.dataset} has no train tasks (import tasks with "split": "train")`,
          );
        }
        if (config.valDataset !== null) this.training.tasks(config.valDataset);
        const scoring = checkedScoring(config, this.training.storeFile, 'params.config.rewardsFile');
        if (config.distributed?.fsdp) await checkFsdpTorch(this.training.storeFile, config.python);
        const runId = this.training.recordRun({ algorithm: 'grpo', config }).id;
        return { runId, prepared: { algorithm: 'grpo', config, scoring } };
      }
      case 'sft':
        refuseEnv(env, 'sft');
        // The rows are read again when the loop starts; reading them here refuses a run with nothing to learn.
        readSftRows(this.training, config);
        return {
          runId: this.training.recordRun({ algorithm: 'sft', config }).id,
          prepared: { algorithm: 'sft', config },
        };
      case 'apo': {
        const agentEnv = apoEnv(config, env);
        const plan = await prepareApo(this.training, config, this.training.storeFile, agentEnv);
        const runId = this.training.recordRun({ algorithm: 'apo', config }).id;
        return { runId, prepared: { algorithm: 'apo', config, plan, env: agentEnv } };
      }
      default:
        return assertNever(config);
    }
  }

  /** Whether this daemon drives run `id` now. */
  isRunning(id: string): boolean {
    return this.active.has(id);
  }

  /**
   * Stops run `id`, which this daemon drives: its loop stops its agents (and worker) and the run is recorded cancelled.
   */
  async cancel(id: string): Promise<TrainingRun> {
    const active = this.active.get(id);
    if (!active) throw new ConflictError(`training run ${id} is not running in this daemon`);
    active.controller.abort();
    await active.done;
    return this.training.run(id);
  }

  private async drive(runId: string, prepared: Prepared, signal: AbortSignal): Promise<void> {
    const logger = this.options.logger.child(runId);
    try {
      const result = await this.loop(runId, prepared, signal, logger);
      if (!this.training.isOpen) return;
      this.training.setRunStatus(runId, signal.aborted ? 'cancelled' : 'succeeded', {
        error: signal.aborted ? 'cancelled' : null,
        result,
      });
    } catch (error) {
      if (!this.training.isOpen) return;
      if (error instanceof CancelledError) {
        // APO cancelled before its seed was scored: there is no result to keep.
        this.training.setRunStatus(runId, 'cancelled', { error: 'cancelled' });
        return;
      }
      logger.error('training run failed', { error: errorMessage(error) });
      this.training.setRunStatus(runId, 'failed', { error: errorMessage(error), errorKind: mapError(error).kind });
    }
  }

  /** Runs the algorithm's loop; resolves with its result (APO's), or null (GRPO and SFT record none). */
  private async loop(
    runId: string,
    prepared: Prepared,
    signal: AbortSignal,
    logger: Logger,
  ): Promise<ApoResult | null> {
    switch (prepared.algorithm) {
      case 'grpo':
        await runGrpo(runId, prepared.config, { ...this.options, logger, signal, scoring: prepared.scoring });
        return null;
      case 'sft':
        await runSft(runId, prepared.config, { training: this.training, logger, signal });
        return null;
      case 'apo':
        return runApo(runId, prepared.config, prepared.plan, {
          store: this.training,
          call: this.options.call,
          batches: this.options.batches,
          env: prepared.env,
          scoring: prepared.plan.scoring,
          signal,
          maxAnswerBytes: this.options.maxAnswerBytes,
          progress: (line) => logger.info(`apo: ${line}`),
        });
      default:
        return assertNever(prepared);
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

/** What a stopped run's owner can do next: resume it (GRPO, SFT), or start it again (APO keeps no state to resume). */
function howToContinue(run: TrainingRun): string {
  return resumesFromCheckpoints(run.algorithm)
    ? `resume it with \`lightning train --resume ${run.id}\``
    : 'APO runs are not resumed (the beam search keeps its state in memory): its candidates and best prompt so far stay on its leaderboard; start it again with `lightning train --algorithm apo` or Optimize This Prompt';
}

/** GRPO's and SFT's agents get the daemon's environment and `config.command.env` only. */
function refuseEnv(env: StartEnv, algorithm: 'grpo' | 'sft'): void {
  const names = Object.keys(env);
  if (names.length > 0)
    throw new InvalidInputError(
      `params.env: only an APO run takes env (${names.join(', ')}); a ${algorithm.toUpperCase()} run's agents get the daemon's environment and config.command.env`,
    );
}

/**
 * An APO run's agents' environment, as when they ran in the process that started it: the daemon's, then the
 * configuration's `command.env`, then the start's `env` (null unsets). The start's secrets are redacted wherever
 * they turn up from now on (an agent that logs them, an upstream that echoes a key).
 */
function apoEnv(config: ApoConfig, env: StartEnv): NodeJS.ProcessEnv {
  const merged: NodeJS.ProcessEnv = { ...process.env, ...config.command.env };
  for (const [name, value] of Object.entries(env)) {
    if (value === null) delete merged[name];
    else {
      merged[name] = value;
      if (isSecretVariable(name, value)) registerSecretValue(value);
    }
  }
  return merged;
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
