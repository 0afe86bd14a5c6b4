/**
 * Training runs: their configuration and status, metric time series, a cancel request that the
 * process running the algorithm acts on, and (for APO) the leaderboard of candidate prompts.
 */
import crypto from 'node:crypto';
import type { Database, Statement } from 'better-sqlite3';
import type { z } from 'zod';
import {
  type ApoCandidate,
  type CreateTrainingRunParams,
  type CritiqueStyle,
  type Json,
  type RecordApoRoundParams,
  type TrainingRun,
  type TrainingRunDetail,
  type TrainingRunStatus,
  type UpdateTrainingRunParams,
} from '../protocol';
import { InvalidTransitionError, NotFoundError } from '../errors';

interface RunRow {
  id: string;
  algorithm: string;
  config: string;
  status: TrainingRunStatus;
  created_at: number;
  started_at: number | null;
  ended_at: number | null;
  error: string | null;
  cancel_requested_at: number | null;
  result: string | null;
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

function rowToRun(row: RunRow): TrainingRun {
  return {
    id: row.id,
    algorithm: row.algorithm,
    config: JSON.parse(row.config) as Json,
    status: row.status,
    createdAt: row.created_at,
    startedAt: row.started_at,
    endedAt: row.ended_at,
    error: row.error,
    cancelRequested: row.cancel_requested_at !== null,
    result: row.result === null ? null : (JSON.parse(row.result) as Json),
  };
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

const FINAL: readonly TrainingRunStatus[] = ['succeeded', 'failed', 'cancelled'];

export class TrainingRunRepository {
  private readonly insert: Statement;
  private readonly byId: Statement<[string], RunRow>;
  private readonly all: Statement<[number], RunRow>;
  private readonly update: Statement;
  private readonly cancel: Statement<[number, string]>;
  private readonly insertCandidate: Statement;
  private readonly score: Statement;
  private readonly insertMetric: Statement<[string, number, string, number, number]>;
  private readonly metricsOf: Statement<[string], { step: number; name: string; value: number; timeMs: number }>;
  private readonly candidatesOf: Statement<[string], CandidateRow>;

  constructor(db: Database) {
    this.insert = db.prepare("INSERT INTO training_runs (id, algorithm, config, status, created_at) VALUES (?, ?, ?, 'queued', ?)");
    this.byId = db.prepare('SELECT * FROM training_runs WHERE id = ?');
    this.all = db.prepare('SELECT * FROM training_runs ORDER BY created_at DESC LIMIT ?');
    this.update = db.prepare(`UPDATE training_runs SET status = @status, error = @error, result = @result,
      started_at = coalesce(started_at, @now), ended_at = CASE WHEN @final THEN @now ELSE NULL END WHERE id = @id`);
    this.cancel = db.prepare('UPDATE training_runs SET cancel_requested_at = coalesce(cancel_requested_at, ?) WHERE id = ?');
    this.insertCandidate = db.prepare(`INSERT INTO apo_candidates (run_id, id, round, parent_id, resource_name, version, critique, critique_style, created_at)
      VALUES (@runId, @id, @round, @parentId, @resourceName, @version, @critique, @critiqueStyle, @now)`);
    this.score = db.prepare(`UPDATE apo_candidates SET batch_score = coalesce(@batchScore, batch_score), val_score = coalesce(@valScore, val_score),
      rollouts = rollouts + @rollouts WHERE run_id = @runId AND id = @id`);
    this.insertMetric = db.prepare('INSERT INTO metric_points (run_id, step, name, value, time_ms) VALUES (?, ?, ?, ?, ?)');
    this.metricsOf = db.prepare('SELECT step, name, value, time_ms AS timeMs FROM metric_points WHERE run_id = ? ORDER BY step, name');
    // Best first: scored on the full validation set before scored on a batch only (a small batch's
    // score says less), each by score; ties by creation order.
    this.candidatesOf = db.prepare(`SELECT c.*, r.value AS prompt FROM apo_candidates c
      JOIN resources r ON r.name = c.resource_name AND r.version = c.version
      WHERE c.run_id = ? ORDER BY c.val_score DESC NULLS LAST, c.batch_score DESC NULLS LAST, c.round, c.created_at, c.id`);
  }

  create(params: z.output<typeof CreateTrainingRunParams>, now = Date.now()): TrainingRun {
    const id = `run-${crypto.randomBytes(6).toString('hex')}`;
    this.insert.run(id, params.algorithm, JSON.stringify(params.config), now);
    return this.get(id);
  }

  get(id: string): TrainingRun {
    const row = this.byId.get(id);
    if (!row) throw new NotFoundError(`training run ${id} does not exist (see trainingRuns/list)`);
    return rowToRun(row);
  }

  list(limit: number): TrainingRun[] {
    return this.all.all(limit).map(rowToRun);
  }

  /** Moves a run to running or to a final status; a final run stays final. Must run inside a transaction. */
  setStatus(params: z.output<typeof UpdateTrainingRunParams>, now = Date.now()): TrainingRun {
    const current = this.get(params.id);
    if (FINAL.includes(current.status)) throw new InvalidTransitionError(`training run ${params.id} is ${current.status} and cannot become ${params.status}`);
    const final = FINAL.includes(params.status);
    this.update.run({ id: params.id, status: params.status, error: params.error, result: params.result === null ? null : JSON.stringify(params.result), now, final: final ? 1 : 0 });
    return this.get(params.id);
  }

  requestCancel(id: string, now = Date.now()): TrainingRun {
    const run = this.get(id);
    if (FINAL.includes(run.status)) return run;
    this.cancel.run(now, id);
    return this.get(id);
  }

  /** A round's new candidates, scores and metrics; must run inside a transaction. */
  recordRound(params: z.output<typeof RecordApoRoundParams>, resourceName: string, now = Date.now()): void {
    const run = this.get(params.runId);
    if (run.status !== 'running') throw new InvalidTransitionError(`training run ${run.id} is ${run.status}; only a running run records rounds`);
    for (const candidate of params.candidates) this.insertCandidate.run({ ...candidate, runId: params.runId, round: params.round, resourceName, now });
    for (const score of params.scores) {
      const info = this.score.run({ runId: params.runId, id: score.id, batchScore: score.batchScore ?? null, valScore: score.valScore ?? null, rollouts: score.rollouts });
      if (info.changes === 0) throw new NotFoundError(`params.scores: run ${params.runId} has no candidate ${score.id}`);
    }
    for (const [name, value] of Object.entries(params.metrics)) this.insertMetric.run(params.runId, params.round, name, value, now);
  }

  detail(id: string): TrainingRunDetail {
    return { run: this.get(id), metrics: this.metricsOf.all(id), candidates: this.candidatesOf.all(id).map(rowToCandidate) };
  }
}
