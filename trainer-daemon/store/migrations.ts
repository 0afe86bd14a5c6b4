/**
 * Numbered schema migrations. The schema version is SQLite's `user_version`; each migration runs
 * in its own transaction together with the version bump, so a store is always at exactly one
 * version. Never edit a released migration: add the next one.
 */
import type { Database } from './driver';

export interface Migration {
  readonly version: number;
  readonly name: string;
  up(db: Database): void;
}

const v1Core: Migration = {
  version: 1,
  name: 'core data model',
  up(db) {
    db.exec(`
      CREATE TABLE rollouts (
        seq               INTEGER PRIMARY KEY,
        id                TEXT NOT NULL UNIQUE,
        status            TEXT NOT NULL CHECK (status IN ('queued','running','succeeded','failed','cancelled','timeout')),
        mode              TEXT NOT NULL CHECK (mode IN ('debug','train','val')),
        label             TEXT,
        task_id           TEXT,
        task_input        TEXT,
        dataset_id        TEXT,
        batch_id          TEXT,
        source            TEXT NOT NULL,
        resources_version INTEGER,
        max_attempts      INTEGER NOT NULL DEFAULT 1 CHECK (max_attempts >= 1),
        attempt_count     INTEGER NOT NULL DEFAULT 0,
        created_at        REAL NOT NULL,
        updated_at        REAL NOT NULL,
        started_at        REAL,
        ended_at          REAL,
        error             TEXT,
        exit_code         INTEGER,
        span_count        INTEGER NOT NULL DEFAULT 0,
        llm_calls         INTEGER NOT NULL DEFAULT 0,
        prompt_tokens     INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0
      );
      -- The list is ordered by seq (creation order in this store). Each index implicitly ends with
      -- the rowid (seq), so a filter plus ORDER BY seq reads a page straight off one index.
      CREATE INDEX rollouts_by_status  ON rollouts (status);
      CREATE INDEX rollouts_by_mode    ON rollouts (mode);
      CREATE INDEX rollouts_by_label   ON rollouts (label);
      CREATE INDEX rollouts_by_task    ON rollouts (task_id);
      CREATE INDEX rollouts_by_dataset ON rollouts (dataset_id);
      CREATE INDEX rollouts_by_batch   ON rollouts (batch_id);

      CREATE TABLE attempts (
        rollout_id TEXT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
        number     INTEGER NOT NULL,
        status     TEXT NOT NULL,
        started_at REAL NOT NULL,
        ended_at   REAL,
        error      TEXT,
        exit_code  INTEGER,
        PRIMARY KEY (rollout_id, number)
      ) WITHOUT ROWID;

      CREATE TABLE spans (
        id             INTEGER PRIMARY KEY,
        rollout_id     TEXT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
        attempt        INTEGER NOT NULL,
        sequence       INTEGER NOT NULL,
        trace_id       TEXT NOT NULL,
        span_id        TEXT NOT NULL,
        parent_span_id TEXT,
        name           TEXT NOT NULL,
        kind           TEXT NOT NULL,
        category       TEXT NOT NULL CHECK (category IN ('llm','tool','agent','reward','other')),
        start_ms       REAL NOT NULL,
        end_ms         REAL,
        status_code    TEXT NOT NULL,
        status_message TEXT,
        attributes     TEXT NOT NULL,
        events         TEXT NOT NULL,
        prompt_tokens     INTEGER,
        completion_tokens INTEGER
      );
      CREATE UNIQUE INDEX spans_by_rollout_sequence ON spans (rollout_id, sequence);
      CREATE UNIQUE INDEX spans_by_span_id ON spans (rollout_id, span_id);

      -- Append-only: a correction is a new row (see the trigger below).
      CREATE TABLE rewards (
        id         INTEGER PRIMARY KEY,
        rollout_id TEXT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
        span_id    TEXT,
        name       TEXT NOT NULL,
        value      REAL NOT NULL,
        source     TEXT NOT NULL CHECK (source IN ('human','agent','rule','judge','model')),
        author     TEXT,
        comment    TEXT,
        reason     TEXT,
        created_at REAL NOT NULL
      );
      CREATE INDEX rewards_by_rollout ON rewards (rollout_id, name, id);
      CREATE TRIGGER rewards_append_only BEFORE UPDATE ON rewards
        BEGIN SELECT RAISE(ABORT, 'rewards are append-only: add a new reward row to correct one'); END;

      CREATE TABLE resources (
        name       TEXT NOT NULL,
        version    INTEGER NOT NULL,
        kind       TEXT NOT NULL,
        value      TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (name, version)
      ) WITHOUT ROWID;

      CREATE TABLE datasets (
        id         TEXT PRIMARY KEY,
        name       TEXT NOT NULL UNIQUE,
        source     TEXT,
        created_at REAL NOT NULL
      );
      CREATE TABLE tasks (
        dataset_id TEXT NOT NULL REFERENCES datasets (id) ON DELETE CASCADE,
        id         TEXT NOT NULL,
        idx        INTEGER NOT NULL,
        split      TEXT NOT NULL CHECK (split IN ('train','val','test')),
        input      TEXT NOT NULL,
        expected   TEXT,
        PRIMARY KEY (dataset_id, id)
      ) WITHOUT ROWID;
      CREATE INDEX tasks_by_index ON tasks (dataset_id, idx);

      CREATE TABLE training_runs (
        id         TEXT PRIMARY KEY,
        algorithm  TEXT NOT NULL,
        config     TEXT NOT NULL,
        status     TEXT NOT NULL CHECK (status IN ('queued','running','succeeded','failed','cancelled')),
        created_at REAL NOT NULL,
        started_at REAL,
        ended_at   REAL,
        error      TEXT
      );
      CREATE TABLE metric_points (
        run_id  TEXT NOT NULL REFERENCES training_runs (id) ON DELETE CASCADE,
        step    INTEGER NOT NULL,
        name    TEXT NOT NULL,
        value   REAL NOT NULL,
        time_ms REAL NOT NULL
      );
      CREATE INDEX metric_points_by_run ON metric_points (run_id, name, step);
      CREATE TABLE checkpoints (
        id         TEXT PRIMARY KEY,
        run_id     TEXT NOT NULL REFERENCES training_runs (id) ON DELETE CASCADE,
        step       INTEGER NOT NULL,
        path       TEXT NOT NULL,
        metrics    TEXT NOT NULL,
        created_at REAL NOT NULL
      );
      CREATE INDEX checkpoints_by_run ON checkpoints (run_id, step);
    `);
  },
};

/**
 * Text search over label and task for the panel's filter box. A trigram FTS5 index answers
 * substring queries without scanning every rollout; it is kept in step with `rollouts` by triggers.
 */
const v2TextSearch: Migration = {
  version: 2,
  name: 'rollout text search',
  up(db) {
    db.exec(`
      CREATE VIRTUAL TABLE rollouts_fts USING fts5(
        label, task, content='', contentless_delete=1, tokenize='trigram case_sensitive 0'
      );
      CREATE TRIGGER rollouts_fts_insert AFTER INSERT ON rollouts BEGIN
        INSERT INTO rollouts_fts (rowid, label, task)
        VALUES (new.seq, coalesce(new.label, ''), coalesce(new.task_id, '') || ' ' || coalesce(new.task_input, ''));
      END;
      CREATE TRIGGER rollouts_fts_update AFTER UPDATE OF label, task_id, task_input ON rollouts BEGIN
        DELETE FROM rollouts_fts WHERE rowid = old.seq;
        INSERT INTO rollouts_fts (rowid, label, task)
        VALUES (new.seq, coalesce(new.label, ''), coalesce(new.task_id, '') || ' ' || coalesce(new.task_input, ''));
      END;
      CREATE TRIGGER rollouts_fts_delete AFTER DELETE ON rollouts BEGIN
        DELETE FROM rollouts_fts WHERE rowid = old.seq;
      END;
      INSERT INTO rollouts_fts (rowid, label, task)
        SELECT seq, coalesce(label, ''), coalesce(task_id, '') || ' ' || coalesce(task_input, '') FROM rollouts;
    `);
  },
};

/**
 * Capture: each running agent reaches the daemon through a per-rollout capability URL
 * (`/r/<key>`). Only a hash of the key is stored, so the store never holds a usable capability;
 * the upstream is the address the agent's own configuration pointed at (never a credential).
 */
const v3AgentEndpoints: Migration = {
  version: 3,
  name: 'agent endpoints',
  up(db) {
    db.exec(`
      CREATE TABLE rollout_keys (
        key_hash   TEXT PRIMARY KEY,
        rollout_id TEXT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
        upstream   TEXT,
        -- Ask the serving engine for token ids and logprobs on every call (training local models).
        token_ids  INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL
      ) WITHOUT ROWID;
      CREATE INDEX rollout_keys_by_rollout ON rollout_keys (rollout_id);
    `);
  },
};

/**
 * One LLM call is one step even when it is seen twice: by the proxy and in the agent's own OTLP
 * spans. The response id (`gen_ai.response.id`) recognises the pair.
 */
const v4ResponseIds: Migration = {
  version: 4,
  name: 'llm call response ids',
  up(db) {
    db.exec(`
      ALTER TABLE spans ADD COLUMN response_id TEXT;
      UPDATE spans SET response_id = json_extract(attributes, '$."gen_ai.response.id"') WHERE category = 'llm';
      CREATE INDEX spans_by_response_id ON spans (rollout_id, response_id) WHERE response_id IS NOT NULL;
    `);
  },
};

/**
 * Prompt optimization (APO). Rollouts gain the mode `optimizer` (the optimizer's own LLM calls,
 * recorded like any agent's). SQLite cannot alter a CHECK constraint and rebuilding `rollouts` is
 * not possible inside the migration's transaction without cascading deletes into its children
 * (DROP TABLE runs an implicit DELETE; RENAME rewrites the children's foreign keys), so the
 * constraint's text is edited in place: the procedure sqlite.org documents for schema changes that
 * leave the stored rows valid ("Making Other Kinds Of Table Schema Changes", lang_altertable.html).
 * Resources get a current version per name (candidates are versions too, but not current),
 * rollouts the versions they ran with, training runs a cancel request and a result, and APO runs
 * their leaderboard of candidates.
 */
const v6PromptOptimization: Migration = {
  version: 6,
  name: 'prompt optimization',
  up(db) {
    editTableSql(db, 6, 'rollouts', [
      [
        "mode              TEXT NOT NULL CHECK (mode IN ('debug','train','val'))",
        "mode              TEXT NOT NULL CHECK (mode IN ('debug','train','val','optimizer'))",
      ],
    ]);
    db.exec(`
      ALTER TABLE resources ADD COLUMN run_id TEXT;
      CREATE TABLE resource_heads (
        name    TEXT PRIMARY KEY,
        version INTEGER NOT NULL
      ) WITHOUT ROWID;
      INSERT INTO resource_heads (name, version) SELECT name, max(version) FROM resources GROUP BY name;

      CREATE TABLE rollout_resources (
        rollout_id TEXT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
        name       TEXT NOT NULL,
        version    INTEGER NOT NULL,
        PRIMARY KEY (rollout_id, name)
      ) WITHOUT ROWID;

      ALTER TABLE training_runs ADD COLUMN cancel_requested_at REAL;
      ALTER TABLE training_runs ADD COLUMN result TEXT;

      CREATE TABLE apo_candidates (
        run_id        TEXT NOT NULL REFERENCES training_runs (id) ON DELETE CASCADE,
        id            TEXT NOT NULL,
        round         INTEGER NOT NULL,
        parent_id     TEXT,
        resource_name TEXT NOT NULL,
        version       INTEGER NOT NULL,
        critique      TEXT,
        critique_style TEXT,
        batch_score   REAL,
        val_score     REAL,
        rollouts      INTEGER NOT NULL DEFAULT 0,
        created_at    REAL NOT NULL,
        PRIMARY KEY (run_id, id)
      ) WITHOUT ROWID;
    `);
  },
};

/**
 * Capture of every provider's API: a rollout's own Anthropic and Gemini upstreams (the user's
 * ANTHROPIC_BASE_URL, GOOGLE_GEMINI_BASE_URL), as JSON `{"anthropic"?: url, "gemini"?: url}`.
 */
const v7ProviderUpstreams: Migration = {
  version: 7,
  name: 'provider upstreams',
  up(db) {
    db.exec(`ALTER TABLE rollout_keys ADD COLUMN provider_upstreams TEXT;`);
  },
};

/** A training run's error kind (protocol/errors.ts), so clients switch on it rather than on its message. */
const v8RunErrorKind: Migration = {
  version: 8,
  name: 'training run error kind',
  up(db) {
    db.exec(`ALTER TABLE training_runs ADD COLUMN error_kind TEXT;`);
  },
};

/**
 * Which proxy records an OTLP span is already tied to (spans.ts, the twin lookup run for every batch
 * of LLM spans) by an index instead of a scan of the rollout's `other` spans: that scan, one per
 * matching record, made a long rollout's OTLP ingest quadratic (the bench's 61,440 spans spent 57%
 * of the daemon's time in it). Only the spans tied to another call are in the index.
 */
const v9SameCallIndex: Migration = {
  version: 9,
  name: 'index of spans tied to another call',
  up(db) {
    db.exec(`
      CREATE INDEX spans_by_same_call ON spans (rollout_id, json_extract(attributes, '$."lightning.same_call_as"'))
        WHERE category = 'other' AND json_extract(attributes, '$."lightning.same_call_as"') IS NOT NULL;
    `);
  },
};

/**
 * Where agents and ranks really ran (issue 19): an attempt's Ray node as JSON `{"nodeId","ip","host"}`, and a
 * training run's placement (protocol RunPlacement: its Ray nodes with their attempt counts, its torchrun ranks).
 */
const v10Placement: Migration = {
  version: 10,
  name: 'attempt nodes and run placement',
  up(db) {
    db.exec(`
      ALTER TABLE attempts ADD COLUMN node TEXT;
      ALTER TABLE training_runs ADD COLUMN placement TEXT;
    `);
  },
};

/**
 * The attempt an agent's reward was posted in (`POST {url}/reward`; NULL for every other source, and for agent rewards
 * stored before): a reward the agent posted during an attempt that then failed is not the reward of the attempt that
 * trains (store/rewards.ts#COUNTS_FOR_LAST_ATTEMPT).
 */
const v11AgentRewardAttempt: Migration = {
  version: 11,
  name: "the attempt of an agent's reward",
  up(db) {
    db.exec('ALTER TABLE rewards ADD COLUMN attempt INTEGER;');
  },
};

/** Spans a statement of migration 12 rewrites (by rowid range). */
const SPAN_UPGRADE_CHUNK = 50_000;

/**
 * Spans name their rollout by its integer key (`rollouts.seq`, the table's INTEGER PRIMARY KEY, which VACUUM keeps)
 * instead of its text id. Every spans index starts with the rollout, and an export's commit writes again most pages of
 * the indexes keyed by random ids (span ids, response ids): with the id, their entries were about twice as long. On
 * 500,000 spans the four indexes take 34 MB against 67, and a 512-span commit into a long rollout takes ~0.9 ms against
 * ~1.4 (the bench's store rows). The column changes in place, as migration 6 changed a constraint: its declaration is
 * edited in sqlite_schema (the indexes on it dropped first, made again after), then each row's id is replaced by its
 * rollout's seq. Rebuilding the table instead would leave a store's file larger by the whole spans table (freed pages)
 * for a change of a few bytes a row. The rows are rewritten SPAN_UPGRADE_CHUNK at a time: one statement's undo copy of
 * the pages it changes (its statement journal) is then a chunk's, not the whole table's. A span whose rollout is gone
 * (only a store edited by hand can hold one: foreign keys have been on since version 1) could not name it any more
 * and is removed.
 */
const v12SpansByRolloutKey: Migration = {
  version: 12,
  name: "spans keyed by the rollout's integer key",
  up(db) {
    db.exec(`
      DROP INDEX spans_by_rollout_sequence;
      DROP INDEX spans_by_span_id;
      DROP INDEX spans_by_response_id;
      DROP INDEX spans_by_same_call;
    `);
    editTableSql(db, 12, 'spans', [
      [
        'rollout_id     TEXT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE',
        'rollout        INTEGER NOT NULL REFERENCES rollouts (seq) ON DELETE CASCADE',
      ],
    ]);
    // `CAST`: the column is declared INTEGER now, and comparing the TEXT id with it would convert an id that reads as
    // a number (never one of ours, `ro-…`) and keep SQLite from looking the rollout up by its id's index.
    const rewrite = db.prepare(`UPDATE spans SET rollout = r.seq FROM rollouts r
      WHERE spans.id > ? AND spans.id <= ? AND r.id = CAST(spans.rollout AS TEXT)`);
    const { last } = db.prepare<[], { last: number | null }>('SELECT max(id) AS last FROM spans').get()!;
    for (let after = 0; after < (last ?? 0); after += SPAN_UPGRADE_CHUNK)
      rewrite.run(after, after + SPAN_UPGRADE_CHUNK);
    db.exec(`
      DELETE FROM spans WHERE typeof(rollout) <> 'integer';
      CREATE UNIQUE INDEX spans_by_rollout_sequence ON spans (rollout, sequence);
      CREATE UNIQUE INDEX spans_by_span_id ON spans (rollout, span_id);
      CREATE INDEX spans_by_response_id ON spans (rollout, response_id) WHERE response_id IS NOT NULL;
      CREATE INDEX spans_by_same_call ON spans (rollout, json_extract(attributes, '$."lightning.same_call_as"'))
        WHERE category = 'other' AND json_extract(attributes, '$."lightning.same_call_as"') IS NOT NULL;
    `);
  },
};

/**
 * Edits a table's declaration in sqlite_schema, in place: the procedure sqlite.org documents for schema changes that
 * leave the stored rows readable ("Making Other Kinds Of Table Schema Changes", lang_altertable.html). Each
 * `[before, after]` must be found in the declaration, else it throws, having changed nothing: the table is not the one
 * the earlier migrations made.
 */
function editTableSql(db: Database, migration: number, table: string, edits: ReadonlyArray<[string, string]>): void {
  const row = db
    .prepare<[string], { sql: string }>("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?")
    .get(table)!;
  let sql = row.sql;
  for (const [before, after] of edits) {
    if (!sql.includes(before))
      throw new Error(`migration ${migration}: the ${table} table is not the one the earlier migrations made`);
    sql = sql.replace(before, after);
  }
  const schemaVersion = db.pragma('schema_version', { simple: true }) as number;
  // better-sqlite3 and node:sqlite (Node ≥ 24) open in SQLite's defensive mode, which forbids writable_schema: lifted
  // for this statement only.
  db.unsafeMode(true);
  try {
    db.pragma('writable_schema = ON');
    db.prepare("UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = ?").run(sql, table);
    db.pragma(`schema_version = ${schemaVersion + 1}`);
    db.pragma('writable_schema = OFF');
  } finally {
    db.unsafeMode(false);
  }
}

/*
 * There is no migration 5: the number was skipped when prompt optimization's migration was written
 * (no release ever wrote `user_version` 5), and numbers are never reused. `migrate` applies each
 * migration above the store's version in order, so a version-4 store goes straight to 6.
 */
export const MIGRATIONS: readonly Migration[] = [
  v1Core,
  v2TextSearch,
  v3AgentEndpoints,
  v4ResponseIds,
  v6PromptOptimization,
  v7ProviderUpstreams,
  v8RunErrorKind,
  v9SameCallIndex,
  v10Placement,
  v11AgentRewardAttempt,
  v12SpansByRolloutKey,
];
export const LATEST_SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

/** A store an earlier Lightning wrote, about to be upgraded: from and to which schema version, and its spans. */
export interface StoreUpgrade {
  readonly from: number;
  readonly to: number;
  /** The rows the upgrade may rewrite: a store of millions of spans takes a while (migration 12: ~9 s a million). */
  readonly spans: number;
}

/** What a command says on stderr while it upgrades a store (one a CLI command opens itself, without the daemon). */
export function upgradeNotice({ from, to, spans }: StoreUpgrade): string {
  return `lightning: upgrading the store an earlier Lightning wrote (schema ${from} to ${to}, ${spans} spans) before using it, once; ~9 s a million spans here\n`;
}

/**
 * Applies every migration above the store's version, each atomically. Returns the versions applied. `onUpgrade` hears
 * first when a store an earlier Lightning wrote (not a new file) is to be upgraded.
 */
export function migrate(
  db: Database,
  target: number = LATEST_SCHEMA_VERSION,
  onUpgrade?: (upgrade: StoreUpgrade) => void,
): number[] {
  const current = db.pragma('user_version', { simple: true }) as number;
  if (current > LATEST_SCHEMA_VERSION) {
    throw new Error(
      `store schema version ${current} is newer than this Lightning understands (${LATEST_SCHEMA_VERSION}); update Lightning`,
    );
  }
  if (current > 0 && current < target && onUpgrade) {
    const { spans } = db.prepare<[], { spans: number }>('SELECT count(*) AS spans FROM spans').get()!;
    onUpgrade({ from: current, to: target, spans });
  }
  const applied: number[] = [];
  for (const migration of MIGRATIONS) {
    if (migration.version <= current || migration.version > target) continue;
    db.transaction(() => {
      migration.up(db);
      db.pragma(`user_version = ${migration.version}`);
    }).immediate();
    applied.push(migration.version);
  }
  return applied;
}
