/**
 * The store: one SQLite file owned by one daemon. Every method that writes runs in one
 * transaction and returns only after it committed, so a caller that got an answer holds an
 * acknowledged, durable write. Change events fire after the commit.
 *
 * Its use-case methods take params as the protocol's schemas parse them (`z.output`): they are
 * parsed once, where they enter the process (RPC handlers, HTTP routes, the CLI), not again here.
 */
import type { Database, DriverName } from './driver';
import type { z } from 'zod';
import type {
  AddRewardParams,
  AgentResources,
  ApoCandidate,
  Checkpoint,
  CreateRolloutParams,
  Dataset,
  ImportDatasetParams,
  ListRolloutsParams,
  NewTrainingRun,
  PutResourceParams,
  ApoRound,
  ApoResult,
  Resource,
  ResourceSummary,
  ResourceVersions,
  Reward,
  Rollout,
  RolloutDetail,
  RolloutPage,
  RolloutGroups,
  RolloutGroupsParams,
  Span,
  SpanInput,
  Stats,
  Task,
  TrainingRun,
  TrainingRunDetail,
  TrainingRunStatus,
  RunPlacement,
  RayNode,
  TrainingRunSummary,
  TransitionRolloutParams,
} from '../protocol';
import type { Event } from '../protocol/event';
import type { StoredSpanRef } from './changes';
import { StoreCommits, type GroupedOutcome } from './commits';
import { openDatabase, type OpenOptions } from './database';
import { LATEST_SCHEMA_VERSION } from './migrations';
import { AgentKeyRepository, type AgentKeyOptions, type AgentKeyRecord } from './agentKeys';
import { DatasetRepository } from './datasets';
import { postedIn, RewardRepository } from './rewards';
import { RolloutRepository } from './rollouts';
import { SpanRepository, type SpanBatch, type SpanBatchOutcome } from './spans';
import type { Trajectory } from '../protocol/lightningrl';
import type { ErrorKind } from '../protocol/errors';
import { ResourceRepository } from './resources';
import { TrainingRunRepository } from './trainingRuns';
import { readStats } from './stats';
import { groupByRun } from './runGroups';

export class Store {
  private readonly rollouts: RolloutRepository;
  private readonly spans: SpanRepository;
  private readonly rewards: RewardRepository;
  private readonly agentKeys: AgentKeyRepository;
  private readonly datasets: DatasetRepository;
  private readonly resources: ResourceRepository;
  private readonly commits: StoreCommits;
  /** Training runs with their metrics, checkpoints and candidates: reached only through the methods below. */
  private readonly training: TrainingRunRepository;
  /** Ids of rollouts created or changed by a committed write. */
  get onDidChangeRollouts(): Event<readonly string[]> {
    return this.commits.changes.onDidChangeRollouts;
  }
  /** Spans stored by a committed write, in sequence order per rollout. */
  get onDidAddSpans(): Event<readonly StoredSpanRef[]> {
    return this.commits.changes.onDidAddSpans;
  }
  /** A training run's status, cancel request, metrics, checkpoints or (APO) round changed, after the commit. */
  get onDidChangeTrainingRun(): Event<{ id: string; round: number | null }> {
    return this.commits.changes.onDidChangeTrainingRun;
  }

  static open(file: string, options?: OpenOptions): Store {
    const { db, driver } = openDatabase(file, options);
    return new Store(db, file, driver);
  }

  private constructor(
    readonly db: Database,
    readonly file: string,
    /** Which SQLite driver this runtime opened the file with (see driver.ts). */
    readonly driver: DriverName,
  ) {
    this.rollouts = new RolloutRepository(db);
    this.spans = new SpanRepository(db);
    this.rewards = new RewardRepository(db);
    this.agentKeys = new AgentKeyRepository(db);
    this.datasets = new DatasetRepository(db);
    this.resources = new ResourceRepository(db);
    this.training = new TrainingRunRepository(db);
    this.commits = new StoreCommits(db);
  }

  get schemaVersion(): number {
    return this.db.pragma('user_version', { simple: true }) as number;
  }

  createRollout(params: z.output<typeof CreateRolloutParams>): Rollout {
    const rollout = this.commits.write(() => {
      const created = this.rollouts.create(params);
      this.resources.pinRollout(created.id, params.resources);
      return created;
    });
    this.commits.rolloutsChanged([rollout.id]);
    return rollout;
  }

  transitionRollout(params: z.output<typeof TransitionRolloutParams>): Rollout {
    const rollout = this.commits.write(() => {
      const moved = this.rollouts.transition(params);
      // An attempt that ended takes its capability URL with it; a retry gets a new one.
      if (moved.status !== 'running' && moved.status !== 'queued') this.agentKeys.revoke(moved.id);
      return moved;
    });
    this.commits.rolloutsChanged([rollout.id]);
    return rollout;
  }

  /** Where an attempt that already ended ran (a worker's Ray node, learnt after it ended rollouts). */
  setAttemptNode(rolloutId: string, attempt: number, node: RayNode): void {
    this.commits.write(() => this.rollouts.setAttemptNode(rolloutId, attempt, node));
  }

  /**
   * Starts a rollout for an agent process: created (or, given its id, a queued one), running and
   * given its capability key, in one transaction. The key is returned once and only its hash is kept.
   */
  startAgentRun(
    rollout: z.output<typeof CreateRolloutParams> | string,
    options: AgentKeyOptions,
  ): { rollout: Rollout; key: string } {
    const started = this.commits.write(() => {
      let id: string;
      if (typeof rollout === 'string') id = rollout;
      else {
        id = this.rollouts.create(rollout).id;
        this.resources.pinRollout(id, rollout.resources);
      }
      const running = this.rollouts.transition({ id, to: 'running', error: null, exitCode: null });
      return { rollout: running, key: this.agentKeys.issue(running.id, options) };
    });
    this.commits.rolloutsChanged([started.rollout.id]);
    return started;
  }

  /** The rollout a capability key opens, with its upstream; undefined for an unknown key. */
  findAgentKey(key: string): AgentKeyRecord | undefined {
    return this.agentKeys.find(key);
  }

  getRollout(id: string): Rollout {
    return this.rollouts.get(id);
  }

  /** Resolves a full id or a unique prefix of one (at least 4 characters), as users type them. */
  resolveRolloutId(idOrPrefix: string): string {
    return this.rollouts.resolveId(idOrPrefix);
  }

  getRolloutDetail(id: string, options: { spans?: boolean; spanLimit?: number } = {}): RolloutDetail {
    return this.commits.read<RolloutDetail>(() => {
      const rollout = this.rollouts.get(id);
      const spans =
        options.spans === false
          ? []
          : options.spanLimit === undefined
            ? this.spans.list(id)
            : this.spans.listAfter(id, -1, options.spanLimit);
      const leftOut = options.spans === false ? 0 : rollout.spanCount - spans.length;
      return {
        rollout,
        attempts: this.rollouts.attempts(id),
        spans,
        rewards: this.rewards.list(id),
        resources: this.resources.pinnedVersions(id),
        servedBy: this.resources.servedBy(id),
        ...(leftOut > 0 && options.spanLimit !== undefined ? { spansLeftOut: leftOut } : {}),
      };
    });
  }

  /**
   * Every rollout matching `filter`, oldest first, with what LightningRL reads of its spans and its
   * rewards — a page at a time, each page in three queries.
   */
  *trajectories(
    filter: Omit<z.output<typeof ListRolloutsParams>, 'cursor' | 'limit' | 'order'>,
  ): Generator<Trajectory> {
    let cursor: string | undefined;
    do {
      const page = this.listRollouts({ ...filter, order: 'oldest', limit: 500, cursor });
      yield* this.trajectoriesFor(page.items);
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
  }

  /** The trajectories of the given rollouts (as `trajectories` yields them), in the order given. */
  trajectoriesOf(ids: readonly string[]): Trajectory[] {
    return this.trajectoriesFor(ids.map((id) => this.rollouts.get(id)));
  }

  /** The trajectories of rollouts already read (a page of `listRollouts`): their spans and rewards, in two queries. */
  trajectoriesFor(rollouts: readonly Rollout[]): Trajectory[] {
    const ids = rollouts.map((r) => r.id);
    const spans = this.spans.listForTraining(ids);
    const rewards = this.rewards.listMany(ids);
    return rollouts.map((rollout) => ({ rollout, spans: spans.get(rollout.id)!, rewards: rewards.get(rollout.id)! }));
  }

  listSpans(rolloutId: string, afterSequence: number, limit: number): Span[] {
    this.rollouts.get(rolloutId);
    return this.spans.listAfter(rolloutId, afterSequence, limit);
  }

  listRollouts(params: z.output<typeof ListRolloutsParams>): RolloutPage {
    return this.rollouts.list(params);
  }

  /** The matching rollouts counted, in all and per run with its batches, named by run or dataset (rollouts/groups). */
  rolloutGroups(params: z.output<typeof RolloutGroupsParams>): RolloutGroups {
    return this.commits.read<RolloutGroups>(() => {
      const { limit, ...filter } = params;
      const counted = this.rollouts.groups(filter);
      let datasetNames: Map<string, string> | undefined;
      return groupByRun(counted, limit, {
        run: (id) => this.training.find(id),
        datasetName: (id) => {
          datasetNames ??= new Map(this.datasets.list().map((dataset) => [dataset.id, dataset.name]));
          return datasetNames.get(id);
        },
      });
    });
  }

  /** Stores several rollouts' spans in one transaction: the unit of batched ingest. */
  addSpanBatches(batches: readonly SpanBatch[]): Array<SpanBatchOutcome | Error> {
    const outcomes = this.commits.write(() => this.spans.addEach(batches, Date.now()));
    const stored = outcomes.flatMap((outcome) => (outcome instanceof Error ? [] : outcome.stored));
    if (stored.length > 0) {
      this.commits.rolloutsChanged([...new Set(stored.map((span) => span.rolloutId))], stored);
    }
    return outcomes;
  }

  /**
   * The proxy's record of one LLM call made during `owner.attempt`, in the write that stores it: if that attempt is
   * over by then, it is kept with it, marked late and left out of training (never mixed in). Throws NotFoundError for
   * an unknown rollout.
   */
  addProxiedCall(owner: { readonly rolloutId: string; readonly attempt: number }, span: SpanInput): SpanBatchOutcome {
    return this.addSpans({ rolloutId: owner.rolloutId, spans: [span], attempt: owner.attempt });
  }

  addSpans(batch: SpanBatch): SpanBatchOutcome {
    const [outcome] = this.addSpanBatches([batch]);
    if (outcome instanceof Error) throw outcome;
    return outcome!;
  }

  /** `attempt`: an agent's reward, posted in that attempt (refused once it is over: rewards.ts#postedIn). */
  addReward(params: z.output<typeof AddRewardParams>, attempt?: number): Reward {
    const reward = this.commits.write(() => {
      const rollout = this.rollouts.get(params.rolloutId);
      return this.rewards.add(params, Date.now(), attempt === undefined ? null : postedIn(rollout, attempt));
    });
    this.commits.rolloutsChanged([reward.rolloutId]);
    return reward;
  }

  /** How many queued or running rollouts are pinned to version `version` of resource `name`. */
  activeRolloutsPinnedTo(name: string, version: number): number {
    return this.resources.activeRolloutsPinnedTo(name, version);
  }

  /** The resources a rollout's agent reads: the versions it was pinned to, else the current ones. */
  agentResources(rolloutId: string | null): AgentResources {
    return this.resources.forRollout(rolloutId);
  }

  putResource(params: z.output<typeof PutResourceParams>): Resource {
    return this.commits.write(() => this.resources.put(params));
  }

  getResource(name: string, version?: number): ResourceVersions {
    return this.commits.read<ResourceVersions>(() => ({
      resource: this.resources.get(name, version),
      versions: this.resources.versions(name).map(({ value: _value, ...rest }) => rest),
    }));
  }

  listResources(): ResourceSummary[] {
    return this.resources.list();
  }

  setCurrentResource(name: string, version: number): Resource {
    return this.commits.write(() => this.resources.setCurrent(name, version));
  }

  /** Records a cancel request (`cancelRequested`); the daemon's TrainingManager stops the run. */
  cancelTrainingRun(id: string): TrainingRun {
    return this.writeTraining(id, (training) => training.requestCancel(id));
  }

  /** An APO round's new candidates, scores and metrics, in one write. */
  recordApoRound(params: z.output<typeof ApoRound>): TrainingRun {
    return this.writeTraining(
      params.runId,
      (training) => {
        training.recordRound(params);
        return training.get(params.runId);
      },
      params.round,
    );
  }

  /** A run with its metric points after `afterStep` and its checkpoints or candidates, read in one transaction. */
  getTrainingRun(id: string, afterStep = -1): TrainingRunDetail {
    return this.commits.read<TrainingRunDetail>(() => this.training.detail(id, afterStep));
  }

  /** The newest runs, each with its latest metrics. */
  listTrainingRuns(limit: number): TrainingRunSummary[] {
    return this.commits.read<TrainingRunSummary[]>(() =>
      this.training.list(limit).map((run) => this.training.summary(run)),
    );
  }

  /**
   * Appends many episode rewards in one transaction (automatic scoring); one bad row writes none.
   * The rows' rollouts were just read; the foreign key refuses one deleted meanwhile. `skipScoredOf`: see
   * rewards.ts#addMany.
   */
  addRewards(
    rows: ReadonlyArray<z.output<typeof AddRewardParams>>,
    skipScoredOf?: readonly string[],
  ): Map<string, Reward[]> {
    const scored = this.commits.write(() => this.rewards.addMany(rows, Date.now(), skipScoredOf));
    this.commits.rolloutsChanged([...new Set(rows.map((row) => row.rolloutId))].filter((id) => !scored.has(id)));
    return scored;
  }

  importDataset(params: z.output<typeof ImportDatasetParams>): Dataset {
    return this.commits.write(() => this.datasets.create(params));
  }

  listDatasets(): Dataset[] {
    return this.datasets.list();
  }

  listTasks(dataset: string, split?: Task['split']): { dataset: Dataset; items: Task[] } {
    return this.datasets.tasks(dataset, split);
  }

  listRewards(rolloutId: string): Reward[] {
    this.rollouts.get(rolloutId);
    return this.rewards.list(rolloutId);
  }

  stats(): Stats {
    return readStats(this.db, this.schemaVersion);
  }

  // ---- Training runs as the daemon's own algorithms drive them (training/manager.ts, grpo.ts, policyServing.ts) ----

  trainingRun(id: string): TrainingRun {
    return this.training.get(id);
  }

  /** Every run, newest first, as records (not summaries). */
  trainingRunRecords(): TrainingRun[] {
    return this.training.list();
  }

  /** What `trainingRuns/changed` says about a run: its summary and its candidates (APO). */
  trainingRunChange(id: string): { run: TrainingRunSummary; candidates: ApoCandidate[] } {
    return this.commits.read(() => ({
      run: this.training.summary(this.training.get(id)),
      candidates: this.training.candidates(id),
    }));
  }

  /** A run the daemon drives (GRPO), recorded before it starts: its config already parsed. */
  recordTrainingRun(run: NewTrainingRun): TrainingRun {
    return this.writeTraining(
      (created: TrainingRun) => created.id,
      (training) => training.create(run),
    );
  }

  setTrainingRunStatus(
    id: string,
    to: TrainingRunStatus,
    details: {
      readonly error?: string | null;
      readonly errorKind?: ErrorKind | null;
      /** An APO run's outcome, with its final status. */
      readonly result?: ApoResult | null;
    } = {},
  ): TrainingRun {
    return this.writeTraining(id, (training) => training.transition(id, to, details));
  }

  /** A step's metrics and, when it saved one, its checkpoint (returned): one commit. */
  recordTrainingStep(
    runId: string,
    step: number,
    metrics: Readonly<Record<string, number>>,
    checkpoint?: { readonly dir: string; readonly metrics: Readonly<Record<string, number>> },
  ): Checkpoint | undefined {
    return this.writeTraining(runId, (training) => {
      if (Object.keys(metrics).length > 0) training.addMetrics(runId, step, metrics);
      return checkpoint && training.addCheckpoint(runId, step, checkpoint.dir, checkpoint.metrics);
    });
  }

  /** Counts again the Ray nodes that ran the run's attempts, into its placement. */
  recordRunRayNodes(runId: string): TrainingRun {
    return this.writeTraining(runId, (training) => training.recordRayNodes(runId));
  }

  /** The torchrun ranks the run's trainer worker started with, into its placement. */
  recordRunRanks(runId: string, ranks: RunPlacement['ranks']): TrainingRun {
    return this.writeTraining(runId, (training) => training.recordRanks(runId, ranks));
  }

  checkpoint(id: string): Checkpoint {
    return this.training.checkpoint(id);
  }

  /** Forgets checkpoints (retention, `checkpoints/delete`); their folders are deleted by the caller. */
  deleteCheckpoints(ids: readonly string[]): void {
    if (ids.length === 0) return;
    const runId = this.training.checkpoint(ids[0]!).runId;
    this.writeTraining(runId, (training) => ids.forEach((id) => training.deleteCheckpoint(id)));
  }

  /** A run's checkpoints (every run's without `runId`), oldest first. */
  checkpoints(runId?: string): Checkpoint[] {
    if (runId !== undefined) this.training.get(runId);
    return this.training.checkpoints(runId);
  }

  /** The policy version rollouts served by this checkpoint record (`resources.policy`). */
  policyVersionFor(checkpoint: Checkpoint): number {
    return this.writeTraining(checkpoint.runId, (training) => training.policyVersionFor(checkpoint));
  }

  addPolicyVersion(value: { runId: string; step: number; checkpoint: string | null }): number {
    return this.writeTraining(value.runId, (training) => training.addPolicyVersion(value));
  }

  /** Changes run `runId` (or the one `fn` returns) in one transaction; announces it after commit with its APO round. */
  private writeTraining<T>(
    runId: string | ((result: T) => string),
    fn: (training: TrainingRunRepository) => T,
    round: number | null = null,
  ): T {
    const result = this.commits.write(() => fn(this.training));
    this.commits.runChanged(typeof runId === 'string' ? runId : runId(result), round);
    return result;
  }

  /** Checkpoints the WAL into the main file and closes. Idempotent. */
  close(): void {
    this.commits.close();
  }

  get isOpen(): boolean {
    return this.commits.isOpen;
  }

  /** Group commit behind WriteQueue: `ops` in one transaction, each of several in its own savepoint (commits.ts). */
  runGrouped(ops: ReadonlyArray<() => unknown>): GroupedOutcome[] {
    return this.commits.runGrouped(ops);
  }
}

export { LATEST_SCHEMA_VERSION };
