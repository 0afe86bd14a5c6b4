/**
 * What an APO run needs of the daemon, as interfaces the daemon's parts satisfy (apo/ imports nothing of training/,
 * which runs it): the store's use cases (training/service.ts's TrainingService), the daemon's own RPC handlers for
 * agent runs and the batch runner, the environment its agents and its own LLM calls get, and a cancel signal.
 */
import type { AgentResources, ApoRound, Resource, RolloutDetail, Task } from '../protocol';
import type { BatchFollower, RolloutScoring, RunnerClient } from '../runner/pool';

/** One evaluation's rollouts: each task once, pinned to a candidate's resource version. */
export interface EvaluationBatch {
  readonly batchId: string;
  readonly mode: 'train' | 'val';
  readonly label: string;
  readonly tasks: ReadonlyArray<Pick<Task, 'id' | 'datasetId' | 'input'>>;
  readonly resources: Readonly<Record<string, number>>;
  readonly source: { readonly kind: 'command'; readonly argv: string[]; readonly cwd: string };
}

/** The store's use cases an APO run reads and writes through (TrainingService). */
export interface ApoStore {
  tasks(dataset: string, split?: Task['split']): { items: Task[] };
  resource(name: string, version?: number): Resource;
  hasResource(name: string): boolean;
  putPrompt(
    name: string,
    prompt: string,
    made: { current: true } | { current: false; runId: string },
  ): Promise<Resource>;
  openEvaluation(batch: EvaluationBatch): Promise<string[]>;
  /** Cancels what no agent took (`reason`); returns the batch's rollouts. */
  settleBatch(batchId: string, reason: string): Promise<unknown>;
  rolloutResources(rolloutId: string): AgentResources;
  rolloutDetail(id: string): RolloutDetail;
  recordApoRound(round: ApoRound): Promise<void>;
  /** Where a run's agents write their output. */
  logDir(runId: string): string;
}

export interface ApoContext {
  readonly store: ApoStore;
  /** The daemon's RPC methods, in process: agent runs (`agentRuns/start`) and the batch runner's. */
  readonly call: RunnerClient;
  /** Worker mode (`workers`): the daemon's batch queue, followed in process. */
  readonly batches: BatchFollower;
  /** The agents' environment before Lightning's variables (the daemon's, the run's command.env, the start's env). */
  readonly env: NodeJS.ProcessEnv;
  /** How each agent rollout is scored (apo/reward.ts); undefined: not automatically. */
  readonly scoring: RolloutScoring | undefined;
  /** Aborted: the run is cancelled (trainingRuns/cancel, the daemon's shutdown). */
  readonly signal: AbortSignal;
  /** The most bytes of one optimizer answer read (the daemon's LIGHTNING_MAX_UPSTREAM_BODY_BYTES: limits.ts). */
  readonly maxAnswerBytes: number;
  /** One line of progress, for the daemon's log. */
  progress(line: string): void;
}
