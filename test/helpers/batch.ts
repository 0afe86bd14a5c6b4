/** What batch-runner tests check: the rollouts a run left in the store, and how many agents overlapped. */
import path from 'node:path';
import type { Attempt, Rollout } from '../../trainer-daemon/protocol';
import { Store } from '../../trainer-daemon/store/store';

/** Every rollout in the store under `cwd/.lightning`, oldest first. */
export function batchOf(cwd: string): Rollout[] {
  const store = Store.open(path.join(cwd, '.lightning', 'store.db'));
  try {
    return store.listRollouts({ order: 'oldest', limit: 500 }).items;
  } finally {
    store.close();
  }
}

/** Each rollout's attempts in the store under `cwd/.lightning`, by rollout id. */
export function attemptsOf(cwd: string): Map<string, Attempt[]> {
  const store = Store.open(path.join(cwd, '.lightning', 'store.db'));
  try {
    return new Map(
      store
        .listRollouts({ order: 'oldest', limit: 500 })
        .items.map((r) => [r.id, store.getRolloutDetail(r.id).attempts]),
    );
  } finally {
    store.close();
  }
}

/** The most rollouts in flight at once, from their own `start` / `end` records (an end at the same instant first). */
export function peakOverlap(events: ReadonlyArray<{ at: number; what: string }>): number {
  let current = 0;
  let peak = 0;
  for (const event of events
    .filter((e) => e.what === 'start' || e.what === 'end')
    .sort((a, b) => a.at - b.at || (a.what === 'end' ? -1 : 1))) {
    current += event.what === 'start' ? 1 : -1;
    peak = Math.max(peak, current);
  }
  return peak;
}
