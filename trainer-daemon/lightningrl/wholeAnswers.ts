/**
 * Training takes whole answers only (docs/export.md, "Only whole answers train"): a call that failed
 * upstream, that the client cancelled mid-stream, or whose record was cut at a size limit is not
 * what the model would have answered, so by default it becomes no transition, no chat row and no
 * GRPO sample; the report counts what was left out, and why. `includeFailed` keeps them, each
 * flagged with its outcome. Applied to the extracted calls before any row conversion.
 */
import { countSkipped, spanOutcome, type CallOutcome, type SkippedCalls } from '../protocol';
import type { LlmCall } from './adapter';

export interface KeptCall {
  readonly call: LlmCall;
  readonly outcome: CallOutcome;
}

/** The calls to train on, in order; those left out are counted into `skipped`. */
export function wholeAnswers(calls: readonly LlmCall[], includeFailed: boolean, skipped: SkippedCalls): KeptCall[] {
  const kept: KeptCall[] = [];
  for (const call of calls) {
    const outcome = spanOutcome(call.span);
    if (outcome.kind !== 'ok' && !includeFailed) {
      countSkipped(skipped, outcome);
      continue;
    }
    kept.push({ call, outcome });
  }
  return kept;
}
