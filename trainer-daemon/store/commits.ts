/**
 * How the store's writes commit and are announced: each write in one IMMEDIATE transaction (or as a part of the
 * enclosing group commit), a read of several tables in one transaction, change events only after the commit that made
 * them, and closing the file. The store composes one; the repositories never see it. Apart from store.ts so the
 * store's methods read as what they do, and the commit rules as one thing.
 */
import type { Database, Transaction } from './driver';
import { StoreChanges, type StoredSpanRef } from './changes';

export type GroupedOutcome = { ok: true; value: unknown } | { ok: false; error: unknown };

export class StoreCommits {
  /** What changed, announced after the commit (the store's events come from here). */
  readonly changes = new StoreChanges();
  private closed = false;
  /** One transaction wrapper, made once: better-sqlite3's wrappers are costly to create per call. */
  private readonly transaction: Transaction<(fn: () => unknown) => unknown>;

  constructor(private readonly db: Database) {
    this.transaction = db.transaction((fn: () => unknown) => fn());
  }

  /** Runs `fn` in one transaction: several tables read as of one moment. */
  read<T>(fn: () => T): T {
    return this.transaction(fn) as T;
  }

  /**
   * Runs `fn` in an IMMEDIATE transaction (the write lock taken up front: no upgrade deadlocks).
   * Inside an enclosing transaction it runs as part of it: in a group commit every operation
   * already has its own savepoint (see runGrouped), and a caller's own transaction is the caller's.
   */
  write<T>(fn: () => T): T {
    if (this.db.inTransaction) return fn();
    return this.transaction.immediate(fn) as T;
  }

  /** Announces a training run's change now, or once the enclosing (group) transaction commits. */
  runChanged(id: string, round: number | null): void {
    this.changes.run(id, round, this.db.inTransaction);
  }

  /** Announces a committed change now, or, inside an enclosing transaction, once that commits. */
  rolloutsChanged(rolloutIds: readonly string[], spans: readonly StoredSpanRef[] = []): void {
    this.changes.rollouts(rolloutIds, spans, this.db.inTransaction);
  }

  /**
   * Runs `ops` in one transaction, each in its own savepoint, and announces their changes after the
   * single commit: the group commit behind WriteQueue. One op failing does not fail the others;
   * if the commit itself fails, every op fails and nothing is announced.
   */
  runGrouped(ops: ReadonlyArray<() => unknown>): GroupedOutcome[] {
    if (ops.length === 1 && !this.db.inTransaction) return [this.runAlone(ops[0]!)];
    let outcomes: GroupedOutcome[];
    try {
      outcomes = this.write(() =>
        ops.map((op) => {
          const mark = this.changes.mark();
          try {
            // A nested transaction is a savepoint: a failing op takes back all of its own changes…
            return { ok: true as const, value: this.transaction(op) };
          } catch (error) {
            // …and its announcements.
            this.changes.rollback(mark);
            return { ok: false as const, error };
          }
        }),
      );
    } catch (error) {
      this.changes.discard();
      throw error;
    }
    this.changes.flush();
    return outcomes;
  }

  /**
   * A group of one operation, without the savepoint: its transaction is its own and rolls back whole when it fails,
   * the savepoint's effect. Most group commits hold one operation (all the queued spans are one), and a savepoint
   * copies each page the operation first changes into the statement journal: ~1 ms of a 512-span batch's ~6 ms
   * commit. The operation's failure is its outcome, as in a group; the transaction's own failure (the write lock,
   * the commit) is thrown, as a group's is.
   */
  private runAlone(op: () => unknown): GroupedOutcome {
    let failed: { error: unknown } | undefined;
    let value: unknown;
    try {
      value = this.write(() => {
        try {
          return op();
        } catch (error) {
          failed = { error };
          throw error;
        }
      });
    } catch (error) {
      this.changes.discard();
      if (failed) return { ok: false, error: failed.error };
      throw error;
    }
    this.changes.flush();
    return { ok: true, value };
  }

  /** Checkpoints the WAL into the main file and closes. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.changes.dispose();
    if (this.db.open) {
      this.db.pragma('wal_checkpoint(TRUNCATE)');
      this.db.close();
    }
  }

  get isOpen(): boolean {
    return !this.closed && this.db.open;
  }
}
