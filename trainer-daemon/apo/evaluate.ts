/**
 * Runs the agent over a batch of tasks with one candidate prompt and scores each rollout. The
 * rollouts are pinned to the candidate's resource version, so the agent reads it from
 * `GET $LIGHTNING_URL/resources` (and from `LIGHTNING_RESOURCES`, set to the same JSON), and the
 * store records which version each rollout ran with. Agents run through the dataset runner, which
 * scores each rollout as it finishes (apo/reward.ts says with what).
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  noSkippedCalls,
  RewardPolicy,
  type AgentResources,
  type ApoConfig,
  type Json,
  type RolloutMode,
} from '../protocol';
import { LightningError } from '../protocol/errors';
import { episodeReward } from '../lightningrl/credit';
import type { RpcClient } from '../protocol/connection';
import { toScoringTrajectory } from '../rewards/trajectory';
import { BatchRunner } from '../runner/batch';
import type { RolloutScoring } from '../runner/pool';

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

export interface EvaluatorOptions {
  readonly client: RpcClient;
  readonly runId: string;
  readonly config: ApoConfig;
  readonly argv: readonly string[];
  readonly upstream: string | null;
  readonly env: NodeJS.ProcessEnv;
  readonly logDir: string;
  /** How each rollout is scored as it finishes (apo/reward.ts's apoScoring); undefined: not at all. */
  readonly scoring: RolloutScoring | undefined;
}

const POLICY = RewardPolicy.parse({});

export class Evaluator {
  private batches = 0;
  private runner: BatchRunner | undefined;
  private cancelled = false;
  /** LLM calls left out of the answers the critique reads (not whole answers), over every batch so far. */
  readonly skippedCalls = noSkippedCalls();

  constructor(private readonly options: EvaluatorOptions) {}

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
    const { client, runId, config, argv } = this.options;
    if (this.cancelled) throw new CancelledError('the run was cancelled');
    this.batches += 1;
    const batchId = `${runId}-b${this.batches}`;
    const ids: string[] = [];
    for (const task of tasks) {
      const rollout = await client.request('createRollout', {
        mode,
        label,
        task: { id: task.id, input: task.input },
        datasetId: task.datasetId,
        batchId,
        source: { kind: 'command', argv: [...argv], cwd: process.cwd() },
        resources: { [config.resource]: version },
      });
      ids.push(rollout.id);
    }
    const logDir = path.join(this.options.logDir, batchId);
    const resources = await this.agentResources(version);
    const env: NodeJS.ProcessEnv = { ...this.options.env, LIGHTNING_RESOURCES: JSON.stringify(resources) };
    let command = argv;
    if (config.promptFile !== null) {
      // The candidate in a copy of the prompt file, named like it, given where the agent is told the file's path.
      const copy = path.join(logDir, 'prompt', path.basename(config.promptFile));
      fs.mkdirSync(path.dirname(copy), { recursive: true });
      fs.writeFileSync(copy, resources.resources[config.resource]!.value as string);
      command = argv.map((arg) => (path.resolve(arg) === config.promptFile ? copy : arg));
      env.LIGHTNING_PROMPT_FILE = copy;
    }
    this.runner = new BatchRunner({
      client,
      mode: { kind: 'process', command, concurrency: config.concurrency },
      timeoutMs: config.timeoutMs,
      upstream: this.options.upstream,
      tokenIds: false,
      logDir,
      env,
      onAttempt: () => {},
      scoring: this.options.scoring,
    });
    if (this.cancelled) this.runner.cancel();
    await this.runner.run(ids);
    if (this.runner.wasCancelled) throw new CancelledError('the run was cancelled');
    const scored: ScoredRollout[] = [];
    for (const [index, rolloutId] of ids.entries()) scored.push(await this.rewardOf(rolloutId, tasks[index]!));
    return scored;
  }

  /** What GET /resources answers the batch's agents: the candidate, and the current version of every other resource. */
  private async agentResources(version: number): Promise<AgentResources> {
    const { client, config } = this.options;
    const resources: AgentResources['resources'] = {};
    for (const summary of (await client.request('listResources', {})).items) {
      const { resource } = await client.request('getResource', {
        name: summary.name,
        version: summary.name === config.resource ? version : summary.currentVersion,
      });
      resources[resource.name] = { version: resource.version, kind: resource.kind, value: resource.value };
    }
    return { resources };
  }

  /** The episode reward under the shared policy (0 without one), and the final answer the critique sees. */
  private async rewardOf(rolloutId: string, task: EvalTask): Promise<ScoredRollout> {
    const detail = await this.options.client.request('getRollout', { id: rolloutId });
    return {
      rolloutId,
      task,
      reward: episodeReward(detail.rewards, POLICY) ?? 0,
      answer: toScoringTrajectory(detail, this.skippedCalls).finalAnswer,
    };
  }
}
