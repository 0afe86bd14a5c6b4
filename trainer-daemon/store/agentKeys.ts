/**
 * Per-rollout capability keys for the agent-facing URL `/r/<key>`: 24 random bytes, of which the
 * store keeps only the SHA-256, with the upstream the agent's own configuration named.
 */
import crypto from 'node:crypto';
import type { Database, Statement } from './driver';
import { rememberRolloutSecrets, scrubUrlCredentials, urlSecretValues } from '../protocol/secrets';
import type { ProviderUpstreams } from '../protocol';
import { ConflictError } from '../protocol/errors';

export interface AgentKeyRecord {
  readonly rolloutId: string;
  /** The attempt the key was issued for: a key is issued as its attempt starts and revoked as it ends. */
  readonly attempt: number;
  readonly upstream: string | null;
  /** Whether the proxy asks the engine for token ids and logprobs on every call. */
  readonly tokenIds: boolean;
  /** The rollout's own Anthropic and Gemini upstreams. */
  readonly providerUpstreams: ProviderUpstreams;
}

export interface AgentKeyOptions {
  readonly upstream: string | null;
  readonly tokenIds: boolean;
  readonly providerUpstreams?: ProviderUpstreams;
  /** Reuse this key (its rollout ended) instead of drawing a new one: `agentRuns/start`'s `key`. */
  readonly key?: string;
}

export function newAgentKey(): string {
  return crypto.randomBytes(24).toString('base64url');
}

export function hashAgentKey(key: string): string {
  return crypto.createHash('sha256').update(key).digest('hex');
}

/**
 * The upstream as the store keeps it: without user:password or secret-looking query values. An
 * upstream that had them is kept exactly in memory only, for this daemon's lifetime.
 */
export function storableUpstream(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.username = '';
    parsed.password = '';
    return scrubUrlCredentials(parsed.toString());
  } catch {
    return url;
  }
}

/** Keys remembered after their first lookup (each proxied call looks its key up: a hash and a query otherwise). */
const KEYS_REMEMBERED = 10_000;

export class AgentKeyRepository {
  /**
   * Found keys, by the key itself (memory holds them anyway: they are secrets to redact); revoke() drops a
   * rollout's. Only what the store holds is remembered, read outside any transaction's rollback: a key is cached
   * when found, never when issued.
   */
  private readonly found = new Map<string, AgentKeyRecord>();
  private readonly exactUpstreams = new Map<string, string>();
  private readonly exactProviderUpstreams = new Map<string, ProviderUpstreams>();
  private readonly insert: Statement;
  private readonly byHash: Statement<
    [string],
    {
      rollout_id: string;
      attempt_count: number;
      upstream: string | null;
      token_ids: number;
      provider_upstreams: string | null;
    }
  >;
  private readonly byRollout: Statement<[string]>;

  constructor(db: Database) {
    this.insert = db.prepare(
      'INSERT INTO rollout_keys (key_hash, rollout_id, upstream, token_ids, created_at, provider_upstreams) VALUES (?, ?, ?, ?, ?, ?)',
    );
    this.byHash = db.prepare(
      `SELECT k.rollout_id, r.attempt_count, k.upstream, k.token_ids, k.provider_upstreams
        FROM rollout_keys k JOIN rollouts r ON r.id = k.rollout_id WHERE k.key_hash = ?`,
    );
    this.byRollout = db.prepare('DELETE FROM rollout_keys WHERE rollout_id = ?');
  }

  /** Issues a key for the rollout; must run inside a transaction. Returns the key itself (never stored). */
  issue(rolloutId: string, options: AgentKeyOptions, now = Date.now()): string {
    const key = options.key ?? newAgentKey();
    if (options.key !== undefined && this.byHash.get(hashAgentKey(key)))
      throw new ConflictError(
        "that key's rollout is still open: a key is given again only once its rollout has ended (finish it first)",
      );
    const stored = options.upstream === null ? null : storableUpstream(options.upstream);
    const providers = options.providerUpstreams ?? {};
    // A bare origin gains a trailing slash from URL; the SDK-style base URL has none.
    const storedProviders = Object.fromEntries(
      Object.entries(providers).map(([name, url]) => [name, storableUpstream(url).replace(/\/+$/, '')]),
    );
    this.insert.run(
      hashAgentKey(key),
      rolloutId,
      stored,
      options.tokenIds ? 1 : 0,
      now,
      Object.keys(providers).length > 0 ? JSON.stringify(storedProviders) : null,
    );
    // The key and the upstreams' own credentials (a password, `?key=`) are this rollout's secrets wherever they turn
    // up.
    rememberRolloutSecrets(rolloutId, [
      key,
      ...[options.upstream, ...Object.values(providers)].flatMap((url) => (url ? urlSecretValues(url) : [])),
    ]);
    if (options.upstream !== stored && options.upstream !== null) {
      this.exactUpstreams.set(rolloutId, options.upstream);
      if (this.exactUpstreams.size > 10_000) this.exactUpstreams.delete(this.exactUpstreams.keys().next().value!);
    }
    if (Object.entries(providers).some(([name, url]) => storedProviders[name] !== url)) {
      this.exactProviderUpstreams.set(rolloutId, providers);
      if (this.exactProviderUpstreams.size > 10_000)
        this.exactProviderUpstreams.delete(this.exactProviderUpstreams.keys().next().value!);
    }
    return key;
  }

  /** Revokes every key of the rollout (its attempt ended): a later request with one is a 404. */
  revoke(rolloutId: string): void {
    // Forgotten first: if the delete is rolled back, the key is read from the store again.
    for (const [key, record] of this.found) if (record.rolloutId === rolloutId) this.found.delete(key);
    this.byRollout.run(rolloutId);
    this.exactUpstreams.delete(rolloutId);
    this.exactProviderUpstreams.delete(rolloutId);
  }

  find(key: string): AgentKeyRecord | undefined {
    const known = this.found.get(key);
    if (known) return known;
    const row = this.byHash.get(hashAgentKey(key));
    if (!row) return undefined;
    const providerUpstreams =
      this.exactProviderUpstreams.get(row.rollout_id) ??
      (row.provider_upstreams ? (JSON.parse(row.provider_upstreams) as ProviderUpstreams) : {});
    const record = {
      rolloutId: row.rollout_id,
      attempt: row.attempt_count,
      upstream: this.exactUpstreams.get(row.rollout_id) ?? row.upstream,
      tokenIds: row.token_ids === 1,
      providerUpstreams,
    };
    this.found.set(key, record);
    if (this.found.size > KEYS_REMEMBERED) this.found.delete(this.found.keys().next().value!);
    return record;
  }
}
