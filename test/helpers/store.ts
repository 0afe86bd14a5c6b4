import path from 'node:path';
import { Store } from '../../trainer-daemon/store/store';
import { tempDir } from './tmp';

/** A store in a fresh temporary folder, closed when the test ends. */
export function openStore(t: Parameters<typeof tempDir>[0]): Store {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  return store;
}
