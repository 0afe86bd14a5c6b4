/**
 * Opening a store file: pragmas for a single-writer daemon (WAL, busy timeout, foreign keys) and the
 * migrations. The store is durable against a crash of the daemon process (kill -9): every
 * acknowledged write has been committed to the WAL. `synchronous=NORMAL` is SQLite's recommended
 * setting in WAL mode; after an operating-system crash or power loss the last transactions before
 * the most recent checkpoint may be lost, never corrupted.
 */
import BetterSqlite3, { type Database } from 'better-sqlite3';
import { preparePrivateStoreFile } from '../util/privateFiles';
import { migrate } from './migrations';
import { explainNativeLoadError } from './nativeModules';

export interface OpenOptions {
  /** Open without migrating (to inspect an older store); writes then fail on missing tables. */
  readonly migrate?: boolean;
  readonly readonly?: boolean;
}

export function openDatabase(file: string, options: OpenOptions = {}): Database {
  // Prompts, answers and rollout keys: the store, its WAL and its folder are the owner's alone.
  if (file !== ':memory:' && !options.readonly) preparePrivateStoreFile(file);
  let db: Database;
  try {
    db = new BetterSqlite3(file, { readonly: options.readonly ?? false, fileMustExist: options.readonly ?? false });
  } catch (error) {
    explainNativeLoadError(error);
  }
  try {
    db.pragma('busy_timeout = 5000');
    if (!options.readonly) {
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = NORMAL');
      // Checkpoint every ~40 MB of WAL instead of SQLite's 4 MB: each checkpoint syncs the main
      // file, and under span ingest the default made checkpoints a third of the write cost.
      db.pragma('wal_autocheckpoint = 10000');
    }
    // 64 MiB page cache: span indexes are written in rollout order, not key order.
    db.pragma('cache_size = -65536');
    db.pragma('foreign_keys = ON');
    if (options.migrate ?? true) migrate(db);
    return db;
  } catch (error) {
    db.close();
    throw error;
  }
}
