import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import { openConnection, type Database } from '../../trainer-daemon/store/driver';
import { LATEST_SCHEMA_VERSION, MIGRATIONS, migrate } from '../../trainer-daemon/store/migrations';
import { Store } from '../../trainer-daemon/store/store';
import { tempDir } from '../helpers/tmp';
import { parsed } from '../helpers/params';
import { llmSpan } from '../helpers/spans';

/**
 * A raw connection on this runtime's driver (LIGHTNING_SQLITE_DRIVER, else node:sqlite where it loads): no pragmas, no
 * migrations.
 */
function rawDatabase(file: string): Database {
  return openConnection(file, { readonly: false }).db;
}

function tables(db: Database): string[] {
  return db
    .prepare<[], { name: string }>(
      "SELECT name FROM sqlite_master WHERE type IN ('table','index','trigger') AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    .all()
    .map((row) => row.name);
}

describe('store: migrations', () => {
  test('an empty file migrates to the latest version with every table of the data model', (t) => {
    const file = path.join(tempDir(t), 'store.db');
    const store = Store.open(file);
    t.after(() => store.close());
    assert.equal(store.schemaVersion, LATEST_SCHEMA_VERSION);
    const names = tables(store.db);
    for (const table of [
      'rollouts',
      'attempts',
      'spans',
      'rewards',
      'resources',
      'datasets',
      'tasks',
      'training_runs',
      'metric_points',
      'checkpoints',
      'rollouts_fts',
    ]) {
      assert.ok(names.includes(table), `missing table ${table}`);
    }
    assert.equal(store.db.pragma('journal_mode', { simple: true }), 'wal');
    assert.equal(store.db.pragma('foreign_keys', { simple: true }), 1);
    assert.ok((store.db.pragma('busy_timeout', { simple: true }) as number) >= 1000);
  });

  // From every earlier version: build a store at version v with data in it, then open it normally.
  for (const from of MIGRATIONS.map((m) => m.version).filter((v) => v < LATEST_SCHEMA_VERSION)) {
    test(`a store at version ${from} with data migrates to ${LATEST_SCHEMA_VERSION} keeping its data`, (t) => {
      const file = path.join(tempDir(t), 'store.db');
      const old = rawDatabase(file);
      migrate(old, from);
      assert.equal(old.pragma('user_version', { simple: true }), from);
      old
        .prepare(
          `INSERT INTO rollouts (id, status, mode, label, task_id, task_input, source, created_at, updated_at)
        VALUES ('ro-old', 'succeeded', 'debug', 'legacy weather run', 'w1', '{"city":"Oslo"}', '{"kind":"api"}', 1, 1)`,
        )
        .run();
      old
        .prepare(
          `INSERT INTO rewards (rollout_id, name, value, source, created_at) VALUES ('ro-old', 'reward', 0.75, 'human', 2)`,
        )
        .run();
      // A span as each version wrote it: by the rollout's id until migration 12 keyed it by the rollout's seq, with its
      // response id from migration 4 on.
      const [owner, ownerValue] = from >= 12 ? ['rollout', '1'] : ['rollout_id', "'ro-old'"];
      old
        .prepare(
          `INSERT INTO spans (id, ${owner}, attempt, sequence, trace_id, span_id, name, kind, category, start_ms, end_ms,
            status_code, attributes, events)
          VALUES (7, ${ownerValue}, 1, 1, '4bf92f3577b34da6a3ce929d0e0e4736', '00f067aa0ba902b7', 'chat m', 'client', 'llm', 5, 6,
            'ok', '{"gen_ai.response.id":"chatcmpl-old"}', '[]')`,
        )
        .run();
      if (from >= 4) old.prepare(`UPDATE spans SET response_id = 'chatcmpl-old'`).run();
      // A span of a rollout that is gone: only a store edited by hand, with foreign keys off, holds one. It names no
      // rollout migration 12 can key it by.
      old.pragma('foreign_keys = OFF');
      if (from < 12)
        old
          .prepare(
            `INSERT INTO spans (rollout_id, attempt, sequence, trace_id, span_id, name, kind, category, start_ms, status_code,
              attributes, events) VALUES ('ro-gone', 1, 1, 't', 's', 'n', 'client', 'tool', 1, 'ok', '{}', '[]')`,
          )
          .run();
      old.close();

      const store = Store.open(file);
      t.after(() => store.close());
      assert.equal(store.schemaVersion, LATEST_SCHEMA_VERSION);
      const rollout = store.getRollout('ro-old');
      assert.equal(rollout.reward, 0.75);
      assert.deepEqual(rollout.task, { id: 'w1', input: { city: 'Oslo' } });
      const [span] = store.getRolloutDetail('ro-old').spans;
      assert.equal(span?.spanId, '00f067aa0ba902b7');
      assert.deepEqual(span?.attributes, { 'gen_ai.response.id': 'chatcmpl-old' });
      assert.deepEqual(
        store.db
          .prepare('SELECT id, rollout, response_id FROM spans')
          .all()
          .map((row) => ({ ...(row as object) })),
        [{ id: 7, rollout: 1, response_id: 'chatcmpl-old' }],
        'its rowid kept, its rollout by key, its response id (migration 4) kept',
      );
      // The indexes came back with the table: a span id seen again is a duplicate, not a second row.
      const again = store.addSpans({ rolloutId: 'ro-old', spans: [llmSpan({ spanId: '00f067aa0ba902b7' })] });
      assert.deepEqual(again.results, [{ kind: 'duplicate', spanId: '00f067aa0ba902b7' }]);
      // Text search covers rollouts written before the search index existed.
      assert.deepEqual(
        store.listRollouts(parsed('listRollouts', { search: 'oslo' })).items.map((r) => r.id),
        ['ro-old'],
      );
      assert.deepEqual(
        store.listRollouts(parsed('listRollouts', { search: 'legacy weather' })).items.map((r) => r.id),
        ['ro-old'],
      );
    });
  }

  test('a store from a newer Lightning is refused without being touched', (t) => {
    const file = path.join(tempDir(t), 'store.db');
    const db = rawDatabase(file);
    db.pragma(`user_version = ${LATEST_SCHEMA_VERSION + 1}`);
    db.close();
    assert.throws(() => Store.open(file), /newer than this Lightning understands/);
    const after = rawDatabase(file);
    assert.equal(after.pragma('user_version', { simple: true }), LATEST_SCHEMA_VERSION + 1);
    assert.deepEqual(tables(after), []);
    after.close();
  });

  test('opening twice applies nothing the second time', (t) => {
    const file = path.join(tempDir(t), 'store.db');
    Store.open(file).close();
    const db = rawDatabase(file);
    t.after(() => db.close());
    assert.deepEqual(migrate(db), []);
  });
});
