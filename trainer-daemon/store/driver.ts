/**
 * The SQLite connection the store speaks, over one of two drivers:
 * * `node:sqlite` — built into Node ≥ 22.13 (unflagged) and so into VS Code's own runtime (Electron
 *   ≥ 35): nothing native to ship, nothing bound to one ABI. Used wherever it loads.
 * * `better-sqlite3` — a native module bound to the ABI it was built for: the daemon on Node 20 (a
 *   checkout, the CLI installed with npm), which has no `node:sqlite`.
 * The bench (`test/bench/store.ts`) measures both in one run: they insert and start alike, so the
 * choice follows availability, not speed. `LIGHTNING_SQLITE_DRIVER` forces one (tests, bench).
 *
 * The interface is the subset of better-sqlite3's API the store uses, so better-sqlite3 is used as
 * it is (no wrapper on the hot path) and `node:sqlite` gets a thin adapter with the same semantics:
 * plain-object rows, nested transactions as savepoints, `pragma(…, { simple })`.
 */
import { LightningError } from '../protocol/errors';
import { explainNativeLoadError } from './nativeModules';

export const DRIVERS = ['node:sqlite', 'better-sqlite3'] as const;
export type DriverName = (typeof DRIVERS)[number];

export interface RunResult {
  readonly changes: number;
  readonly lastInsertRowid: number | bigint;
}

export interface Statement<P extends unknown[] = unknown[], R = unknown> {
  run(...params: P): RunResult;
  get(...params: P): R | undefined;
  all(...params: P): R[];
  iterate(...params: P): IterableIterator<R>;
}

/** A function run in a transaction: called plainly it runs in BEGIN (DEFERRED); nested, in a savepoint. */
export interface Transaction<F extends (...args: never[]) => unknown> {
  (...args: Parameters<F>): ReturnType<F>;
  deferred(...args: Parameters<F>): ReturnType<F>;
  immediate(...args: Parameters<F>): ReturnType<F>;
  exclusive(...args: Parameters<F>): ReturnType<F>;
}

export interface Database {
  prepare<P extends unknown[] = unknown[], R = unknown>(sql: string): Statement<P, R>;
  exec(sql: string): unknown;
  /** `PRAGMA source`: every row, or with `simple` the first column of the first row. */
  pragma(source: string, options?: { simple?: boolean }): unknown;
  transaction<F extends (...args: never[]) => unknown>(fn: F): Transaction<F>;
  /** Lifts SQLite's defensive mode (writes to sqlite_schema) while on. */
  unsafeMode(on: boolean): unknown;
  readonly inTransaction: boolean;
  readonly open: boolean;
  close(): unknown;
}

export interface Connection {
  readonly db: Database;
  readonly driver: DriverName;
}

export class SqliteDriverError extends LightningError {}

/**
 * The driver this runtime uses: LIGHTNING_SQLITE_DRIVER if set, else node:sqlite where it loads with FTS5, else
 * better-sqlite3. `sqlite`: this runtime's node:sqlite (tests give others).
 */
export function chooseDriver(
  env: NodeJS.ProcessEnv = process.env,
  sqlite: NodeSqlite | null = nodeSqlite(),
): DriverName {
  const forced = env.LIGHTNING_SQLITE_DRIVER;
  if (forced) {
    if (!(DRIVERS as readonly string[]).includes(forced))
      throw new SqliteDriverError(
        `LIGHTNING_SQLITE_DRIVER is "${forced}"; use one of ${DRIVERS.join(', ')}, or unset it.`,
      );
    return forced as DriverName;
  }
  return sqlite && hasFts5(sqlite) ? 'node:sqlite' : 'better-sqlite3';
}

const FTS5_PROBED = new WeakMap<NodeSqlite, boolean>();

/**
 * Whether `sqlite`'s SQLite was built with FTS5, which the store's rollout search needs (migration 2): some Node builds
 * with node:sqlite leave it out (22.14 and 23.11 among them), and a store then failed to open with "no such module:
 * fts5". Probed once, in memory.
 */
function hasFts5(sqlite: NodeSqlite): boolean {
  let probed = FTS5_PROBED.get(sqlite);
  if (probed === undefined) {
    const db = new sqlite.DatabaseSync(':memory:', { readOnly: false });
    try {
      db.exec('CREATE VIRTUAL TABLE probe USING fts5(text)');
      probed = true;
    } catch {
      probed = false;
    } finally {
      db.close();
    }
    FTS5_PROBED.set(sqlite, probed);
  }
  return probed;
}

/** Why this runtime's node:sqlite cannot hold a store, where it has one without FTS5. */
function withoutFts5(): string {
  return `this runtime's node:sqlite (${process.execPath}, Node ${process.version}) was built without FTS5, which the store's rollout search needs (some Node 22 and 23 builds leave it out)`;
}

export function openConnection(file: string, options: { readonly readonly: boolean; driver?: DriverName }): Connection {
  const driver = options.driver ?? chooseDriver();
  const db =
    driver === 'node:sqlite' ? openNodeSqlite(file, options.readonly) : openBetterSqlite3(file, options.readonly);
  return { db, driver };
}

/** The part of `node:sqlite` used here (@types/node 20 has no types for it). */
type SqlValue = null | number | bigint | string | Uint8Array | Record<string, unknown>;
interface StatementSync {
  run(...params: SqlValue[]): RunResult;
  get(...params: SqlValue[]): Row | undefined;
  all(...params: SqlValue[]): Row[];
  iterate(...params: SqlValue[]): IterableIterator<Row>;
}
interface DatabaseSync {
  prepare(sql: string): StatementSync;
  exec(sql: string): void;
  close(): void;
  /** Node ≥ 22.16. */
  readonly isTransaction?: boolean;
  /** Node ≥ 24. */
  enableDefensive?(on: boolean): void;
}
export interface NodeSqlite {
  DatabaseSync: new (file: string, options: { readOnly: boolean }) => DatabaseSync;
}
type Row = Record<string, unknown>;

let nodeSqliteModule: NodeSqlite | null | undefined;

/** `node:sqlite`, or null where this runtime has none (Node < 22.13 without --experimental-sqlite). */
function nodeSqlite(): NodeSqlite | null {
  if (nodeSqliteModule !== undefined) return nodeSqliteModule;
  // Node 22 flags the module experimental with a warning on stderr, which carries the daemon's JSON log lines.
  const emitWarning = process.emitWarning.bind(process);
  process.emitWarning = (warning: string | Error, ...rest: never[]) => {
    if (!/SQLite/i.test(String(warning))) emitWarning(warning, ...rest);
  };
  try {
    // Loaded on first use only: Node 20 has no node:sqlite, and loading it warns.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    nodeSqliteModule = require('node:sqlite') as NodeSqlite;
  } catch {
    nodeSqliteModule = null;
  } finally {
    process.emitWarning = emitWarning;
  }
  return nodeSqliteModule;
}

function openBetterSqlite3(file: string, readonly: boolean): Database {
  let BetterSqlite3: typeof import('better-sqlite3');
  try {
    // Loaded on first use only: the editor's runtime uses node:sqlite and ships no native addon.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    BetterSqlite3 = require('better-sqlite3') as typeof import('better-sqlite3');
    return new BetterSqlite3(file, { readonly, fileMustExist: readonly }) as unknown as Database;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND') {
      const sqlite = nodeSqlite();
      throw new SqliteDriverError(
        `${sqlite ? `${withoutFts5()},` : `this runtime (${process.execPath}, Node ${process.version}) has no node:sqlite`} and better-sqlite3 is not installed beside Lightning. ` +
          `Run the daemon on ${sqlite ? 'a Node whose node:sqlite has FTS5' : 'Node ≥ 22.13'} (in VS Code: clear the "lightning.nodePath" setting, the editor's own runtime has node:sqlite), ` +
          'or build better-sqlite3 for this Node (`npm install --no-save better-sqlite3 --nodedir=<prefix with include/node>`; `npm run demo` does it where the headers sit beside Node).',
        { cause: error },
      );
    }
    explainNativeLoadError(error);
  }
}

function openNodeSqlite(file: string, readonly: boolean): Database {
  const sqlite = nodeSqlite();
  if (!sqlite) {
    throw new SqliteDriverError(
      `LIGHTNING_SQLITE_DRIVER is node:sqlite but this runtime (${process.execPath}, Node ${process.version}) has none: it needs Node ≥ 22.13. Unset it, or run the daemon on a newer Node.`,
    );
  }
  if (!hasFts5(sqlite))
    throw new SqliteDriverError(
      `${withoutFts5()}. Run the daemon on a Node whose node:sqlite has it (in VS Code: clear the "lightning.nodePath" setting; the editor's own runtime has it), or unset LIGHTNING_SQLITE_DRIVER to use better-sqlite3.`,
    );
  return new NodeSqliteDatabase(new sqlite.DatabaseSync(file, { readOnly: readonly }));
}

/** Rows as plain objects (node:sqlite gives null-prototype ones), like better-sqlite3's. */
function plain(row: Row | undefined): Row | undefined {
  return row === undefined ? undefined : { ...row };
}

class NodeSqliteStatement implements Statement<SqlValue[], Row> {
  constructor(private readonly statement: StatementSync) {}

  run(...params: SqlValue[]): RunResult {
    return this.statement.run(...params);
  }

  get(...params: SqlValue[]): Row | undefined {
    return plain(this.statement.get(...params));
  }

  all(...params: SqlValue[]): Row[] {
    return this.statement.all(...params).map((row) => ({ ...row }));
  }

  *iterate(...params: SqlValue[]): IterableIterator<Row> {
    for (const row of this.statement.iterate(...params)) yield { ...row };
  }
}

/** better-sqlite3's connection semantics over a node:sqlite DatabaseSync. */
class NodeSqliteDatabase implements Database {
  private closed = false;
  /** Open transactions and savepoints, where node:sqlite is older than `isTransaction` (22.16). */
  private depth = 0;
  private savepoints = 0;

  constructor(private readonly db: DatabaseSync) {}

  prepare<P extends unknown[] = unknown[], R = unknown>(sql: string): Statement<P, R> {
    return new NodeSqliteStatement(this.db.prepare(sql)) as unknown as Statement<P, R>;
  }

  exec(sql: string): this {
    this.db.exec(sql);
    return this;
  }

  pragma(source: string, options: { simple?: boolean } = {}): unknown {
    const rows = this.db.prepare(`PRAGMA ${source}`).all();
    if (options.simple) return rows[0] === undefined ? undefined : Object.values(rows[0])[0];
    return rows.map((row) => ({ ...row }));
  }

  transaction<F extends (...args: never[]) => unknown>(fn: F): Transaction<F> {
    const run =
      (mode: 'DEFERRED' | 'IMMEDIATE' | 'EXCLUSIVE') =>
      (...args: Parameters<F>) =>
        this.inTransactionRun(mode, () => fn(...args)) as ReturnType<F>;
    return Object.assign(run('DEFERRED'), {
      deferred: run('DEFERRED'),
      immediate: run('IMMEDIATE'),
      exclusive: run('EXCLUSIVE'),
    });
  }

  unsafeMode(on: boolean): this {
    // Node ≥ 24 opens in SQLite's defensive mode, like better-sqlite3; Node 22 does not (and has no switch).
    this.db.enableDefensive?.(!on);
    return this;
  }

  get inTransaction(): boolean {
    return this.db.isTransaction ?? this.depth > 0;
  }

  get open(): boolean {
    return !this.closed;
  }

  close(): this {
    this.closed = true;
    this.db.close();
    return this;
  }

  private inTransactionRun(mode: string, fn: () => unknown): unknown {
    if (this.inTransaction) return this.inSavepoint(fn);
    this.db.exec(`BEGIN ${mode}`);
    this.depth++;
    try {
      const result = fn();
      this.db.exec('COMMIT');
      return result;
    } catch (error) {
      // SQLite may have rolled back already (e.g. SQLITE_FULL); ROLLBACK would then fail.
      if (this.inTransaction) this.db.exec('ROLLBACK');
      throw error;
    } finally {
      this.depth--;
    }
  }

  private inSavepoint(fn: () => unknown): unknown {
    const name = `lightning_${++this.savepoints}`;
    this.db.exec(`SAVEPOINT ${name}`);
    this.depth++;
    try {
      const result = fn();
      this.db.exec(`RELEASE ${name}`);
      return result;
    } catch (error) {
      if (this.inTransaction) this.db.exec(`ROLLBACK TO ${name}; RELEASE ${name}`);
      throw error;
    } finally {
      this.depth--;
      this.savepoints--;
    }
  }
}
