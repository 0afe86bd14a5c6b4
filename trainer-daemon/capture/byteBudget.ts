/**
 * The daemon's budget for bytes it holds in memory on behalf of agents: request bodies being read
 * and forwarded, non-streamed upstream answers being collected. Past the budget a request is refused
 * with a retryable 503 instead of memory growing with the number of concurrent calls (100 calls of
 * 30 MiB each once took 7 GB). Streams pass through without being held, so they do not count.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { OverloadedError } from '../protocol/errors';

/**
 * 256 MiB: under 100 concurrent 30 MiB calls the daemon peaked at ~1.0 GB with it, ~1.9 GB with
 * 512 MiB (a held body costs ~3.5× its size: chunks, the joined buffer, the parsed JSON, the record),
 * with fewer of such a burst answered at once (the rest 503 + Retry-After, which SDKs retry; npm run
 * bench measures both).
 */
export const DEFAULT_MAX_BUFFERED_BYTES = 256 * 1024 * 1024;

export class ByteBudget {
  private held = 0;
  /** What each response holds now: one `close` listener gives all of it back, however many takes there were. */
  private readonly byResponse = new WeakMap<ServerResponse | IncomingMessage, { bytes: number }>();

  constructor(readonly limit: number) {}

  get used(): number {
    return this.held;
  }

  /** Takes `bytes` for `response`'s lifetime (given back when it closes); throws OverloadedError past the budget. */
  take(bytes: number, response: ServerResponse | IncomingMessage): void {
    if (this.held + bytes > this.limit) {
      throw new OverloadedError(
        `the daemon holds ${this.held} bytes of requests in flight (limit ${this.limit}); retry shortly`,
      );
    }
    this.held += bytes;
    const holding = this.byResponse.get(response);
    if (holding) {
      holding.bytes += bytes;
      return;
    }
    const taken = { bytes };
    this.byResponse.set(response, taken);
    response.once('close', () => {
      this.held -= taken.bytes;
      this.byResponse.delete(response);
    });
  }
}
