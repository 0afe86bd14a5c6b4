/**
 * Fairness between rollouts: how many calls one rollout may have in flight through the proxy at once, counted over
 * every way a call goes out (relayed as it is, or translated to chat completions for a policy server). Past it the
 * rollout's next call gets a 429 with Retry-After (SDKs retry it) instead of starving every other rollout's calls.
 */
import type { ServerResponse } from 'node:http';
import { sendError } from './callExchange';
import type { ProxyCall } from './proxyCall';

export class RolloutCallLimit {
  private readonly inFlight = new Map<string, number>();

  constructor(private readonly max: number) {}

  /** Runs `forward` as one of the rollout's calls in flight; past the limit, answers 429 in the agent's API's shape. */
  async run(call: ProxyCall, response: ServerResponse, forward: () => Promise<void>): Promise<void> {
    const inFlight = this.inFlight.get(call.rolloutId) ?? 0;
    if (inFlight >= this.max) {
      sendError(
        response,
        429,
        'rate_limit_exceeded',
        `this rollout has ${inFlight} LLM calls in flight through Lightning (limit ${this.max}); retry when one finishes`,
        call.errorBody,
      );
      return;
    }
    this.inFlight.set(call.rolloutId, inFlight + 1);
    try {
      await forward();
    } finally {
      const left = (this.inFlight.get(call.rolloutId) ?? 1) - 1;
      if (left === 0) this.inFlight.delete(call.rolloutId);
      else this.inFlight.set(call.rolloutId, left);
    }
  }
}
