/**
 * Links a retry to the attempt it repeats: an SDK that got a 429, a 5xx or a broken connection
 * sends the same request body again within the same rollout (the OpenAI and Anthropic SDKs also say
 * so in `x-stainless-retry-count`, kept in the record). The proxy remembers each failed call by rollout and body hash;
 * the next call with that body in that rollout is its retry. Bounded: the oldest entries go first.
 */
import crypto from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

/**
 * The SDK's own count of this request's retries (Stainless-generated SDKs: openai, anthropic, in
 * Node and Python), kept in the record beside the link: an agent's own retry loop sends 0 again.
 */
export function sdkRetryCount(headers: IncomingHttpHeaders): number | null {
  const value = Number(headers['x-stainless-retry-count']);
  return typeof headers['x-stainless-retry-count'] === 'string' && Number.isInteger(value) && value >= 0 ? value : null;
}

/** Failed calls remembered across all rollouts; a retry comes within seconds, so a few thousand suffice. */
const REMEMBERED = 4096;

export class RetryLinker {
  private readonly failed = new Map<string, string>();
  /** How many remembered failures each rollout has: a rollout with none needs no hash of its calls' bodies. */
  private readonly failures = new Map<string, number>();

  private static key(rolloutId: string, body: Buffer): string {
    return `${rolloutId}\u0000${crypto.createHash('sha256').update(body).digest('hex')}`;
  }

  /** The span id of the failed attempt this call repeats, if any (taken: one attempt has one retry). */
  retryOf(rolloutId: string, body: Buffer): string | null {
    if (!this.failures.has(rolloutId)) return null;
    const key = RetryLinker.key(rolloutId, body);
    const spanId = this.failed.get(key);
    if (spanId === undefined) return null;
    this.forget(key);
    return spanId;
  }

  /** Remembers a call that did not end with a whole answer, so its retry can name it. */
  failedCall(rolloutId: string, body: Buffer, spanId: string): void {
    const key = RetryLinker.key(rolloutId, body);
    this.forget(key);
    this.failed.set(key, spanId);
    this.failures.set(rolloutId, (this.failures.get(rolloutId) ?? 0) + 1);
    if (this.failed.size > REMEMBERED) this.forget(this.failed.keys().next().value!);
  }

  private forget(key: string): void {
    if (!this.failed.delete(key)) return;
    const rolloutId = key.slice(0, key.indexOf('\u0000'));
    const left = (this.failures.get(rolloutId) ?? 1) - 1;
    if (left > 0) this.failures.set(rolloutId, left);
    else this.failures.delete(rolloutId);
  }
}
