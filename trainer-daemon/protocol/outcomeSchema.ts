/**
 * The schemas of an LLM call's outcome (protocol/outcome.ts reads and writes them, without zod, so
 * the webview can use it): how a call ended, and the calls training left out, by why.
 */
import { z } from 'zod';
import { TRUNCATION_LIMITS } from './outcomeValues';

export const TruncationLimit = z.enum(TRUNCATION_LIMITS);
export type TruncationLimit = z.infer<typeof TruncationLimit>;

export const CallOutcome = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('ok') }),
  /** `status`: the HTTP status the agent got (null: the connection broke with no status). */
  z.object({ kind: z.literal('upstream_error'), status: z.number().int().nullable() }),
  z.object({ kind: z.literal('cancelled') }),
  z.object({ kind: z.literal('truncated'), limit: TruncationLimit }),
]);
export type CallOutcome = z.infer<typeof CallOutcome>;

/** Calls left out of training because they were not whole answers, by why. */
export const SkippedCalls = z.object({
  upstreamError: z.number().int().nonnegative(),
  cancelled: z.number().int().nonnegative(),
  truncated: z.number().int().nonnegative(),
});
export type SkippedCalls = z.infer<typeof SkippedCalls>;
