/**
 * The cap on an HTTP answer whose size the other side decides (a policy server, the proxy's answer to APO), counted as
 * the bytes arrive (httpPost.ts, relayBody.ts): buffering whatever comes, one answer of gigabytes would take the
 * process's memory with it.
 */
import { LightningError } from '../protocol/errors';

/**
 * A non-streamed LLM answer is JSON of at most a few MB: past this it is refused, not buffered (docs/guarantees.md;
 * LIGHTNING_MAX_UPSTREAM_BODY_BYTES, read with the daemon's other limits: limits.ts).
 */
export const DEFAULT_MAX_UPSTREAM_BODY_BYTES = 64 * 1024 * 1024;

/** An answer was over the byte limit: reading stopped there and the rest was not taken. */
export class BodyOverLimitError extends LightningError {
  constructor(readonly limit: number) {
    super(
      `the answer is over the ${limit}-byte limit for a non-streamed answer (LIGHTNING_MAX_UPSTREAM_BODY_BYTES); Lightning stopped reading it`,
    );
  }
}
