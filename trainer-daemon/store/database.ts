/**
 * Opening a store file: pragmas for a single-writer daemon (WAL, busy timeout, foreign keys) and the
 * migrations. The store is durable against a crash of the daemon process (kill -9): every
 * acknowledged write has been committed to the WAL. `synchronous=NORMAL` is SQLite's recommended
 * setting in WAL mode; after an operating-system crash or power loss the last transactions before
 * the most recent checkpoint may be lost, never corrupted.
 */
import { openConnection, type Connection, type DriverName } from './driver';
import { assertStorePath, preparePrivateStoreFile } from '../util/privateFiles';
import { migrate, type StoreUpgrade } from './migrations';

/** The page size of a store created from now on (SQLite's default is 4,096). */
const NEW_STORE_PAGE_BYTES = 16_384;
/** How much WAL collects before a checkpoint copies it into the main file (pages of either size). */
const WAL_CHECKPOINT_BYTES = 40_960_000;

export interface OpenOptions {
  /** Open without migrating (to inspect an older store); writes then fail on missing tables. */
  readonly migrate?: boolean;
  /** Told before a store an earlier Lightning wrote is upgraded (migrations.ts#migrate). */
  readonly onUpgrade?: (upgrade: StoreUpgrade) => void;
  readonly readonly?: boolean;
  /** Default: chooseDriver() (node:sqlite where the runtime has it, else better-sqlite3). */
  readonly driver?: DriverName;
  /**
   * How long a write waits for another connection's write lock once the store is open, blocking this
   * thread (default 5 s). The daemon waits briefly here and retries its group commits off the event
   * loop (writeQueue.ts).
   */
  readonly busyTimeoutMs?: number;
}

/** Opens `file` on either driver with the same pragmas and migrations: one schema, one durability promise. */
export function openDatabase(file: string, options: OpenOptions = {}): Connection {
  // Prompts, answers and rollout keys: the store, its WAL and its folder are the owner's alone.
  if (file !== ':memory:' && !options.readonly) preparePrivateStoreFile(file);
  else if (file !== ':memory:') assertStorePath(file);
  const connection = openConnection(file, { readonly: options.readonly ?? false, driver: options.driver });
  const { db } = connection;
  try {
    db.pragma('busy_timeout = 5000');
    if (!options.readonly) {
      // A new store's pages (an existing store keeps its own: WAL mode fixes the size). A commit writes each page it
      // changed whole, one WAL frame apiece; a batch of spans changes pages all over the span-id index, whose keys
      // are random, so the commit's cost goes by the pages it touches: 512 spans into a rollout of 60,000 touch ~365
      // pages of 4 KiB but ~120 of 16 KiB, and commit ~40% sooner; a one-span commit takes ~10 µs more (the bench's
      // page-size rows).
      db.pragma(`page_size = ${NEW_STORE_PAGE_BYTES}`);
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = NORMAL');
      // Checkpoint every ~40 MB of WAL instead of SQLite's 4 MB: each checkpoint syncs the main
      // file, and under span ingest the default made checkpoints a third of the write cost.
      const pageBytes = Number(db.pragma('page_size', { simple: true }));
      db.pragma(`wal_autocheckpoint = ${Math.ceil(WAL_CHECKPOINT_BYTES / pageBytes)}`);
    }
    // 64 MiB page cache: span indexes are written in rollout order, not key order.
    db.pragma('cache_size = -65536');
    db.pragma('foreign_keys = ON');
    if (options.migrate ?? true) {
      // An upgrade's temporary data on disk: its index builds sort a whole table, and its statements' undo copies can
      // be large (migrations.ts; in memory, upgrading a million spans took ~730 MB).
      db.pragma('temp_store = FILE');
      const applied = migrate(db, undefined, options.onUpgrade);
      // An upgrade that rewrote the store leaves a WAL as large, which only a checkpoint of it all gives back.
      if (applied.length > 0 && !options.readonly) db.pragma('wal_checkpoint(TRUNCATE)');
    }
    // Statement journals in memory: each operation of a group commit of several runs in a savepoint (commits.ts),
    // which copies every page it first changes to a journal — a temporary file by default, which made span
    // ingest ~1.5× slower (its system time doubled). The journal holds one operation's pages at most.
    db.pragma('temp_store = MEMORY');
    // After the migrations, which may wait the full 5 s for a lock at start-up.
    if (options.busyTimeoutMs !== undefined)
      db.pragma(`busy_timeout = ${Math.max(0, Math.floor(options.busyTimeoutMs))}`);
    return connection;
  } catch (error) {
    db.close();
    throw error;
  }
}
