/**
 * Rewards are append-only (a trigger refuses updates): an annotation is never overwritten, a
 * correction is a new row, and the history of who said what stays in the store.
 */
import type { Database, Statement } from './driver';
import type { z } from 'zod';
import type { AddRewardParams, Reward } from '../protocol';
import { InvalidInputError } from '../protocol/errors';
import { scrubText, secretsOf } from '../protocol/secrets';

/**
 * A reward's free text (comment, reason, author) with secret values redacted: the rollout's, the daemon's, key shapes.
 */
function scrubbed<
  T extends { rolloutId: string; author: string | null; comment: string | null; reason: string | null },
>(params: T): T {
  const secrets = secretsOf(params.rolloutId);
  const text = (value: string | null): string | null => (value === null ? null : scrubText(value, secrets));
  return { ...params, author: text(params.author), comment: text(params.comment), reason: text(params.reason) };
}

interface RewardRow {
  id: number;
  rollout_id: string;
  span_id: string | null;
  name: string;
  value: number;
  source: Reward['source'];
  author: string | null;
  comment: string | null;
  reason: string | null;
  created_at: number;
}

function rowToReward(row: RewardRow): Reward {
  return {
    id: row.id,
    rolloutId: row.rollout_id,
    spanId: row.span_id,
    name: row.name,
    value: row.value,
    source: row.source,
    author: row.author,
    comment: row.comment,
    reason: row.reason,
    createdAt: row.created_at,
  };
}

export class RewardRepository {
  private readonly insert: Statement;
  private readonly insertEpisode: Statement;
  private readonly byId: Statement<[number | bigint], RewardRow>;
  private readonly ofRollout: Statement<[string], RewardRow>;
  private readonly ofMany: Statement<[string], RewardRow>;
  private readonly spanExists: Statement<[string, string], { one: number }>;

  constructor(db: Database) {
    this.insert =
      db.prepare(`INSERT INTO rewards (rollout_id, span_id, name, value, source, author, comment, reason, created_at)
      VALUES (@rolloutId, @spanId, @name, @value, @source, @author, @comment, @reason, @now)`);
    this.insertEpisode =
      db.prepare(`INSERT INTO rewards (rollout_id, span_id, name, value, source, author, comment, reason, created_at)
      VALUES (?, NULL, ?, ?, ?, ?, ?, ?, ?)`);
    this.byId = db.prepare('SELECT * FROM rewards WHERE id = ?');
    this.ofRollout = db.prepare('SELECT * FROM rewards WHERE rollout_id = ? ORDER BY id');
    this.ofMany = db.prepare('SELECT * FROM rewards WHERE rollout_id IN (SELECT value FROM json_each(?)) ORDER BY id');
    this.spanExists = db.prepare('SELECT 1 AS one FROM spans WHERE rollout_id = ? AND span_id = ?');
  }

  /**
   * Appends a reward (its text scrubbed of secrets); the caller has checked that the rollout exists. Must run inside a
   * transaction.
   */
  add(given: z.output<typeof AddRewardParams>, now = Date.now()): Reward {
    const params = scrubbed(given);
    if (params.spanId !== null && !this.spanExists.get(params.rolloutId, params.spanId)) {
      throw new InvalidInputError(
        `params.spanId: rollout ${params.rolloutId} has no span ${params.spanId}; annotate one of its LLM calls or omit spanId`,
      );
    }
    const info = this.insert.run({ ...params, now });
    return rowToReward(this.byId.get(info.lastInsertRowid)!);
  }

  /**
   * Appends many episode rewards (no span) without reading them back: automatic scoring's bulk
   * path. The caller has checked the rollouts exist. Must run inside a transaction.
   */
  addMany(rows: ReadonlyArray<z.output<typeof AddRewardParams>>, now = Date.now()): void {
    for (const given of rows) {
      if (given.spanId !== null) throw new InvalidInputError('bulk rewards are episode rewards: spanId must be null');
      const row = scrubbed(given);
      this.insertEpisode.run(row.rolloutId, row.name, row.value, row.source, row.author, row.comment, row.reason, now);
    }
  }

  list(rolloutId: string): Reward[] {
    return this.ofRollout.all(rolloutId).map(rowToReward);
  }

  /** The rewards of many rollouts in one query, by rollout, oldest first. */
  listMany(rolloutIds: readonly string[]): Map<string, Reward[]> {
    const byRollout = new Map<string, Reward[]>(rolloutIds.map((id) => [id, []]));
    for (const row of this.ofMany.all(JSON.stringify(rolloutIds)))
      byRollout.get(row.rollout_id)!.push(rowToReward(row));
    return byRollout;
  }
}
