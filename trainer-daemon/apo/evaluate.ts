/**
 * Runs the agent over a batch of tasks with one candidate prompt and scores each rollout. The
 * rollouts are pinned to the candidate's resource version, so the agent reads it from
 * `GET $LIGHTNING_URL/resources` (and from `LIGHTNING_RESOURCES`, set to the same JSON), and the
 * store records which version each rollout ran with. Agents run through the daemon's batch runner, which
 * scores each rollout as it finishes (apo/reward.ts says with what).
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  noSkippedCalls,
  RewardPolicy,
  type ApoConfig,
  type Json,
  type RolloutMode,
  type RunCommand,
} from '../protocol';
import { errorMessage, LightningError } from '../protocol/errors';
import { episodeReward } from '../lightningrl/credit';
import { toScoringTrajectory } from '../rewards/trajectory';
import { BatchRunner } from '../runner/batch';
import type { BatchMode } from '../runner/pool';
import type { ApoContext } from './context';

export interface EvalTask {
  readonly id: string;
  readonly datasetId: string;
  readonly input: Json;
  readonly expected: Json | null;
}

export interface ScoredRollout {
  readonly rolloutId: string;
  readonly task: EvalTask;
  /** The episode reward; 0 when the rollout has none (it failed, or nothing judged it). */
  readonly reward: number;
  readonly answer: string | null;
}

/** The run was cancelled while agents were running. */
export class CancelledError extends LightningError {}

const POLICY = RewardPolicy.parse({});

/**
 * One process per rollout, or (`workers`) long-lived agent workers taking the batch's rollouts, the concurrency
 * spread over them; never more workers than rollouts (an idle one would only wait for the batch's end).
 */
export function batchMode(
  config: Pick<ApoConfig, 'concurrency' | 'workers' | 'command'>,
  argv: readonly string[],
  rollouts: number,
): BatchMode {
  const { cwd } = config.command;
  if (config.workers === null) return { kind: 'process', command: argv, cwd, concurrency: config.concurrency };
  const workers = Math.max(1, Math.min(config.workers, rollouts));
  return { kind: 'worker', command: argv, cwd, workers, concurrencyPerWorker: Math.ceil(config.concurrency / workers) };
}

export class Evaluator {
  private batches = 0;
  private runner: BatchRunner | undefined;
  private cancelled = false;
  /** LLM calls left out of the answers the critique reads (not whole answers), over every batch so far. */
  readonly skippedCalls = noSkippedCalls();

  constructor(
    private readonly runId: string,
    private readonly config: ApoConfig,
    private readonly context: Pick<ApoContext, 'store' | 'call' | 'batches' | 'env' | 'scoring'>,
  ) {}

  /** Stops the running agents; the batch being run throws CancelledError. */
  cancel(): void {
    this.cancelled = true;
    this.runner?.cancel();
  }

  async run(
    tasks: readonly EvalTask[],
    version: number,
    mode: Extract<RolloutMode, 'train' | 'val'>,
    label: string,
  ): Promise<ScoredRollout[]> {
    const { config, runId } = this;
    const { store } = this.context;
    const command: RunCommand = config.command;
    if (this.cancelled) throw new CancelledError('the run was cancelled');
    this.batches += 1;
    const batchId = `${runId}-b${this.batches}`;
    const ids = await store.openEvaluation({
      batchId,
      mode,
      label,
      tasks,
      resources: { [config.resource]: version },
      source: { kind: 'command', argv: [...command.argv], cwd: command.cwd },
    });
    const logDir = path.join(store.logDir(runId), batchId);
    const resources = store.rolloutResources(ids[0]!);
    const env: NodeJS.ProcessEnv = { ...this.context.env, LIGHTNING_RESOURCES: JSON.stringify(resources) };
    let argv = command.argv;
    if (config.promptFile !== null) {
      // The candidate in a copy of the prompt file, named like it, given where the agent is told the file's path.
      const copy = path.join(logDir, 'prompt', path.basename(config.promptFile));
      fs.mkdirSync(path.dirname(copy), { recursive: true });
      fs.writeFileSync(copy, resources.resources[config.resource]!.value as string);
      argv = argv.map((arg) => (path.resolve(command.cwd, arg) === config.promptFile ? copy : arg));
      env.LIGHTNING_PROMPT_FILE = copy;
    }
    this.runner = new BatchRunner({
      client: this.context.call,
      follower: this.context.batches,
      mode: batchMode(config, argv, tasks.length),
      timeoutMs: config.timeoutMs,
      upstream: config.upstream,
      tokenIds: false,
      logDir,
      env,
      onAttempt: () => {},
      scoring: this.context.scoring,
    });
    if (this.cancelled) this.runner.cancel();
    try {
      await this.runner.run(ids);
    } catch (error) {
      // The run fails with it (an agent command that cannot start, the daemon gone): those still queued say why.
      await store.settleBatch(batchId, `the training run stopped: ${errorMessage(error)}`).catch(() => undefined);
      throw error;
    }
    // Cancelled before the runner took them: nothing will run those still queued.
    await store.settleBatch(batchId, 'the training run was cancelled');
    if (this.runner.wasCancelled) throw new CancelledError('the run was cancelled');
    return ids.map((rolloutId, index) => this.rewardOf(rolloutId, tasks[index]!));
  }

  /** The episode reward under the shared policy (0 without one), and the final answer the critique sees. */
  private rewardOf(rolloutId: string, task: EvalTask): ScoredRollout {
    const detail = this.context.store.rolloutDetail(rolloutId);
    return {
      rolloutId,
      task,
      reward: episodeReward(detail.rewards, POLICY) ?? 0,
      answer: toScoringTrajectory(detail, this.skippedCalls).finalAnswer,
    };
  }
}
