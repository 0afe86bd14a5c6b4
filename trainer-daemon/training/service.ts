/**
 * Training's one surface on the store (STYLE.md, "Store access"): what the daemon's training loops
 * (GRPO, training/grpo.ts; SFT, training/sft.ts; APO, apo/loop.ts; runs' lifecycle, training/manager.ts) do with
 * the store, as use cases. The RPC handlers serve `datasets/tasks` and `checkpoints/list` through it too, so an
 * algorithm and the editor read the same things the same way. Writes go through the write queue (group
 * commit, lock retries) when the daemon has one.
 */
import path from 'node:path';
import {
  ApoRound,
  grpoBatchId,
  runPolicies,
  type AgentResources,
  type ApoResult,
  type Checkpoint,
  type DeleteCheckpointResult,
  type KeepCheckpoints,
  type Dataset,
  type NewTrainingRun,
  type Resource,
  type Rollout,
  type RolloutDetail,
  type RolloutMode,
  type RolloutStatus,
  type RunPlacement,
  type RolloutSource,
  type Task,
  type TrainingRun,
  type TrainingRunStatus,
} from '../protocol';
import { ConflictError, type ErrorKind } from '../protocol/errors';
import { dropOptimizerState, measureCheckpoint, removeCheckpointFolder, removeEmptyFolder } from './checkpointFiles';
import { planRetention, type RetentionPlan } from './retention';
import { checkpointPolicy } from './grpoPolicies';
import type { Trajectory } from '../protocol/lightningrl';
import type { Store } from '../store/store';
import type { WriteQueue } from '../store/writeQueue';

/**
 * One iteration's rollouts: each task `samples` times, served by the policy at `step` (its checkpoint, or the base
 * model when null).
 */
export interface BatchSpec {
  readonly runId: string;
  readonly mode: Extract<RolloutMode, 'train' | 'val'>;
  readonly step: number;
  readonly checkpoint: string | null;
  readonly tasks: readonly Task[];
  readonly samples: number;
  readonly source: RolloutSource;
}

/** One APO evaluation: each task once, its rollouts pinned to the candidate's resource version. */
export interface EvaluationSpec {
  readonly batchId: string;
  readonly mode: Extract<RolloutMode, 'train' | 'val'>;
  readonly label: string;
  readonly tasks: ReadonlyArray<Pick<Task, 'id' | 'datasetId' | 'input'>>;
  /** Resource versions by name; every other resource is pinned at its current version. */
  readonly resources: Readonly<Record<string, number>>;
  readonly source: RolloutSource;
}

export class TrainingService {
  /** Checkpoints in use outside the loops (being exported: by id, how many times); retention and delete leave them. */
  private readonly busy = new Map<string, number>();
  /** The checkpoint served outside training now (the daemon's PolicyServing), if any. */
  private served: () => string | undefined = () => undefined;

  constructor(
    private readonly store: Store,
    private readonly writes?: WriteQueue,
  ) {}

  /** Where the daemon serves a checkpoint (policy/serve): that one is never deleted under it. */
  protectServed(served: () => string | undefined): void {
    this.served = served;
  }

  /** The store file: its folder holds the runs' checkpoints and logs, and the trainer's Python environment. */
  get storeFile(): string {
    return this.store.file;
  }

  /** Whether the store is still open (a loop that outlives the daemon's shutdown records nothing). */
  get isOpen(): boolean {
    return this.store.isOpen;
  }

  /** Checkpoints live beside the store: `.lightning/checkpoints/<run>/<step>`. */
  checkpointDir(runId: string, step: number): string {
    return path.join(path.dirname(this.store.file), 'checkpoints', runId, String(step));
  }

  /** The agents' output of a run's batches: `.lightning/logs/<run>`. */
  logDir(runId: string): string {
    return path.join(path.dirname(this.store.file), 'logs', runId);
  }

  // ---- Datasets and checkpoints (also `datasets/tasks` and `checkpoints/list`) ----

  /** A dataset's tasks (by id or name), of one split or all, in file order. */
  tasks(dataset: string, split?: Task['split']): { dataset: Dataset; items: Task[] } {
    return this.store.listTasks(dataset, split);
  }

  /** A run's checkpoints (every run's without `runId`), oldest first: a run resumes from the last. */
  checkpoints(runId?: string): Checkpoint[] {
    return this.store.checkpoints(runId);
  }

  checkpoint(id: string): Checkpoint {
    return this.store.checkpoint(id);
  }

  /** The same, each with its size on disk and whether it keeps optimizer state (`checkpoints/list`). */
  measuredCheckpoints(runId?: string): Checkpoint[] {
    return this.checkpoints(runId).map((checkpoint) => ({ ...checkpoint, ...measureCheckpoint(checkpoint.path) }));
  }

  /** Runs `job` with the checkpoint marked in use: retention and `checkpoints/delete` leave it meanwhile. */
  async using<T>(id: string, job: () => Promise<T>): Promise<T> {
    this.busy.set(id, (this.busy.get(id) ?? 0) + 1);
    try {
      return await job();
    } finally {
      const left = (this.busy.get(id) ?? 1) - 1;
      if (left === 0) this.busy.delete(id);
      else this.busy.set(id, left);
    }
  }

  private inUse(): Set<string> {
    const served = this.served();
    return new Set([...this.busy.keys(), ...(served ? [served] : [])]);
  }

  /**
   * Applies the run's retention (training/retention.ts) to its checkpoints now: deletes the ones it does not keep,
   * records and folders, and the optimizer state of every kept one but the newest.
   */
  async applyRetention(runId: string, keep: KeepCheckpoints): Promise<RetentionPlan> {
    const checkpoints = this.measuredCheckpoints(runId);
    const { run, metrics } = this.store.getTrainingRun(runId);
    // Several policies: each policy's checkpoints are kept (best, last N, newest's optimizer) as one run's would be.
    const policies = runPolicies(run);
    const plan = planRetention(checkpoints, metrics, keep, this.inUse(), (c) => checkpointPolicy(c, policies));
    if (plan.remove.length > 0) await this.write(() => this.store.deleteCheckpoints(plan.remove.map((c) => c.id)));
    for (const checkpoint of plan.remove) {
      removeCheckpointFolder(checkpoint.path);
      // A policy's checkpoint is a folder of its iteration's: the iteration's folder goes with its last policy.
      if (checkpointPolicy(checkpoint, policies) !== null) removeEmptyFolder(path.dirname(checkpoint.path));
    }
    for (const checkpoint of plan.dropOptimizer) dropOptimizerState(checkpoint.path);
    return plan;
  }

  /**
   * `checkpoints/delete`: the record and the folder. Refused for the checkpoint served now, one being exported, and
   * the newest of a run that is running (what it continues from).
   */
  async deleteCheckpoint(id: string): Promise<DeleteCheckpointResult> {
    const checkpoint = this.store.checkpoint(id);
    if (this.served() === id)
      throw new ConflictError(
        `checkpoint ${id} is being served (Use Checkpoint): stop using it first (Lightning: Stop Using Checkpoint, or policy/stop)`,
      );
    if (this.busy.has(id))
      throw new ConflictError(`checkpoint ${id} is being exported: delete it once the export is done`);
    const run = this.store.trainingRun(checkpoint.runId);
    // With several policies each policy continues from its own newest checkpoint.
    const policies = runPolicies(run);
    const policy = checkpointPolicy(checkpoint, policies);
    const newest = this.checkpoints(run.id)
      .filter((c) => checkpointPolicy(c, policies) === policy)
      .at(-1);
    if ((run.status === 'running' || run.status === 'queued') && newest?.id === id) {
      throw new ConflictError(
        `checkpoint ${id} is the newest of run ${run.id}, which is ${run.status}: the run continues from it; stop the run first (Ctrl-C its lightning train, or cancel it in the editor), or delete an older one`,
      );
    }
    await this.write(() => this.store.deleteCheckpoints([id]));
    return { deleted: id, bytes: removeCheckpointFolder(checkpoint.path) };
  }

  // ---- Runs: written at once, not group-committed, so `training/start` answers with the run as recorded ----

  run(id: string): TrainingRun {
    return this.store.trainingRun(id);
  }

  /** Every run, newest first. */
  runs(): TrainingRun[] {
    return this.store.trainingRunRecords();
  }

  /** A run the daemon drives, recorded before it starts. */
  recordRun(run: NewTrainingRun): TrainingRun {
    return this.store.recordTrainingRun(run);
  }

  /** A status change; a final APO run's `result` with it. */
  setRunStatus(
    id: string,
    to: TrainingRunStatus,
    details: {
      readonly error?: string | null;
      readonly errorKind?: ErrorKind | null;
      readonly result?: ApoResult | null;
    } = {},
  ): TrainingRun {
    return this.store.setTrainingRunStatus(id, to, details);
  }

  /** Where the run's rollouts ran: the Ray nodes of its attempts, counted again (after each batch). */
  async recordRayNodes(runId: string): Promise<void> {
    await this.write(() => this.store.recordRunRayNodes(runId));
  }

  /** The torchrun ranks its trainer worker started with (rank, local rank, host, as each reported). */
  async recordRanks(runId: string, ranks: RunPlacement['ranks']): Promise<void> {
    await this.write(() => this.store.recordRunRanks(runId, ranks));
  }

  /** A step's metrics and, when it saved one, its checkpoint: one commit. */
  async recordStep(
    runId: string,
    step: number,
    metrics: Readonly<Record<string, number>>,
    checkpoint?: { readonly dir: string; readonly metrics: Readonly<Record<string, number>> },
  ): Promise<void> {
    await this.write(() => this.store.recordTrainingStep(runId, step, metrics, checkpoint));
  }

  /**
   * A step with a checkpoint per policy, recorded in one commit once every policy's is saved (one write of the daemon's
   * write queue): a run stopped between the saves records none of them, and resumes from the step before with every
   * policy (never one a step ahead).
   */
  async recordPolicySteps(
    runId: string,
    step: number,
    metrics: Readonly<Record<string, number>>,
    checkpoints: ReadonlyArray<{ readonly dir: string; readonly metrics: Readonly<Record<string, number>> }>,
  ): Promise<void> {
    await this.write(() => {
      // The step's metrics once, with the first.
      for (const [index, checkpoint] of checkpoints.entries())
        this.store.recordTrainingStep(runId, step, index === 0 ? metrics : {}, checkpoint);
    });
  }

  // ---- An iteration's batch of rollouts ----

  /**
   * Queues a batch: a policy version for the checkpoint that serves it (pinned as each rollout's
   * `policy` resource) and one rollout per task and sample, in one commit. Returns the rollout ids
   * in task order, each task's samples together.
   */
  async openBatch(spec: BatchSpec): Promise<{ batchId: string; rolloutIds: string[] }> {
    const batchId = grpoBatchId(spec.runId, spec.mode, spec.step);
    const rolloutIds = await this.write(() => {
      const version = this.store.addPolicyVersion({ runId: spec.runId, step: spec.step, checkpoint: spec.checkpoint });
      return spec.tasks.flatMap((task) =>
        Array.from(
          { length: spec.samples },
          () =>
            this.store.createRollout({
              mode: spec.mode,
              label: spec.runId,
              task: { id: task.id, input: task.input },
              source: spec.source,
              maxAttempts: 1,
              datasetId: task.datasetId,
              batchId,
              resourcesVersion: version,
              resources: { policy: version },
            }).id,
        ),
      );
    }, spec.tasks.length * spec.samples);
    return { batchId, rolloutIds };
  }

  /**
   * After its runner: the batch's rollouts nobody started are cancelled with `reason`; returns every rollout of the
   * batch, oldest first.
   */
  async settleBatch(batchId: string, reason: string): Promise<Rollout[]> {
    const queued = this.batchRollouts(batchId).filter((rollout) => rollout.status === 'queued');
    if (queued.length > 0) {
      await this.write(() => {
        for (const { id } of queued) {
          if (this.store.getRollout(id).status === 'queued')
            this.store.transitionRollout({ id, to: 'cancelled', error: reason, exitCode: null });
        }
      }, queued.length);
    }
    return this.batchRollouts(batchId);
  }

  /** What LightningRL reads of a batch's rollouts (spans and rewards), oldest first. */
  trajectories(batchId: string): Iterable<Trajectory> {
    return this.store.trajectories({ batchId });
  }

  /**
   * The trajectories of the rollouts `lightning export` would read with these filters (SFT's rows), oldest first;
   * `dataset` is a name or an id (an unknown one is an error, not an empty run).
   */
  rolloutTrajectories(filter: {
    readonly status: RolloutStatus[];
    readonly mode?: RolloutMode;
    readonly label?: string;
    readonly dataset?: string;
  }): Iterable<Trajectory> {
    const datasetId = filter.dataset === undefined ? undefined : this.store.listTasks(filter.dataset).dataset.id;
    return this.store.trajectories({
      status: filter.status,
      ...(filter.mode === undefined ? {} : { mode: filter.mode }),
      ...(filter.label === undefined ? {} : { label: filter.label }),
      ...(datasetId === undefined ? {} : { datasetId }),
    });
  }

  // ---- APO: prompts as resource versions, evaluations, rounds ----

  /** A version of a resource (default: the current one). */
  resource(name: string, version?: number): Resource {
    return this.store.getResource(name, version).resource;
  }

  /** Whether a resource of this name exists. */
  hasResource(name: string): boolean {
    return this.store.listResources().some((summary) => summary.name === name);
  }

  /** A new version of a prompt template: current (a seed from a prompt file), or a run's candidate (not current). */
  async putPrompt(
    name: string,
    prompt: string,
    made: { current: true } | { current: false; runId: string },
  ): Promise<Resource> {
    return this.write(() =>
      this.store.putResource({
        name,
        kind: 'prompt_template',
        value: prompt,
        current: made.current,
        runId: made.current ? null : made.runId,
      }),
    );
  }

  /** Queues an evaluation's rollouts in one commit; returns their ids in task order. */
  async openEvaluation(spec: EvaluationSpec): Promise<string[]> {
    return this.write(
      () =>
        spec.tasks.map(
          (task) =>
            this.store.createRollout({
              mode: spec.mode,
              label: spec.label,
              task: { id: task.id, input: task.input },
              source: spec.source,
              maxAttempts: 1,
              datasetId: task.datasetId,
              batchId: spec.batchId,
              resourcesVersion: null,
              resources: { ...spec.resources },
            }).id,
        ),
      spec.tasks.length,
    );
  }

  /** What `GET /resources` answers a rollout's agent: the versions it is pinned to. */
  rolloutResources(rolloutId: string): AgentResources {
    return this.store.agentResources(rolloutId);
  }

  /** A rollout with its spans and rewards (what APO scores and shows the critique). */
  rolloutDetail(id: string): RolloutDetail {
    return this.store.getRolloutDetail(id);
  }

  /** An APO round's new candidates, their scores and the round's metrics, in one commit. */
  async recordApoRound(round: ApoRound): Promise<void> {
    const parsed = ApoRound.parse(round);
    await this.write(() => this.store.recordApoRound(parsed));
  }

  private batchRollouts(batchId: string): Rollout[] {
    const all: Rollout[] = [];
    let cursor: string | undefined;
    do {
      const page = this.store.listRollouts({ batchId, limit: 500, order: 'oldest', cursor });
      all.push(...page.items);
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
    return all;
  }

  private async write<T>(op: () => T, units = 1): Promise<T> {
    return this.writes ? this.writes.submit(op, units) : op();
  }
}
