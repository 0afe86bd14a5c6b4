// The store's SQLite driver (trainer-daemon/store/driver.ts): which one this runtime gets, and that
// both give the store the same connection semantics. Runs under any Node: on Node 20 it covers
// better-sqlite3, on Node ≥ 22.13 node:sqlite (test/run.mjs runs the store's files under both).
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import { chooseDriver, openConnection, SqliteDriverError, type NodeSqlite } from '../../trainer-daemon/store/driver';
import { Store } from '../../trainer-daemon/store/store';
import { parsed } from '../helpers/params';
import { tempDir } from '../helpers/tmp';

const [major, minor] = process.versions.node.split('.').map(Number) as [number, number];
const hasNodeSqlite = major > 22 || (major === 22 && minor >= 13);

describe('store: SQLite driver', () => {
  test('the store opens on node:sqlite where the runtime has it, else on better-sqlite3', (t) => {
    const expected = process.env.LIGHTNING_SQLITE_DRIVER ?? (hasNodeSqlite ? 'node:sqlite' : 'better-sqlite3');
    assert.equal(chooseDriver(), expected);
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    assert.equal(store.driver, expected);
  });

  test('a node:sqlite built without FTS5 (some Node 22 and 23 builds) is passed over for better-sqlite3', () => {
    // Stand-ins for a runtime's node:sqlite build: one whose SQLite lacks FTS5, one that has it.
    const build = (fts5: boolean): NodeSqlite => ({
      DatabaseSync: class {
        exec(sql: string): void {
          if (!fts5 && /fts5/.test(sql)) throw new Error('no such module: fts5');
        }
        prepare(): never {
          throw new Error('not used');
        }
        close(): void {}
      },
    });
    assert.equal(chooseDriver({}, build(false)), 'better-sqlite3');
    assert.equal(chooseDriver({}, build(true)), 'node:sqlite');
    assert.equal(chooseDriver({}, null), 'better-sqlite3');
    assert.equal(chooseDriver({ LIGHTNING_SQLITE_DRIVER: 'node:sqlite' }, build(false)), 'node:sqlite', 'forced: kept');
    // This runtime's own, where it has one: the store's migrations need its FTS5.
    if (hasNodeSqlite) assert.equal(chooseDriver({}), 'node:sqlite');
  });

  test('an unknown forced driver is refused with the names to use', () => {
    assert.throws(
      () => chooseDriver({ LIGHTNING_SQLITE_DRIVER: 'sqlite3' }),
      (error: Error) =>
        error instanceof SqliteDriverError && /use one of node:sqlite, better-sqlite3/.test(error.message),
    );
  });

  test('forcing node:sqlite opens it where the runtime has it, and elsewhere names the Node it needs', (t) => {
    const open = (): ReturnType<typeof openConnection> =>
      openConnection(path.join(tempDir(t), 'x.db'), { readonly: false, driver: 'node:sqlite' });
    if (!hasNodeSqlite) {
      assert.throws(open, /needs Node ≥ 22\.13/);
      return;
    }
    const connection = open();
    t.after(() => connection.db.close());
    assert.equal(connection.driver, 'node:sqlite');
  });

  test('durability settings are the same on every driver: WAL, synchronous=NORMAL, foreign keys, busy timeout', (t) => {
    const store = Store.open(path.join(tempDir(t), 'store.db'));
    t.after(() => store.close());
    assert.equal(store.db.pragma('journal_mode', { simple: true }), 'wal');
    assert.equal(store.db.pragma('synchronous', { simple: true }), 1);
    assert.equal(store.db.pragma('foreign_keys', { simple: true }), 1);
    assert.equal(store.db.pragma('busy_timeout', { simple: true }), 5000);
    // A new store's 16 KiB pages, checkpointed every ~40 MB of WAL.
    assert.equal(store.db.pragma('page_size', { simple: true }), 16384);
    assert.deepEqual(store.db.pragma('wal_autocheckpoint'), [{ wal_autocheckpoint: 2500 }]);
  });

  test('a store made with 4 KiB pages keeps them, its checkpoints by the same ~40 MB, and its rows', (t) => {
    const file = path.join(tempDir(t), 'store.db');
    // As stores were made before 16 KiB pages: SQLite's default page size, then WAL (which fixes it).
    const { db } = openConnection(file, { readonly: false });
    db.pragma('page_size = 4096');
    db.pragma('journal_mode = WAL');
    db.exec('CREATE TABLE kept (v TEXT)');
    db.prepare('INSERT INTO kept (v) VALUES (?)').run('before');
    db.close();
    const store = Store.open(file);
    t.after(() => store.close());
    assert.equal(store.db.pragma('page_size', { simple: true }), 4096);
    assert.deepEqual(store.db.pragma('wal_autocheckpoint'), [{ wal_autocheckpoint: 10000 }]);
    assert.deepEqual(store.db.prepare('SELECT v FROM kept').all(), [{ v: 'before' }]);
    // Migrated on its 4 KiB pages, and written to as any store.
    const rollout = store.createRollout(parsed('createRollout', { label: 'on 4 KiB pages' }));
    assert.equal(store.getRollout(rollout.id).label, 'on 4 KiB pages');
    assert.equal(store.db.pragma('integrity_check', { simple: true }), 'ok');
  });

  test('rows are plain objects; run reports changes and the new rowid', (t) => {
    const { db } = openConnection(path.join(tempDir(t), 'x.db'), { readonly: false });
    t.after(() => db.close());
    db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, n REAL)');
    const insert = db.prepare<[{ name: string; n: number }]>('INSERT INTO t (name, n) VALUES (@name, @n)');
    assert.deepEqual(insert.run({ name: 'a', n: 1.5 }), { changes: 1, lastInsertRowid: 1 });
    assert.deepEqual(
      db.prepare<[number], { id: number; name: string; n: number }>('SELECT * FROM t WHERE id = ?').get(1),
      { id: 1, name: 'a', n: 1.5 },
    );
    assert.equal(db.prepare('SELECT * FROM t WHERE id = ?').get(2), undefined);
    assert.deepEqual(db.prepare('SELECT name FROM t').all(), [{ name: 'a' }]);
  });

  test('transactions: a throw rolls back, nested ones are savepoints, inTransaction tells', (t) => {
    const { db } = openConnection(path.join(tempDir(t), 'x.db'), { readonly: false });
    t.after(() => db.close());
    db.exec('CREATE TABLE t (v TEXT)');
    const insert = db.prepare<[string]>('INSERT INTO t VALUES (?)');
    const count = () => db.prepare<[], { n: number }>('SELECT count(*) AS n FROM t').get()!.n;
    const outer = db.transaction((inner: () => void) => {
      assert.equal(db.inTransaction, true);
      insert.run('outer');
      try {
        inner();
      } catch {
        // the inner savepoint rolled back alone
      }
    });
    const failing = db.transaction(() => {
      insert.run('inner');
      throw new Error('inner fails');
    });
    outer.immediate(() => failing());
    assert.equal(db.inTransaction, false);
    assert.deepEqual(db.prepare('SELECT v FROM t').all(), [{ v: 'outer' }]);
    assert.throws(
      () =>
        db.transaction(() => {
          insert.run('lost');
          throw new Error('boom');
        })(),
      /boom/,
    );
    assert.equal(count(), 1);
  });

  test('a read-only connection cannot write, and refuses a file that does not exist', (t) => {
    const file = path.join(tempDir(t), 'store.db');
    Store.open(file).close();
    const { db } = openConnection(file, { readonly: true });
    t.after(() => db.close());
    assert.ok(db.prepare<[], { n: number }>('SELECT count(*) AS n FROM rollouts').get()!.n === 0);
    assert.throws(
      () => db.exec("INSERT INTO datasets (id, name, source, created_at) VALUES ('d', 'd', '{}', 1)"),
      /readonly|read-only/i,
    );
    assert.throws(() => openConnection(path.join(tempDir(t), 'missing.db'), { readonly: true }));
  });
});
