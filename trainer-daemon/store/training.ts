/**
 * Training runs, their metric time series and checkpoints (tables from migration v1), and the
 * `policy` resource whose versions say which checkpoint served which rollouts.
 */
import crypto from 'node:crypto';
import type { Database, Statement } from 'better-sqlite3';
import type { Checkpoint, Json, MetricSeriesPoint, TrainingRun, TrainingRunDetail, TrainingRunSummary } from '../protocol';
import { InvalidTransitionError, NotFoundError } from '../errors';

interface RunRow {
  id: string;
  algorithm: string;
  config: string;
  status: TrainingRun['status'];
  created_at: number;
  started_at: number | null;
  ended_at: number | null;
  error: string | null;
}

interface CheckpointRow {
  id: string;
  run_id: string;
  step: number;
  path: string;
  metrics: string;
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
  };
}

function rowToCheckpoint(row: CheckpointRow): Checkpoint {
  return { id: row.id, runId: row.run_id, step: row.step, path: row.path, metrics: JSON.parse(row.metrics) as Record<string, number>, createdAt: row.created_at };
}

/** Which statuses a run may move to from each status (resume: cancelled/failed → running). */
const NEXT: Record<TrainingRun['status'], ReadonlyArray<TrainingRun['status']>> = {
  queued: ['running', 'failed', 'cancelled'],
  running: ['succeeded', 'failed', 'cancelled'],
  succeeded: [],
  failed: ['running'],
  cancelled: ['running'],
};

export class TrainingRepository {
  private readonly insertRun: Statement;
  private readonly runById: Statement<[string], RunRow>;
  private readonly allRuns: Statement<[], RunRow>;
  private readonly updateRun: Statement;
  private readonly insertMetric: Statement;
  private readonly metricsAfter: Statement<[string, number], { step: number; name: string; value: number; time_ms: number }>;
  private readonly latestMetrics: Statement<[string], { step: number; name: string; value: number }>;
  private readonly insertCheckpoint: Statement;
  private readonly checkpointsOf: Statement<[string], CheckpointRow>;
  private readonly allCheckpoints: Statement<[], CheckpointRow>;
  private readonly nextPolicyVersion: Statement<[], { version: number }>;
  private readonly insertResource: Statement;

  constructor(db: Database) {
    this.insertRun = db.prepare(`INSERT INTO training_runs (id, algorithm, config, status, created_at) VALUES (?, ?, ?, 'queued', ?)`);
    this.runById = db.prepare('SELECT * FROM training_runs WHERE id = ?');
    this.allRuns = db.prepare('SELECT * FROM training_runs ORDER BY created_at DESC, id');
    this.updateRun = db.prepare(`UPDATE training_runs SET status = @status, error = @error,
      started_at = coalesce(@startedAt, started_at), ended_at = @endedAt WHERE id = @id`);
    this.insertMetric = db.prepare('INSERT INTO metric_points (run_id, step, name, value, time_ms) VALUES (?, ?, ?, ?, ?)');
    this.metricsAfter = db.prepare('SELECT step, name, value, time_ms FROM metric_points WHERE run_id = ? AND step > ? ORDER BY name, step, rowid');
    // The latest point of each metric (a resumed run may repeat a step: the newest row wins).
    this.latestMetrics = db.prepare(`SELECT m.step, m.name, m.value FROM metric_points m
      WHERE m.run_id = ? AND m.rowid = (SELECT max(rowid) FROM metric_points WHERE run_id = m.run_id AND name = m.name)`);
    this.insertCheckpoint = db.prepare('INSERT INTO checkpoints (id, run_id, step, path, metrics, created_at) VALUES (?, ?, ?, ?, ?, ?)');
    this.checkpointsOf = db.prepare('SELECT * FROM checkpoints WHERE run_id = ? ORDER BY step, created_at');
    this.allCheckpoints = db.prepare('SELECT * FROM checkpoints ORDER BY created_at DESC');
    this.nextPolicyVersion = db.prepare(`SELECT coalesce(max(version), 0) + 1 AS version FROM resources WHERE name = 'policy'`);
    this.insertResource = db.prepare(`INSERT INTO resources (name, version, kind, value, created_at) VALUES ('policy', ?, 'checkpoint', ?, ?)`);
  }

  create(algorithm: string, config: Json, now = Date.now()): TrainingRun {
    const id = `train-${crypto.randomBytes(6).toString('hex')}`;
    this.insertRun.run(id, algorithm, JSON.stringify(config), now);
    return this.get(id);
  }

  get(id: string): TrainingRun {
    const row = this.runById.get(id);
    if (!row) throw new NotFoundError(`training run ${id} does not exist (list runs with \`lightning train --list\`)`);
    return rowToRun(row);
  }

  list(): TrainingRun[] {
    return this.allRuns.all().map(rowToRun);
  }

  transition(id: string, to: TrainingRun['status'], error: string | null = null, now = Date.now()): TrainingRun {
    const run = this.get(id);
    if (!NEXT[run.status].includes(to)) throw new InvalidTransitionError(`training run ${id} is ${run.status}; it cannot become ${to}`);
    const final = to !== 'running' && to !== 'queued';
    this.updateRun.run({ id, status: to, error, startedAt: to === 'running' ? now : null, endedAt: final ? now : null });
    return this.get(id);
  }

  addMetrics(runId: string, step: number, values: Readonly<Record<string, number>>, now = Date.now()): void {
    for (const [name, value] of Object.entries(values)) {
      if (Number.isFinite(value)) this.insertMetric.run(runId, step, name, value, now);
    }
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

  detail(id: string, afterStep: number): TrainingRunDetail {
    const run = this.get(id);
    const metrics: Record<string, MetricSeriesPoint[]> = {};
    for (const row of this.metricsAfter.all(id, afterStep)) (metrics[row.name] ??= []).push({ step: row.step, value: row.value, timeMs: row.time_ms });
    return { run: this.summary(run), metrics, checkpoints: this.checkpoints(id) };
  }

  addCheckpoint(runId: string, step: number, path: string, metrics: Readonly<Record<string, number>>, now = Date.now()): Checkpoint {
    const id = `ckpt-${crypto.randomBytes(6).toString('hex')}`;
    this.insertCheckpoint.run(id, runId, step, path, JSON.stringify(metrics), now);
    return { id, runId, step, path, metrics: { ...metrics }, createdAt: now };
  }

  checkpoints(runId?: string): Checkpoint[] {
    return (runId === undefined ? this.allCheckpoints.all() : this.checkpointsOf.all(runId)).map(rowToCheckpoint);
  }

  /** A new version of the `policy` resource: rollouts created with it were served by this checkpoint. */
  addPolicyVersion(value: { runId: string; step: number; checkpoint: string | null }, now = Date.now()): number {
    const { version } = this.nextPolicyVersion.get()!;
    this.insertResource.run(version, JSON.stringify(value), now);
    return version;
  }
}
