/**
 * The store: one SQLite file owned by one daemon. Every method that writes runs in one
 * transaction and returns only after it committed, so a caller that got an answer holds an
 * acknowledged, durable write. Change events fire after the commit.
 */
import type { Database, Transaction } from 'better-sqlite3';
import {
  AddRewardParams,
  CreateRolloutParams,
  ListRolloutsParams,
  RolloutStatus,
  TransitionRolloutParams,
  type Reward,
  type Rollout,
  type RolloutDetail,
  type RolloutPage,
  type Span,
  type Stats,
  type Json,
  ImportDatasetParams,
  type Dataset,
  type Task,
} from '../protocol';
import { Emitter, type Event } from '../util/event';
import { openDatabase, type OpenOptions } from './database';
import { LATEST_SCHEMA_VERSION } from './migrations';
import { AgentKeyRepository, type AgentKeyOptions, type AgentKeyRecord } from './agentKeys';
import { DatasetRepository } from './datasets';
import { RewardRepository } from './rewards';
import { RolloutRepository } from './rollouts';
import { SpanRepository, type SpanBatch, type SpanBatchOutcome, type TrainingSpan } from './spans';
import { NotFoundError, InvalidInputError } from '../errors';
import { TrainingRepository } from './training';

export class Store {
  private readonly rollouts: RolloutRepository;
  private readonly spans: SpanRepository;
  private readonly rewards: RewardRepository;
  private readonly agentKeys: AgentKeyRepository;
  private readonly datasets: DatasetRepository;
  private readonly _onDidChangeRollouts = new Emitter<readonly string[]>();
  private readonly _onDidAddSpans = new Emitter<readonly Span[]>();
  private readonly _onDidChangeTraining = new Emitter<string>();
  /** Training runs, their metrics and checkpoints: read directly, written through `writeTraining`. */
  readonly training: TrainingRepository;
  private closed = false;
  /** One transaction wrapper, made once: better-sqlite3's wrappers are costly to create per call. */
  private readonly transaction: Transaction<(fn: () => unknown) => unknown>;
  /** Changes made inside an enclosing (group) transaction, announced once it commits. */
  private pending: { rollouts: string[]; spans: Span[] } | undefined;

  /** Ids of rollouts created or changed by a committed write. */
  readonly onDidChangeRollouts: Event<readonly string[]> = this._onDidChangeRollouts.event;
  /** Spans stored by a committed write, in sequence order per rollout. */
  readonly onDidAddSpans: Event<readonly Span[]> = this._onDidAddSpans.event;
  /** The id of a training run whose status, metrics or checkpoints changed (after the commit). */
  readonly onDidChangeTraining: Event<string> = this._onDidChangeTraining.event;

  static open(file: string, options?: OpenOptions): Store {
    return new Store(openDatabase(file, options), file);
  }

  private constructor(
    readonly db: Database,
    readonly file: string,
  ) {
    this.rollouts = new RolloutRepository(db);
    this.spans = new SpanRepository(db);
    this.rewards = new RewardRepository(db);
    this.agentKeys = new AgentKeyRepository(db);
    this.datasets = new DatasetRepository(db);
    this.training = new TrainingRepository(db);
    this.transaction = db.transaction((fn: () => unknown) => fn());
  }

  get schemaVersion(): number {
    return this.db.pragma('user_version', { simple: true }) as number;
  }

  createRollout(params: CreateRolloutParams): Rollout {
    const parsed = CreateRolloutParams.parse(params);
    const rollout = this.write(() => this.rollouts.create(parsed));
    this.afterCommit([rollout.id]);
    return rollout;
  }

  transitionRollout(params: TransitionRolloutParams): Rollout {
    const parsed = TransitionRolloutParams.parse(params);
    const rollout = this.write(() => {
      const moved = this.rollouts.transition(parsed);
      // An attempt that ended takes its capability URL with it; a retry gets a new one.
      if (moved.status !== 'running' && moved.status !== 'queued') this.agentKeys.revoke(moved.id);
      return moved;
    });
    this.afterCommit([rollout.id]);
    return rollout;
  }

  /**
   * Starts a rollout for an agent process: created, running (attempt 1) and given its capability
   * key, in one transaction. The key is returned once and only its hash is kept.
   */
  startAgentRun(params: CreateRolloutParams, options: AgentKeyOptions, existing?: string): { rollout: Rollout; key: string } {
    const parsed = CreateRolloutParams.parse(params);
    const started = this.write(() => {
      const id = existing ?? this.rollouts.create(parsed).id;
      const rollout = this.rollouts.transition({ id, to: 'running', error: null, exitCode: null });
      return { rollout, key: this.agentKeys.issue(rollout.id, options) };
    });
    this.afterCommit([started.rollout.id]);
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
    if (this.rollouts.find(idOrPrefix)) return idOrPrefix;
    if (idOrPrefix.length < 4) throw new NotFoundError(`rollout ${idOrPrefix} does not exist`);
    const matches = this.rollouts.idsWithPrefix(idOrPrefix);
    if (matches.length === 0) throw new NotFoundError(`rollout ${idOrPrefix} does not exist (list rollouts with \`lightning rollouts\`)`);
    if (matches.length > 1) throw new InvalidInputError(`rollout id prefix ${idOrPrefix} is ambiguous; type more of the id`);
    return matches[0]!;
  }

  getRolloutDetail(id: string): RolloutDetail {
    return this.transaction(() => ({
      rollout: this.rollouts.get(id),
      attempts: this.rollouts.attempts(id),
      spans: this.spans.list(id),
      rewards: this.rewards.list(id),
    })) as RolloutDetail;
  }

  /**
   * Every rollout matching `filter`, oldest first, with what LightningRL reads of its spans and its
   * rewards — a page at a time, each page in three queries.
   */
  *trajectories(filter: Omit<ListRolloutsParams, 'cursor' | 'limit' | 'order'>): Generator<Trajectory> {
    let cursor: string | undefined;
    do {
      const page = this.listRollouts({ ...filter, order: 'oldest', limit: 500, cursor });
      const ids = page.items.map((r) => r.id);
      const spans = this.spans.listForTraining(ids);
      const rewards = this.rewards.listMany(ids);
      for (const rollout of page.items) yield { rollout, spans: spans.get(rollout.id)!, rewards: rewards.get(rollout.id)! };
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
  }

  listSpans(rolloutId: string, afterSequence: number, limit: number): Span[] {
    this.rollouts.get(rolloutId);
    return this.spans.listAfter(rolloutId, afterSequence, limit);
  }

  listRollouts(params: ListRolloutsParams): RolloutPage {
    return this.rollouts.list(ListRolloutsParams.parse(params));
  }

  /** Stores several rollouts' spans in one transaction: the unit of batched ingest. */
  addSpanBatches(batches: readonly SpanBatch[]): Array<SpanBatchOutcome | Error> {
    const now = Date.now();
    const outcomes = this.write(() =>
      batches.map((batch) => {
        try {
          return this.spans.add(batch, now);
        } catch (error) {
          if (error instanceof NotFoundError) return error;
          throw error;
        }
      }),
    );
    const stored = outcomes.flatMap((outcome) => (outcome instanceof Error ? [] : outcome.stored));
    if (stored.length > 0) {
      this.afterCommit([...new Set(stored.map((span) => span.rolloutId))], stored);
    }
    return outcomes;
  }

  addSpans(batch: SpanBatch): SpanBatchOutcome {
    const [outcome] = this.addSpanBatches([batch]);
    if (outcome instanceof Error) throw outcome;
    return outcome!;
  }

  addReward(params: AddRewardParams): Reward {
    const parsed = AddRewardParams.parse(params);
    const reward = this.write(() => {
      this.rollouts.get(parsed.rolloutId);
      return this.rewards.add(parsed);
    });
    this.afterCommit([reward.rolloutId]);
    return reward;
  }

  /** The latest version of every named resource (prompt templates, …), as agents read them. */
  currentResources(): { resources: Record<string, { version: number; kind: string; value: Json }> } {
    const rows = this.db
      .prepare<[], { name: string; version: number; kind: string; value: string }>(
        'SELECT name, max(version) AS version, kind, value FROM resources GROUP BY name ORDER BY name',
      )
      .all();
    return { resources: Object.fromEntries(rows.map((row) => [row.name, { version: row.version, kind: row.kind, value: JSON.parse(row.value) as Json }])) };
  }

  importDataset(params: ImportDatasetParams): Dataset {
    const parsed = ImportDatasetParams.parse(params);
    return this.write(() => this.datasets.create(parsed));
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
    const byStatus = Object.fromEntries(RolloutStatus.options.map((status) => [status, 0])) as Stats['byStatus'];
    const rows = this.db
      .prepare<[], { status: RolloutStatus; n: number }>('SELECT status, count(*) AS n FROM rollouts GROUP BY status')
      .all();
    let rollouts = 0;
    for (const row of rows) {
      byStatus[row.status] = row.n;
      rollouts += row.n;
    }
    const count = (sql: string): number => (this.db.prepare<[], { n: number }>(sql).get()?.n ?? 0);
    return {
      rollouts,
      byStatus,
      spans: count('SELECT coalesce(sum(span_count), 0) AS n FROM rollouts'),
      rewards: count('SELECT count(*) AS n FROM rewards'),
      unrated: count(
        `SELECT count(*) AS n FROM rollouts r WHERE r.status IN ('succeeded','failed','timeout')
         AND NOT EXISTS (SELECT 1 FROM rewards w WHERE w.rollout_id = r.id)`,
      ),
      schemaVersion: this.schemaVersion,
    };
  }

  /** Changes training run `runId` in one transaction, and announces it after the commit. */
  writeTraining<T>(runId: string | ((result: T) => string), fn: (training: TrainingRepository) => T): T {
    const result = this.write(() => fn(this.training));
    this._onDidChangeTraining.fire(typeof runId === 'string' ? runId : runId(result));
    return result;
  }

  /** Checkpoints the WAL into the main file and closes. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this._onDidChangeRollouts.dispose();
    this._onDidAddSpans.dispose();
    this._onDidChangeTraining.dispose();
    if (this.db.open) {
      this.db.pragma('wal_checkpoint(TRUNCATE)');
      this.db.close();
    }
  }

  get isOpen(): boolean {
    return !this.closed && this.db.open;
  }

  /**
   * Runs `fn` in an IMMEDIATE transaction (the write lock taken up front: no upgrade deadlocks).
   * Inside an enclosing transaction it runs as part of it: in a group commit every operation
   * already has its own savepoint (see runGrouped), and a caller's own transaction is the caller's.
   */
  private write<T>(fn: () => T): T {
    if (this.db.inTransaction) return fn();
    return this.transaction.immediate(fn) as T;
  }

  /** Announces a committed change now, or, inside an enclosing transaction, once that commits. */
  private afterCommit(rolloutIds: readonly string[], spans: readonly Span[] = []): void {
    if (this.db.inTransaction) {
      this.pending ??= { rollouts: [], spans: [] };
      this.pending.rollouts.push(...rolloutIds);
      this.pending.spans.push(...spans);
      return;
    }
    if (spans.length > 0) this._onDidAddSpans.fire(spans);
    this._onDidChangeRollouts.fire(rolloutIds);
  }

  /**
   * Runs `ops` in one transaction, each in its own savepoint, and announces their changes after the
   * single commit: the group commit behind WriteQueue. One op failing does not fail the others;
   * if the commit itself fails, every op fails and nothing is announced.
   */
  runGrouped(ops: ReadonlyArray<() => unknown>): Array<{ ok: true; value: unknown } | { ok: false; error: unknown }> {
    let outcomes: Array<{ ok: true; value: unknown } | { ok: false; error: unknown }>;
    try {
      outcomes = this.write(() =>
        ops.map((op) => {
          const mark = { rollouts: this.pending?.rollouts.length ?? 0, spans: this.pending?.spans.length ?? 0 };
          try {
            // A nested transaction is a savepoint: a failing op takes back all of its own changes…
            return { ok: true as const, value: this.transaction(op) };
          } catch (error) {
            // …and its announcements.
            this.pending?.rollouts.splice(mark.rollouts);
            this.pending?.spans.splice(mark.spans);
            return { ok: false as const, error };
          }
        }),
      );
    } catch (error) {
      this.pending = undefined;
      throw error;
    }
    const pending = this.pending;
    this.pending = undefined;
    if (pending && pending.rollouts.length > 0) this.afterCommit([...new Set(pending.rollouts)], pending.spans);
    return outcomes;
  }
}

export interface Trajectory {
  readonly rollout: Rollout;
  readonly spans: TrainingSpan[];
  readonly rewards: Reward[];
}

export { LATEST_SCHEMA_VERSION };
