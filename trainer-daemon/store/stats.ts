/** The store's counts for `stats` (`lightning status`, the status bar): rollouts by status, spans, rewards, unrated. */
import { COUNTS_FOR_LAST_ATTEMPT } from './rewards';
import { RolloutStatus, type Stats } from '../protocol';
import { OUTCOME_STATUSES } from '../protocol/status';
import type { Database } from './driver';

export function readStats(db: Database, schemaVersion: number): Stats {
  const byStatus = Object.fromEntries(RolloutStatus.options.map((status) => [status, 0])) as Stats['byStatus'];
  const rows = db
    .prepare<[], { status: RolloutStatus; n: number }>('SELECT status, count(*) AS n FROM rollouts GROUP BY status')
    .all();
  let rollouts = 0;
  for (const row of rows) {
    byStatus[row.status] = row.n;
    rollouts += row.n;
  }
  const count = (sql: string): number => db.prepare<[], { n: number }>(sql).get()?.n ?? 0;
  return {
    rollouts,
    byStatus,
    spans: count('SELECT coalesce(sum(span_count), 0) AS n FROM rollouts'),
    rewards: count('SELECT count(*) AS n FROM rewards'),
    unrated: count(
      `SELECT count(*) AS n FROM rollouts r WHERE r.status IN (${OUTCOME_STATUSES.map((s) => `'${s}'`).join(',')})
       AND NOT EXISTS (SELECT 1 FROM rewards w WHERE w.rollout_id = r.id AND ${COUNTS_FOR_LAST_ATTEMPT('w', 'r')})`,
    ),
    schemaVersion,
  };
}
