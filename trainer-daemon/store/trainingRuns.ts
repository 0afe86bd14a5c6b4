/**
 * Training runs of every algorithm: configuration and status, a cancel request (recorded as the
 * daemon's TrainingManager stops the run), metric time series, and each algorithm's own records: GRPO's and SFT's
 * checkpoints (with the `policy` resource whose versions say which checkpoint served which
 * rollouts) and APO's leaderboard of candidate prompts.
 */
import crypto from 'node:crypto';
import type { Database, Statement } from './driver';
import type { z } from 'zod';
import {
  type ApoCandidate,
  type ApoResult,
  type ApoRound,
  type Checkpoint,
  type CritiqueStyle,
  describeIssues,
  type Json,
  type MetricSeries,
  type NewTrainingRun,
  type RunPlacement,
  TrainingRun,
  type TrainingRunDetail,
  type TrainingRunStatus,
  type TrainingRunSummary,
} from '../protocol';
import {
  InvalidInputError,
  InvalidTransitionError,
  LightningError,
  NotFoundError,
  type ErrorKind,
} from '../protocol/errors';
import { assertNever } from '../protocol/assert';
import { isFinal } from '../protocol/status';

interface RunRow {
  id: string;
  algorithm: string;
  config: string;
  status: TrainingRunStatus;
  created_at: number;
  started_at: number | null;
  ended_at: number | null;
  error: string | null;
  error_kind: ErrorKind | null;
  cancel_requested_at: number | null;
  result: string | null;
  placement: string | null;
}

interface CandidateRow {
  run_id: string;
  id: string;
  round: number;
  parent_id: string | null;
  resource_name: string;
  version: number;
  prompt: string;
  critique: string | null;
  critique_style: CritiqueStyle | null;
  batch_score: number | null;
  val_score: number | null;
  rollouts: number;
  created_at: number;
}

interface CheckpointRow {
  id: string;
  run_id: string;
  step: number;
  path: string;
  metrics: string;
  created_at: number;
}

/**
 * A row as its algorithm's run: the stored configuration parsed with that algorithm's schema (the store is a file: data
 * entering the process).
 */
function rowToRun(row: RunRow): TrainingRun {
  const run = TrainingRun.safeParse({
    id: row.id,
    algorithm: row.algorithm,
    config: JSON.parse(row.config) as Json,
    status: row.status,
    createdAt: row.created_at,
    startedAt: row.started_at,
    endedAt: row.ended_at,
    error: row.error,
    errorKind: row.error_kind,
    cancelRequested: row.cancel_requested_at !== null,
    result: row.result === null ? null : (JSON.parse(row.result) as Json),
    ...(row.placement === null ? {} : { placement: JSON.parse(row.placement) as Json }),
  });
  if (!run.success)
    throw new LightningError(
      `training run ${row.id} in the store is not a ${row.algorithm} run this version reads: ${describeIssues(run.error, 'run')}`,
    );
  return run.data;
}

/** A run's result must be its algorithm's: an APO run's an `ApoResult`; GRPO and SFT runs record none. */
function checkResult(run: TrainingRun): void {
  switch (run.algorithm) {
    case 'apo':
      return;
    case 'grpo':
    case 'sft':
      throw new LightningError(
        `training run ${run.id} is a ${run.algorithm.toUpperCase()} run, which records no result (its metrics and checkpoints are its outcome)`,
      );
    default:
      assertNever(run);
  }
}

function rowToCandidate(row: CandidateRow): ApoCandidate {
  return {
    id: row.id,
    runId: row.run_id,
    round: row.round,
    parentId: row.parent_id,
    resourceName: row.resource_name,
    version: row.version,
    prompt: JSON.parse(row.prompt) as string,
    critique: row.critique,
    critiqueStyle: row.critique_style,
    batchScore: row.batch_score,
    valScore: row.val_score,
    rollouts: row.rollouts,
    createdAt: row.created_at,
  };
}

function rowToCheckpoint(row: CheckpointRow): Checkpoint {
  return {
    id: row.id,
    runId: row.run_id,
    step: row.step,
    path: row.path,
    metrics: JSON.parse(row.metrics) as Record<string, number>,
    createdAt: row.created_at,
  };
}

/** Which statuses a run may move to from each status (resume, GRPO: cancelled/failed → running). */
const NEXT: Record<TrainingRunStatus, readonly TrainingRunStatus[]> = {
  queued: ['running', 'failed', 'cancelled'],
  running: ['succeeded', 'failed', 'cancelled'],
  succeeded: [],
  failed: ['running'],
  cancelled: ['running'],
};

/** What a status change records besides the status. */
export interface TransitionDetails {
  readonly error?: string | null;
  /** The error's kind, when the one recording it knows (the daemon's own loops do). */
  readonly errorKind?: ErrorKind | null;
  /** An APO run's outcome (refused for the other algorithms). */
  readonly result?: ApoResult | null;
}

export class TrainingRunRepository {
  private readonly insertRun: Statement;
  private readonly runById: Statement<[string], RunRow>;
  private readonly allRuns: Statement<[number], RunRow>;
  private readonly updateRun: Statement;
  private readonly cancel: Statement<[number, string]>;
  private readonly insertCandidate: Statement;
  private readonly score: Statement;
  private readonly candidatesOf: Statement<[string], CandidateRow>;
  private readonly insertMetric: Statement<[string, number, string, number, number]>;
  private readonly metricsAfter: Statement<[string, number], MetricSeries[number]>;
  private readonly latestMetrics: Statement<[string], { step: number; name: string; value: number }>;
  private readonly insertCheckpoint: Statement;
  private readonly checkpointsOf: Statement<[string], CheckpointRow>;
  private readonly allCheckpoints: Statement<[], CheckpointRow>;
  private readonly nextPolicyVersion: Statement<[], { version: number }>;
  private readonly insertResource: Statement;
  private readonly policyHead: Statement<[number]>;
  private readonly checkpointById: Statement<[string], CheckpointRow>;
  private readonly removeCheckpoint: Statement<[string]>;
  private readonly policyOfCheckpoint: Statement<[string], { version: number }>;
  private readonly rayNodesOf: Statement<[string, string], { node: string; attempts: number }>;
  private readonly setPlacement: Statement<[string, string]>;

  constructor(db: Database) {
    this.insertRun = db.prepare(
      "INSERT INTO training_runs (id, algorithm, config, status, created_at) VALUES (?, ?, ?, 'queued', ?)",
    );
    this.runById = db.prepare('SELECT * FROM training_runs WHERE id = ?');
    this.allRuns = db.prepare('SELECT * FROM training_runs ORDER BY created_at DESC, id LIMIT ?');
    // To running: (re)started now, not ended (a resumed run's old cancel request dropped); to a final status: ended
    // now.
    this.updateRun =
      db.prepare(`UPDATE training_runs SET status = @status, error = @error, error_kind = @errorKind, result = @result,
      started_at = CASE WHEN @running THEN @now ELSE started_at END, ended_at = CASE WHEN @running THEN NULL ELSE @now END,
      cancel_requested_at = CASE WHEN @resumed THEN NULL ELSE cancel_requested_at END WHERE id = @id`);
    this.cancel = db.prepare(
      'UPDATE training_runs SET cancel_requested_at = coalesce(cancel_requested_at, ?) WHERE id = ?',
    );
    this.insertCandidate =
      db.prepare(`INSERT INTO apo_candidates (run_id, id, round, parent_id, resource_name, version, critique, critique_style, created_at)
      VALUES (@runId, @id, @round, @parentId, @resourceName, @version, @critique, @critiqueStyle, @now)`);
    this.score =
      db.prepare(`UPDATE apo_candidates SET batch_score = coalesce(@batchScore, batch_score), val_score = coalesce(@valScore, val_score),
      rollouts = rollouts + @rollouts WHERE run_id = @runId AND id = @id`);
    // Best first: scored on the full validation set before scored on a batch only (a small batch's
    // score says less), each by score; ties by creation order.
    this.candidatesOf = db.prepare(`SELECT c.*, r.value AS prompt FROM apo_candidates c
      JOIN resources r ON r.name = c.resource_name AND r.version = c.version
      WHERE c.run_id = ? ORDER BY c.val_score DESC NULLS LAST, c.batch_score DESC NULLS LAST, c.round, c.created_at, c.id`);
    this.insertMetric = db.prepare(
      'INSERT INTO metric_points (run_id, step, name, value, time_ms) VALUES (?, ?, ?, ?, ?)',
    );
    this.metricsAfter = db.prepare(
      'SELECT step, name, value, time_ms AS timeMs FROM metric_points WHERE run_id = ? AND step > ? ORDER BY step, name, rowid',
    );
    // The latest point of each metric (a resumed run may repeat a step: the newest row wins).
    this.latestMetrics = db.prepare(`SELECT m.step, m.name, m.value FROM metric_points m
      WHERE m.run_id = ? AND m.rowid = (SELECT max(rowid) FROM metric_points WHERE run_id = m.run_id AND name = m.name)`);
    this.insertCheckpoint = db.prepare(
      'INSERT INTO checkpoints (id, run_id, step, path, metrics, created_at) VALUES (?, ?, ?, ?, ?, ?)',
    );
    this.checkpointsOf = db.prepare('SELECT * FROM checkpoints WHERE run_id = ? ORDER BY step, created_at');
    this.allCheckpoints = db.prepare('SELECT * FROM checkpoints ORDER BY created_at DESC');
    this.nextPolicyVersion = db.prepare(
      `SELECT coalesce(max(version), 0) + 1 AS version FROM resources WHERE name = 'policy'`,
    );
    this.insertResource = db.prepare(
      `INSERT INTO resources (name, version, kind, value, created_at, run_id) VALUES ('policy', ?, 'checkpoint', ?, ?, ?)`,
    );
    this.policyHead = db.prepare(
      `INSERT INTO resource_heads (name, version) VALUES ('policy', ?) ON CONFLICT (name) DO UPDATE SET version = excluded.version`,
    );
    this.checkpointById = db.prepare('SELECT * FROM checkpoints WHERE id = ?');
    this.removeCheckpoint = db.prepare('DELETE FROM checkpoints WHERE id = ?');
    this.policyOfCheckpoint = db.prepare(
      `SELECT version FROM resources WHERE name = 'policy' AND json_extract(value, '$.checkpointId') = ? ORDER BY version LIMIT 1`,
    );
    // A run's rollouts are its batches' (grpoBatchId: `<run>-<mode>-<step>`): a range of the batch index.
    this.rayNodesOf =
      db.prepare(`SELECT max(a.node) AS node, count(*) AS attempts FROM rollouts r JOIN attempts a ON a.rollout_id = r.id
      WHERE r.batch_id >= ? AND r.batch_id < ? AND a.node IS NOT NULL GROUP BY json_extract(a.node, '$.nodeId')`);
    this.setPlacement = db.prepare('UPDATE training_runs SET placement = ? WHERE id = ?');
  }

  create({ algorithm, config }: NewTrainingRun, now = Date.now()): TrainingRun {
    const id = `train-${crypto.randomBytes(6).toString('hex')}`;
    this.insertRun.run(id, algorithm, JSON.stringify(config), now);
    return this.get(id);
  }

  /** The run with this id, or undefined. */
  find(id: string): TrainingRun | undefined {
    try {
      return this.get(id);
    } catch (error) {
      if (error instanceof NotFoundError) return undefined;
      throw error;
    }
  }

  get(id: string): TrainingRun {
    const row = this.runById.get(id);
    if (!row) throw new NotFoundError(`training run ${id} does not exist (list runs with \`lightning train --list\`)`);
    return rowToRun(row);
  }

  /** Newest first; every run without a limit. */
  list(limit = -1): TrainingRun[] {
    return this.allRuns.all(limit).map(rowToRun);
  }

  /** Moves a run along NEXT (a final run stays final unless resumed to running). Must run inside a transaction. */
  transition(id: string, to: TrainingRunStatus, details: TransitionDetails = {}, now = Date.now()): TrainingRun {
    const run = this.get(id);
    if (!NEXT[run.status].includes(to))
      throw new InvalidTransitionError(`training run ${id} is ${run.status} and cannot become ${to}`);
    const result = details.result ?? null;
    if (result !== null) checkResult(run);
    this.updateRun.run({
      id,
      status: to,
      error: details.error ?? null,
      errorKind: details.errorKind ?? null,
      result: result === null ? null : JSON.stringify(result),
      now,
      running: to === 'running' ? 1 : 0,
      resumed: to === 'running' && isFinal(run.status) ? 1 : 0,
    });
    return this.get(id);
  }

  /**
   * Counts again which Ray nodes ran the attempts of the run's rollouts (after each batch). Must run inside a
   * transaction.
   */
  recordRayNodes(id: string): TrainingRun {
    const rayNodes = this.rayNodesOf
      .all(`${id}-`, `${id}-\uffff`)
      .map(({ node, attempts }) => ({ ...(JSON.parse(node) as RunPlacement['rayNodes'][number]), attempts }))
      .sort(
        (a, b) =>
          a.ip.localeCompare(b.ip, 'en', { numeric: true }) ||
          a.host.localeCompare(b.host) ||
          a.nodeId.localeCompare(b.nodeId),
      );
    return this.place(id, (placement) => ({ ...placement, rayNodes }));
  }

  /**
   * The ranks its trainer worker started with under torchrun (each start replaces the last's). Must run inside a
   * transaction.
   */
  recordRanks(id: string, ranks: RunPlacement['ranks']): TrainingRun {
    return this.place(id, (placement) => ({ ...placement, ranks: [...ranks].sort((a, b) => a.rank - b.rank) }));
  }

  private place(id: string, change: (placement: RunPlacement) => RunPlacement): TrainingRun {
    const run = this.get(id);
    this.setPlacement.run(JSON.stringify(change(run.placement ?? { rayNodes: [], ranks: [] })), id);
    return this.get(id);
  }

  /** Records a cancel request (the daemon's TrainingManager stops the run); a final run is left as it is. */
  requestCancel(id: string, now = Date.now()): TrainingRun {
    const run = this.get(id);
    if (isFinal(run.status)) return run;
    this.cancel.run(now, id);
    return this.get(id);
  }

  /** Metric points at `step`; non-finite values are left out. */
  addMetrics(runId: string, step: number, values: Readonly<Record<string, number>>, now = Date.now()): void {
    for (const [name, value] of Object.entries(values)) {
      if (Number.isFinite(value)) this.insertMetric.run(runId, step, name, value, now);
    }
  }

  /** An APO round's new candidates, scores and metrics (an APO run's only); must run inside a transaction. */
  recordRound(params: z.output<typeof ApoRound>, now = Date.now()): void {
    const run = this.get(params.runId);
    let resourceName: string;
    switch (run.algorithm) {
      case 'apo':
        resourceName = run.config.resource;
        break;
      case 'grpo':
      case 'sft':
        throw new InvalidInputError(
          `params.runId: training run ${run.id} is a ${run.algorithm} run; only APO runs record rounds`,
        );
      default:
        return assertNever(run);
    }
    if (run.status !== 'running')
      throw new InvalidTransitionError(`training run ${run.id} is ${run.status}; only a running run records rounds`);
    for (const candidate of params.candidates)
      this.insertCandidate.run({ ...candidate, runId: params.runId, round: params.round, resourceName, now });
    for (const score of params.scores) {
      const info = this.score.run({
        runId: params.runId,
        id: score.id,
        batchScore: score.batchScore ?? null,
        valScore: score.valScore ?? null,
        rollouts: score.rollouts,
      });
      if (info.changes === 0)
        throw new NotFoundError(`params.scores: run ${params.runId} has no candidate ${score.id}`);
    }
    this.addMetrics(params.runId, params.round, params.metrics, now);
  }

  /** APO's leaderboard, best first (empty for other algorithms). */
  candidates(runId: string): ApoCandidate[] {
    return this.candidatesOf.all(runId).map(rowToCandidate);
  }

  summary(run: TrainingRun): TrainingRunSummary {
    const latest: Record<string, number> = {};
    let step = 0;
    for (const point of this.latestMetrics.all(run.id)) {
      latest[point.name] = point.value;
      step = Math.max(step, point.step);
    }
    return { ...run, step, latest };
  }

  /** The run with its metric points after `afterStep`, and its checkpoints (GRPO, SFT) or candidates (APO). */
  detail(id: string, afterStep = -1): TrainingRunDetail {
    const summary = this.summary(this.get(id));
    const metrics = this.metricsAfter.all(id, afterStep);
    switch (summary.algorithm) {
      case 'grpo':
        return { algorithm: 'grpo', run: summary, metrics, checkpoints: this.checkpoints(id) };
      case 'sft':
        return { algorithm: 'sft', run: summary, metrics, checkpoints: this.checkpoints(id) };
      case 'apo':
        return { algorithm: 'apo', run: summary, metrics, candidates: this.candidates(id) };
      default:
        return assertNever(summary);
    }
  }

  addCheckpoint(
    runId: string,
    step: number,
    path: string,
    metrics: Readonly<Record<string, number>>,
    now = Date.now(),
  ): Checkpoint {
    const id = `ckpt-${crypto.randomBytes(6).toString('hex')}`;
    this.insertCheckpoint.run(id, runId, step, path, JSON.stringify(metrics), now);
    return { id, runId, step, path, metrics: { ...metrics }, createdAt: now };
  }

  checkpoints(runId?: string): Checkpoint[] {
    return (runId === undefined ? this.allCheckpoints.all() : this.checkpointsOf.all(runId)).map(rowToCheckpoint);
  }

  /** A new current version of the `policy` resource: rollouts created with it were served by this checkpoint. */
  addPolicyVersion(value: { runId: string; step: number; checkpoint: string | null }, now = Date.now()): number {
    const { version } = this.nextPolicyVersion.get()!;
    this.insertResource.run(version, JSON.stringify(value), now, value.runId);
    this.policyHead.run(version);
    return version;
  }

  checkpoint(id: string): Checkpoint {
    const row = this.checkpointById.get(id);
    if (!row) throw new NotFoundError(`checkpoint ${id} does not exist (list them with \`lightning checkpoints\`)`);
    return rowToCheckpoint(row);
  }

  /** Forgets a checkpoint (its folder is the caller's: training/checkpointFiles.ts). */
  deleteCheckpoint(id: string): Checkpoint {
    const checkpoint = this.checkpoint(id);
    this.removeCheckpoint.run(id);
    return checkpoint;
  }

  /**
   * The `policy` resource version naming a checkpoint served outside training (one per checkpoint,
   * made on first use). It is not made current: only rollouts pinned to it were served by it.
   */
  policyVersionFor(checkpoint: Checkpoint, now = Date.now()): number {
    const existing = this.policyOfCheckpoint.get(checkpoint.id);
    if (existing) return existing.version;
    const { version } = this.nextPolicyVersion.get()!;
    const value = {
      runId: checkpoint.runId,
      step: checkpoint.step,
      checkpoint: checkpoint.path,
      checkpointId: checkpoint.id,
    };
    this.insertResource.run(version, JSON.stringify(value), now, checkpoint.runId);
    // The first policy version of a store becomes current, as every resource's first version does.
    if (version === 1) this.policyHead.run(version);
    return version;
  }
}
