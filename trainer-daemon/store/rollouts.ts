/**
 * Rollouts and their attempts: creation, the status lifecycle, lookup and the panel's list query.
 */
import crypto from 'node:crypto';
import type { Database, Statement } from './driver';
import { z } from 'zod';
import {
  Attempt,
  CreateRolloutParams,
  ListRolloutsParams,
  Rollout,
  RolloutGroupsParams,
  RolloutPage,
  RolloutSource,
  RolloutStatus,
  TransitionRolloutParams,
  type Json,
  type RayNode,
} from '../protocol';
import { InvalidInputError, InvalidTransitionError, NotFoundError } from '../protocol/errors';
import { scrubArgv, scrubMessage, secretsOf } from '../protocol/secrets';
import { COUNTS_FOR_LAST_ATTEMPT } from './rewards';

/** Which statuses each status may move to. failed/timeout → queued is a retry (attempts permitting). */
export const TRANSITIONS: Readonly<Record<RolloutStatus, readonly RolloutStatus[]>> = {
  queued: ['running', 'cancelled'],
  running: ['succeeded', 'failed', 'cancelled', 'timeout'],
  failed: ['queued'],
  timeout: ['queued'],
  succeeded: [],
  cancelled: [],
};

export interface RolloutRow {
  seq: number;
  id: string;
  status: RolloutStatus;
  mode: Rollout['mode'];
  label: string | null;
  task_id: string | null;
  task_input: string | null;
  dataset_id: string | null;
  batch_id: string | null;
  source: string;
  resources_version: number | null;
  max_attempts: number;
  attempt_count: number;
  created_at: number;
  updated_at: number;
  started_at: number | null;
  ended_at: number | null;
  error: string | null;
  exit_code: number | null;
  span_count: number;
  llm_calls: number;
  prompt_tokens: number;
  completion_tokens: number;
  reward: number | null;
}

/**
 * The display reward, under the episode-reward policy training uses (lightningrl/credit.ts;
 * test/unit/episodeReward.test.ts holds them equal): the latest human annotation, else the latest the agent posted
 * (in the last attempt), else the latest automatic one.
 */
const REWARD_COLUMN = `(SELECT w.value FROM rewards w
  WHERE w.rollout_id = r.id AND w.name = 'reward' AND w.span_id IS NULL AND ${COUNTS_FOR_LAST_ATTEMPT('w', 'r')}
  ORDER BY CASE w.source WHEN 'human' THEN 2 WHEN 'agent' THEN 1 ELSE 0 END DESC, w.id DESC LIMIT 1) AS reward`;
const SELECT_ROLLOUT = `SELECT r.*, ${REWARD_COLUMN} FROM rollouts r`;

/** A batch's counts as the groups query reads them (protocol/rpc.ts#RolloutBatchGroup without the names). */
export interface BatchCount {
  batchId: string;
  count: number;
  failed: number;
  active: number;
  mode: Rollout['mode'];
  label: string | null;
  datasetId: string | null;
  createdAt: number;
  updatedAt: number;
  /** Its newest rollout's place in the store (the order of groups). */
  newest: number;
}

export function newRolloutId(): string {
  return `ro-${crypto.randomBytes(8).toString('hex')}`;
}

export function rowToRollout(row: RolloutRow): Rollout {
  const hasTask = row.task_id !== null || row.task_input !== null;
  return {
    id: row.id,
    status: row.status,
    mode: row.mode,
    label: row.label,
    task: hasTask
      ? {
          ...(row.task_id !== null ? { id: row.task_id } : {}),
          input: row.task_input === null ? null : (JSON.parse(row.task_input) as Json),
        }
      : null,
    datasetId: row.dataset_id,
    batchId: row.batch_id,
    // Written by this module from a validated RolloutSource: trusted inside the process.
    source: JSON.parse(row.source) as RolloutSource,
    resourcesVersion: row.resources_version,
    maxAttempts: row.max_attempts,
    attemptCount: row.attempt_count,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    startedAt: row.started_at,
    endedAt: row.ended_at,
    error: row.error,
    exitCode: row.exit_code,
    spanCount: row.span_count,
    llmCalls: row.llm_calls,
    promptTokens: row.prompt_tokens,
    completionTokens: row.completion_tokens,
    reward: row.reward,
  };
}

/** A page boundary: the seq of the last rollout shown (the list is in creation order, seq). */
const Cursor = z.object({ s: z.number().int() });

function encodeCursor(row: Pick<RolloutRow, 'seq'>): string {
  return Buffer.from(JSON.stringify({ s: row.seq })).toString('base64url');
}

function decodeCursor(cursor: string): number {
  try {
    return Cursor.parse(JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))).s;
  } catch {
    throw new InvalidInputError('params.cursor: not a cursor returned by rollouts/list; start again without one');
  }
}

/** Escapes LIKE wildcards so user text matches literally. */
function likePattern(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

export class RolloutRepository {
  private readonly insert: Statement;
  private readonly byId: Statement<[string], RolloutRow>;
  private readonly attemptsOf: Statement<[string]>;
  private readonly statements = new Map<string, Statement>();

  constructor(private readonly db: Database) {
    this.insert = db.prepare(`INSERT INTO rollouts
      (id, status, mode, label, task_id, task_input, dataset_id, batch_id, source, resources_version,
       max_attempts, created_at, updated_at)
      VALUES (@id, 'queued', @mode, @label, @task_id, @task_input, @dataset_id, @batch_id, @source,
       @resources_version, @max_attempts, @now, @now)`);
    this.byId = db.prepare(`${SELECT_ROLLOUT} WHERE r.id = ?`);
    this.attemptsOf = db.prepare('SELECT * FROM attempts WHERE rollout_id = ? ORDER BY number');
  }

  create(params: z.output<typeof CreateRolloutParams>, now = Date.now()): Rollout {
    const id = newRolloutId();
    this.insert.run({
      id,
      mode: params.mode,
      label: params.label,
      task_id: params.task?.id ?? null,
      task_input: params.task ? JSON.stringify(params.task.input) : null,
      dataset_id: params.datasetId,
      batch_id: params.batchId,
      source: JSON.stringify(
        params.source.kind === 'command' ? { ...params.source, argv: scrubArgv(params.source.argv) } : params.source,
      ),
      resources_version: params.resourcesVersion,
      max_attempts: params.maxAttempts,
      now,
    });
    return this.get(id);
  }

  find(id: string): Rollout | undefined {
    const row = this.byId.get(id);
    return row ? rowToRollout(row) : undefined;
  }

  get(id: string): Rollout {
    const rollout = this.find(id);
    if (!rollout) throw new NotFoundError(`rollout ${id} does not exist (list rollouts with \`lightning rollouts\`)`);
    return rollout;
  }

  /** Resolves a full id or a unique prefix of one (at least 4 characters), as users type them. */
  resolveId(idOrPrefix: string): string {
    if (this.find(idOrPrefix)) return idOrPrefix;
    if (idOrPrefix.length < 4)
      throw new NotFoundError(
        `rollout ${idOrPrefix} does not exist (a short id takes at least 4 characters, e.g. ro-1a2b; list rollouts with \`lightning rollouts\`)`,
      );
    const matches = this.idsWithPrefix(idOrPrefix);
    if (matches.length === 0)
      throw new NotFoundError(`rollout ${idOrPrefix} does not exist (list rollouts with \`lightning rollouts\`)`);
    if (matches.length > 1)
      throw new InvalidInputError(`rollout id prefix ${idOrPrefix} is ambiguous; type more of the id`);
    return matches[0]!;
  }

  /** Ids starting with `prefix` (at most `limit`), so users can type a short unique prefix. */
  private idsWithPrefix(prefix: string, limit = 2): string[] {
    return (
      this.statement('SELECT id FROM rollouts WHERE id >= ? AND id < ? ORDER BY id LIMIT ?').all(
        prefix,
        `${prefix}\uffff`,
        limit,
      ) as Array<{ id: string }>
    ).map((row) => row.id);
  }

  attempts(id: string): Attempt[] {
    return (this.attemptsOf.all(id) as Array<Record<string, unknown>>).map((row) =>
      Attempt.parse({
        number: row.number,
        status: row.status,
        startedAt: row.started_at,
        endedAt: row.ended_at,
        error: row.error,
        exitCode: row.exit_code,
        ...(typeof row.node === 'string' ? { node: JSON.parse(row.node) as Json } : {}),
      }),
    );
  }

  /** Where an attempt ran (a Ray node), learnt after it ended; a node already recorded stays. */
  setAttemptNode(rolloutId: string, attempt: number, node: RayNode): void {
    this.statement('UPDATE attempts SET node = coalesce(node, ?) WHERE rollout_id = ? AND number = ?').run(
      JSON.stringify(node),
      rolloutId,
      attempt,
    );
  }

  /** Moves a rollout along its lifecycle; must run inside a transaction. */
  transition(params: z.output<typeof TransitionRolloutParams>, now = Date.now()): Rollout {
    const current = this.get(params.id);
    const allowed = TRANSITIONS[current.status];
    if (!allowed.includes(params.to)) {
      const options = allowed.length > 0 ? `it can go to: ${allowed.join(', ')}` : 'it is final';
      throw new InvalidTransitionError(
        `rollout ${current.id} is ${current.status} and cannot become ${params.to}; ${options}`,
      );
    }
    if (params.to === 'queued' && current.attemptCount >= current.maxAttempts) {
      throw new InvalidTransitionError(
        `rollout ${current.id} has used all ${current.maxAttempts} attempt(s); it cannot be retried`,
      );
    }
    if (params.to === 'running') {
      const number = current.attemptCount + 1;
      this.statement("INSERT INTO attempts (rollout_id, number, status, started_at) VALUES (?, ?, 'running', ?)").run(
        current.id,
        number,
        now,
      );
      this.statement(
        `UPDATE rollouts SET status = 'running', attempt_count = ?, started_at = coalesce(started_at, ?),
          ended_at = NULL, error = NULL, exit_code = NULL, updated_at = ? WHERE id = ?`,
      ).run(number, now, now, current.id);
    } else if (params.to === 'queued') {
      this.statement("UPDATE rollouts SET status = 'queued', ended_at = NULL, updated_at = ? WHERE id = ?").run(
        now,
        current.id,
      );
    } else {
      // An agent's (or worker's) error text may quote what it was given: its keys are redacted by value.
      const error = params.error === null ? null : scrubMessage(params.error, secretsOf(current.id));
      if (current.status === 'running') {
        this.statement(
          'UPDATE attempts SET status = ?, ended_at = ?, error = ?, exit_code = ?, node = coalesce(?, node) WHERE rollout_id = ? AND number = ?',
        ).run(
          params.to,
          now,
          error,
          params.exitCode,
          params.node ? JSON.stringify(params.node) : null,
          current.id,
          current.attemptCount,
        );
      }
      this.statement(
        'UPDATE rollouts SET status = ?, ended_at = ?, error = ?, exit_code = ?, updated_at = ? WHERE id = ?',
      ).run(params.to, now, error, params.exitCode, now, current.id);
    }
    return this.get(current.id);
  }

  /**
   * One page of the panel's list, in creation order (newest first by default). With a text search
   * of 3+ characters the trigram index drives the query in seq order, so a page costs about the
   * same whether 10 or 100,000 rollouts match; shorter searches fall back to a LIKE scan.
   */
  list(params: z.output<typeof ListRolloutsParams>): RolloutPage {
    const newest = params.order === 'newest';
    const direction = newest ? 'DESC' : 'ASC';
    const after = params.cursor === undefined ? undefined : decodeCursor(params.cursor);
    const { from, where, args } = this.filter(params, newest, after);
    // Driven by the search index, the rows already come in seq order; an ORDER BY would sort every hit.
    const order = from.startsWith('rollouts') ? `ORDER BY r.seq ${direction}` : '';
    const sql = `SELECT r.*, ${REWARD_COLUMN} FROM ${from} ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ${order} LIMIT ?`;
    args.push(params.limit + 1);
    const rows = this.statement(sql).all(...args) as RolloutRow[];
    rows.sort((a, b) => (newest ? b.seq - a.seq : a.seq - b.seq));
    const page = rows.slice(0, params.limit);
    const last = page[page.length - 1];
    return {
      items: page.map(rowToRollout),
      nextCursor: rows.length > params.limit && last ? encodeCursor(last) : null,
    };
  }

  /**
   * The rollouts a filter matches, counted: in all, outside any batch, and per batch (newest batch first: by its
   * newest rollout, `newest`), with each batch's failed and unfinished counts. Every batch: the caller groups them
   * into runs before it cuts the list, so a run's count never loses a batch. Names are the caller's.
   */
  groups(params: Omit<z.output<typeof RolloutGroupsParams>, 'limit'>): {
    total: number;
    ungrouped: number;
    batches: BatchCount[];
  } {
    const { from, where, args } = this.filter(params);
    const clause = (extra: string): string => `WHERE ${[...where, extra].join(' AND ')}`;
    const totals = this.statement(
      `SELECT count(*) AS total, coalesce(sum(r.batch_id IS NULL), 0) AS ungrouped FROM ${from} ${clause('1')}`,
    ).get(...args) as { total: number; ungrouped: number };
    const batches = this.statement(
      `SELECT r.batch_id AS batchId, count(*) AS count,
        sum(r.status IN ('failed', 'timeout')) AS failed, sum(r.status IN ('queued', 'running')) AS active,
        min(r.mode) AS mode, min(r.label) AS label, min(r.dataset_id) AS datasetId,
        min(r.created_at) AS createdAt, max(r.updated_at) AS updatedAt, max(r.seq) AS newest
      FROM ${from} ${clause('r.batch_id IS NOT NULL')} GROUP BY r.batch_id ORDER BY newest DESC`,
    ).all(...args) as BatchCount[];
    return { total: totals.total, ungrouped: totals.ungrouped, batches };
  }

  /** The FROM and WHERE of a list's filter (and, for a page after the first, its cursor). */
  private filter(
    params: Omit<z.output<typeof RolloutGroupsParams>, 'limit'> & { inBatch?: boolean },
    newest = true,
    after?: number,
  ): { from: string; where: string[]; args: unknown[] } {
    const where: string[] = [];
    const args: unknown[] = [];
    let from = 'rollouts r';
    if (params.search !== undefined && [...params.search].length >= 3) {
      const bound = after === undefined ? '' : `AND rowid ${newest ? '<' : '>'} ?`;
      from = `(SELECT rowid AS hit FROM rollouts_fts WHERE rollouts_fts MATCH ? ${bound} ORDER BY rowid ${newest ? 'DESC' : 'ASC'}) f
        CROSS JOIN rollouts r ON r.seq = f.hit`;
      args.push(`"${params.search.replaceAll('"', '""')}"`);
      if (after !== undefined) args.push(after);
    } else {
      if (params.search !== undefined) {
        where.push("(r.label LIKE ? ESCAPE '\\' OR r.task_id LIKE ? ESCAPE '\\' OR r.task_input LIKE ? ESCAPE '\\')");
        const pattern = likePattern(params.search);
        args.push(pattern, pattern, pattern);
      }
      if (after !== undefined) {
        where.push(`r.seq ${newest ? '<' : '>'} ?`);
        args.push(after);
      }
    }
    if (params.status) {
      where.push(`r.status IN (${params.status.map(() => '?').join(', ')})`);
      args.push(...params.status);
    }
    const equals: Array<[string, string | undefined]> = [
      ['r.mode', params.mode],
      ['r.label', params.label],
      ['r.task_id', params.taskId],
      ['r.dataset_id', params.datasetId],
      ['r.batch_id', params.batchId],
    ];
    for (const [column, value] of equals) {
      if (value === undefined) continue;
      where.push(`${column} = ?`);
      args.push(value);
    }
    if (params.inBatch !== undefined) where.push(params.inBatch ? 'r.batch_id IS NOT NULL' : 'r.batch_id IS NULL');
    // Rated: a reward of its trajectory (an agent's reward of an earlier attempt does not rate it).
    if (params.unrated)
      where.push(
        `NOT EXISTS (SELECT 1 FROM rewards w WHERE w.rollout_id = r.id AND ${COUNTS_FOR_LAST_ATTEMPT('w', 'r')})`,
      );
    return { from, where, args };
  }

  /** Prepared statements by SQL text: list queries come in a handful of shapes. */
  private statement(sql: string): Statement {
    let statement = this.statements.get(sql);
    if (!statement) {
      statement = this.db.prepare(sql);
      this.statements.set(sql, statement);
    }
    return statement;
  }
}
