/**
 * Rewards are append-only (a trigger refuses updates): an annotation is never overwritten, a
 * correction is a new row, and the history of who said what stays in the store.
 */
import type { Database, Statement } from './driver';
import type { z } from 'zod';
import { isAutomatic, type AddRewardParams, type Reward, type Rollout } from '../protocol';
import { hasEnded } from '../protocol/status';
import { ConflictError, InvalidInputError } from '../protocol/errors';
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

/**
 * SQL over a reward `w` of rollout `r`: whether it counts for the rollout's trajectory, the calls of its last attempt
 * that training reads. An agent's reward posted during an earlier attempt does not (that attempt failed; its calls do
 * not train); a person's or a scorer's reward is the rollout's.
 */
export const COUNTS_FOR_LAST_ATTEMPT = (w: string, r: string): string =>
  `(${w}.source <> 'agent' OR ${w}.attempt IS NULL OR ${w}.attempt = ${r}.attempt_count)`;

/**
 * The attempt an agent's reward is posted in, checked in the write itself: its rollout must still run that attempt (a
 * reward racing the attempt's end cannot slip in after it, nor count for the retry).
 */
export function postedIn(rollout: Rollout, attempt: number): number {
  if (hasEnded(rollout.status))
    throw new ConflictError(
      `rollout ${rollout.id} has ended (${rollout.status}): an agent's reward counts only while its rollout runs; a person can still annotate it (lightning reward)`,
    );
  if (rollout.status !== 'running' || rollout.attemptCount !== attempt)
    throw new ConflictError(
      `rollout ${rollout.id}'s attempt ${attempt} has ended (${rollout.status === 'running' ? `attempt ${rollout.attemptCount} runs` : 'its retry is queued'}): an agent's reward counts only for the attempt that posts it`,
    );
  return attempt;
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
      db.prepare(`INSERT INTO rewards (rollout_id, span_id, name, value, source, author, comment, reason, created_at,
        attempt) VALUES (@rolloutId, @spanId, @name, @value, @source, @author, @comment, @reason, @now, @attempt)`);
    this.insertEpisode =
      db.prepare(`INSERT INTO rewards (rollout_id, span_id, name, value, source, author, comment, reason, created_at)
      VALUES (?, NULL, ?, ?, ?, ?, ?, ?, ?)`);
    this.byId = db.prepare('SELECT * FROM rewards WHERE id = ?');
    this.ofRollout = db.prepare('SELECT * FROM rewards WHERE rollout_id = ? ORDER BY id');
    this.ofMany = db.prepare(`SELECT w.* FROM json_each(?) j CROSS JOIN rewards w ON w.rollout_id = j.value
      JOIN rollouts r ON r.id = w.rollout_id WHERE ${COUNTS_FOR_LAST_ATTEMPT('w', 'r')} ORDER BY w.id`);
    this.spanExists = db.prepare(
      'SELECT 1 AS one FROM rollouts r CROSS JOIN spans s ON s.rollout = r.seq WHERE r.id = ? AND s.span_id = ?',
    );
  }

  /**
   * Appends a reward (its text scrubbed of secrets); the caller has checked that the rollout exists. `attempt`: the
   * attempt an agent's reward was posted in. Must run inside a transaction.
   */
  add(given: z.output<typeof AddRewardParams>, now = Date.now(), attempt: number | null = null): Reward {
    const params = scrubbed(given);
    if (params.spanId !== null && !this.spanExists.get(params.rolloutId, params.spanId)) {
      throw new InvalidInputError(
        `params.spanId: rollout ${params.rolloutId} has no span ${params.spanId}; annotate one of its LLM calls or omit spanId`,
      );
    }
    const info = this.insert.run({ ...params, now, attempt });
    return rowToReward(this.byId.get(info.lastInsertRowid)!);
  }

  /**
   * Appends many episode rewards (no span) without reading them back: automatic scoring's bulk
   * path. The caller has checked the rollouts exist. Must run inside a transaction. With `skipScoredOf` (the rollouts
   * a `skipScored` job scored), the rows of rollouts that hold an automatic reward already are left out, so that of two
   * jobs scoring one rollout at once the second writes nothing: returns the automatic rows those rollouts hold.
   */
  addMany(
    rows: ReadonlyArray<z.output<typeof AddRewardParams>>,
    now = Date.now(),
    skipScoredOf?: readonly string[],
  ): Map<string, Reward[]> {
    const scored = new Map<string, Reward[]>();
    if (skipScoredOf) {
      for (const [rolloutId, rewards] of this.listMany([
        ...new Set([...skipScoredOf, ...rows.map((r) => r.rolloutId)]),
      ]))
        if (rewards.some(isAutomatic)) scored.set(rolloutId, rewards.filter(isAutomatic));
    }
    for (const given of rows) {
      if (scored.has(given.rolloutId)) continue;
      if (given.spanId !== null) throw new InvalidInputError('bulk rewards are episode rewards: spanId must be null');
      const row = scrubbed(given);
      this.insertEpisode.run(row.rolloutId, row.name, row.value, row.source, row.author, row.comment, row.reason, now);
    }
    return scored;
  }

  list(rolloutId: string): Reward[] {
    return this.ofRollout.all(rolloutId).map(rowToReward);
  }

  /**
   * The rewards of many rollouts' trajectories in one query, by rollout, oldest first: an agent's reward of an earlier
   * attempt left out (COUNTS_FOR_LAST_ATTEMPT).
   */
  listMany(rolloutIds: readonly string[]): Map<string, Reward[]> {
    const byRollout = new Map<string, Reward[]>(rolloutIds.map((id) => [id, []]));
    for (const row of this.ofMany.all(JSON.stringify(rolloutIds)))
      byRollout.get(row.rollout_id)!.push(rowToReward(row));
    return byRollout;
  }
}
