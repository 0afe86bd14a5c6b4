import path from 'node:path';
import { Store } from '../../trainer-daemon/store/store';
import { tempDir } from './tmp';

/** A store in a fresh temporary folder, closed when the test ends. */
export function openStore(t: Parameters<typeof tempDir>[0]): Store {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  return store;
}

/** A rollout's integer key, `rollouts.seq`, which its spans name it by (migration 12): for rows written directly. */
export function rolloutKey(store: Store, rolloutId: string): number {
  const row = store.db.prepare<[string], { seq: number }>('SELECT seq FROM rollouts WHERE id = ?').get(rolloutId);
  if (!row) throw new Error(`rollout ${rolloutId} does not exist`);
  return row.seq;
}
