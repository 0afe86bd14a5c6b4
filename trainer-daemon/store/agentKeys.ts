/**
 * Per-rollout capability keys for the agent-facing URL `/r/<key>`: 24 random bytes, of which the
 * store keeps only the SHA-256, with the upstream the agent's own configuration named.
 */
import crypto from 'node:crypto';
import type { Database, Statement } from 'better-sqlite3';

export interface AgentKeyRecord {
  readonly rolloutId: string;
  readonly upstream: string | null;
  /** Whether the proxy asks the engine for token ids and logprobs on every call. */
  readonly tokenIds: boolean;
}

export interface AgentKeyOptions {
  readonly upstream: string | null;
  readonly tokenIds: boolean;
}

export function newAgentKey(): string {
  return crypto.randomBytes(24).toString('base64url');
}

export function hashAgentKey(key: string): string {
  return crypto.createHash('sha256').update(key).digest('hex');
}

export class AgentKeyRepository {
  private readonly insert: Statement;
  private readonly byHash: Statement<[string], { rollout_id: string; upstream: string | null; token_ids: number }>;

  constructor(db: Database) {
    this.insert = db.prepare('INSERT INTO rollout_keys (key_hash, rollout_id, upstream, token_ids, created_at) VALUES (?, ?, ?, ?, ?)');
    this.byHash = db.prepare('SELECT rollout_id, upstream, token_ids FROM rollout_keys WHERE key_hash = ?');
  }

  /** Issues a key for the rollout; must run inside a transaction. Returns the key itself (never stored). */
  issue(rolloutId: string, options: AgentKeyOptions, now = Date.now()): string {
    const key = newAgentKey();
    this.insert.run(hashAgentKey(key), rolloutId, options.upstream, options.tokenIds ? 1 : 0, now);
    return key;
  }

  find(key: string): AgentKeyRecord | undefined {
    const row = this.byHash.get(hashAgentKey(key));
    return row ? { rolloutId: row.rollout_id, upstream: row.upstream, tokenIds: row.token_ids === 1 } : undefined;
  }
}
