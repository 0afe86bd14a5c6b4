/**
 * Versioned resources: every version is kept (a prompt's history, APO's candidates); one version
 * per name is current, which is what agents read. A rollout can be pinned to versions (an APO
 * candidate's batch): it then reads those, and the pin records what it ran with.
 */
import type { Database, Statement } from './driver';
import type { z } from 'zod';
import {
  placeholders,
  PolicyRef,
  type AgentResources,
  type Json,
  type PutResourceParams,
  type Resource,
  type ResourceSummary,
} from '../protocol';
import { InvalidInputError, NotFoundError } from '../protocol/errors';

interface ResourceRow {
  name: string;
  version: number;
  kind: string;
  value: string;
  created_at: number;
  run_id: string | null;
  current: number;
}

const SELECT = `SELECT r.*, (h.version = r.version) AS current FROM resources r LEFT JOIN resource_heads h ON h.name = r.name`;

function rowToResource(row: ResourceRow): Resource {
  return {
    name: row.name,
    version: row.version,
    kind: row.kind,
    value: JSON.parse(row.value) as Json,
    createdAt: row.created_at,
    runId: row.run_id,
    current: row.current === 1,
  };
}

export class ResourceRepository {
  private readonly insert: Statement;
  private readonly setHead: Statement<[string, number]>;
  private readonly latest: Statement<[string], { version: number; kind: string } | undefined>;
  private readonly one: Statement<[string, number], ResourceRow>;
  private readonly current: Statement<[string], ResourceRow>;
  private readonly ofName: Statement<[string], ResourceRow>;
  private readonly summaries: Statement<[], ResourceSummary>;
  private readonly pin: Statement<[string, string, number]>;
  private readonly pinCurrent: Statement<[string]>;
  private readonly pinned: Statement<[string], { name: string; version: number }>;
  private readonly forAgent: Statement<[string], ResourceRow>;
  private readonly activePinned: Statement<[string, number], { count: number }>;

  constructor(db: Database) {
    this.insert = db.prepare(
      'INSERT INTO resources (name, version, kind, value, created_at, run_id) VALUES (?, ?, ?, ?, ?, ?)',
    );
    this.setHead = db.prepare(
      'INSERT INTO resource_heads (name, version) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET version = excluded.version',
    );
    this.latest = db.prepare('SELECT version, kind FROM resources WHERE name = ? ORDER BY version DESC LIMIT 1');
    this.one = db.prepare(`${SELECT} WHERE r.name = ? AND r.version = ?`);
    this.current = db.prepare(`${SELECT} WHERE r.name = ? AND r.version = h.version`);
    this.ofName = db.prepare(`${SELECT} WHERE r.name = ? ORDER BY r.version`);
    this.summaries =
      db.prepare(`SELECT r.name, h.version AS currentVersion, max(r.version) AS latestVersion, count(*) AS versions,
        (SELECT kind FROM resources k WHERE k.name = r.name AND k.version = h.version) AS kind
      FROM resources r JOIN resource_heads h ON h.name = r.name GROUP BY r.name ORDER BY r.name`);
    this.pin = db.prepare('INSERT INTO rollout_resources (rollout_id, name, version) VALUES (?, ?, ?)');
    // `policy` says which model served a rollout: pinned only when given (training, a checkpoint in use), never by
    // default.
    this.pinCurrent = db.prepare(
      "INSERT OR IGNORE INTO rollout_resources (rollout_id, name, version) SELECT ?, name, version FROM resource_heads WHERE name <> 'policy'",
    );
    this.pinned = db.prepare('SELECT name, version FROM rollout_resources WHERE rollout_id = ? ORDER BY name');
    // Per name: the rollout's pinned version when it has one, else the current one.
    this.forAgent = db.prepare(`SELECT r.*, 1 AS current FROM resources r
      JOIN resource_heads h ON h.name = r.name
      LEFT JOIN rollout_resources p ON p.rollout_id = ? AND p.name = r.name
      WHERE r.version = coalesce(p.version, h.version) ORDER BY r.name`);
    this.activePinned =
      db.prepare(`SELECT count(*) AS count FROM rollouts r JOIN rollout_resources p ON p.rollout_id = r.id
      WHERE p.name = ? AND p.version = ? AND r.status IN ('queued', 'running')`);
  }

  /** Stores the next version of a resource; must run inside a transaction. */
  put(params: z.output<typeof PutResourceParams>, now = Date.now()): Resource {
    const latest = this.latest.get(params.name);
    if (latest && latest.kind !== params.kind) {
      throw new InvalidInputError(
        `params.kind: resource ${params.name} is a ${latest.kind}; a new version must be one too (or use another name)`,
      );
    }
    // Only APO's candidates are held to the current version's placeholders; a person may change them.
    const head = params.kind === 'prompt_template' && params.runId !== null ? this.current.get(params.name) : undefined;
    if (head && params.kind === 'prompt_template') {
      const before = placeholders(JSON.parse(head.value) as string).join(', ');
      const after = placeholders(params.value).join(', ');
      if (before !== after) {
        throw new InvalidInputError(
          `params.value: a candidate must keep the placeholders {${before}}; it has {${after}}`,
        );
      }
    }
    const version = (latest?.version ?? 0) + 1;
    this.insert.run(params.name, version, params.kind, JSON.stringify(params.value), now, params.runId);
    if (params.current || !latest) this.setHead.run(params.name, version);
    return this.get(params.name, version);
  }

  /** One version, or the current one. */
  get(name: string, version?: number): Resource {
    const row = version === undefined ? this.current.get(name) : this.one.get(name, version);
    if (!row) {
      if (version !== undefined && this.current.get(name))
        throw new NotFoundError(
          `resource ${name} has no version ${version} (list its versions: \`lightning resource get ${name}\`)`,
        );
      throw new NotFoundError(`resource ${name} does not exist (create it with \`lightning resource put\`)`);
    }
    return rowToResource(row);
  }

  versions(name: string): Resource[] {
    return this.ofName.all(name).map(rowToResource);
  }

  setCurrent(name: string, version: number): Resource {
    this.get(name, version);
    this.setHead.run(name, version);
    return this.get(name, version);
  }

  list(): ResourceSummary[] {
    return this.summaries.all();
  }

  /**
   * Records the versions a new rollout runs with: those given (each must exist), and the current
   * version of every other resource but `policy`, so a rollout keeps reading — and records — what was current
   * when it was created. Must run inside a transaction.
   */
  pinRollout(rolloutId: string, versions: Readonly<Record<string, number>>): void {
    for (const [name, version] of Object.entries(versions)) {
      if (!this.one.get(name, version))
        throw new InvalidInputError(`params.resources.${name}: resource ${name} has no version ${version}`);
      this.pin.run(rolloutId, name, version);
    }
    this.pinCurrent.run(rolloutId);
  }

  pinnedVersions(rolloutId: string): Record<string, number> {
    return Object.fromEntries(this.pinned.all(rolloutId).map((row) => [row.name, row.version]));
  }

  /**
   * Which policy served the rollout: its pinned `policy` version's value (a training iteration's, or a checkpoint in
   * use); null when none.
   */
  servedBy(rolloutId: string): PolicyRef | null {
    const version = this.pinnedVersions(rolloutId).policy;
    if (version === undefined) return null;
    const parsed = PolicyRef.safeParse(this.get('policy', version).value);
    return parsed.success ? parsed.data : null;
  }

  /** How many queued or running rollouts are pinned to this version (a served checkpoint still in use). */
  activeRolloutsPinnedTo(name: string, version: number): number {
    return this.activePinned.get(name, version)!.count;
  }

  /** What the rollout's agent reads: its pinned versions, else the current ones. */
  forRollout(rolloutId: string | null): AgentResources {
    const rows = this.forAgent.all(rolloutId ?? '');
    return {
      resources: Object.fromEntries(
        rows.map((row) => [row.name, { version: row.version, kind: row.kind, value: JSON.parse(row.value) as Json }]),
      ),
    };
  }
}
