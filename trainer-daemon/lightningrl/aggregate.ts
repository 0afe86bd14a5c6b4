/**
 * Optional trajectory aggregation (LightningRL's last, optional step): consecutive transitions whose
 * prompt tokens extend the previous prompt + response become one sequence. The response of the
 * merged sample is every call's response with the tokens the environment inserted in between
 * (tool results, new user turns) kept for context but masked out of the loss. Only exact engine
 * token ids can be checked; a call without them, or whose prompt does not extend the previous one
 * (a re-tokenized or edited history), starts a new sequence and is counted. A call that was not a whole answer (kept
 * by `--include-failed`, flagged with its outcome) is never joined to a neighbour: it stays a sample of its own, so its
 * flag stays on exactly its tokens and a whole answer's row never carries it. A merged sample has one advantage: calls
 * whose advantages differ (`--advantage none` with a credit that differs per call) are not joined, and are counted.
 *
 * A merged sample's `prompt` is its last call's — the whole conversation before the last reply, the earlier replies
 * and tool results in it — so that its chat form is that conversation ending with the last reply; its `promptTokenIds`
 * stay the first call's (the rest are in `responseTokenIds`).
 */
import type { Transition } from '../protocol';

export interface AggregationStats {
  /** Samples that hold more than one call. */
  merged: number;
  /** Neighbouring calls that could not be joined because the prompt did not extend the previous sequence. */
  mismatches: number;
  /** Calls without engine token ids, left as they were. */
  withoutTokenIds: number;
  /** Calls that were not whole answers (`--include-failed`), each left a sample of its own. */
  notWhole: number;
  /** Neighbouring calls not joined because their advantages differ (one sample has one advantage). */
  advantageDiffers: number;
}

function startsWith(tokens: readonly number[], prefix: readonly number[]): boolean {
  if (prefix.length > tokens.length) return false;
  for (let i = 0; i < prefix.length; i += 1) if (tokens[i] !== prefix[i]) return false;
  return true;
}

/** Aggregates one rollout's transitions (in step order). */
export function aggregateRollout(transitions: readonly Transition[], stats: AggregationStats): Transition[] {
  const out: Transition[] = [];
  let current: Transition | undefined;
  for (const next of transitions) {
    if (next.outcome !== undefined || next.promptTokenIds === null || next.responseTokenIds === null) {
      if (next.outcome !== undefined) stats.notWhole += 1;
      else stats.withoutTokenIds += 1;
      out.push(next);
      current = undefined;
      continue;
    }
    const sequence = current ? [...current.promptTokenIds!, ...current.responseTokenIds!] : undefined;
    const extends_ = current !== undefined && sequence !== undefined && startsWith(next.promptTokenIds, sequence);
    if (current && sequence && extends_ && current.advantage === next.advantage) {
      const inserted = next.promptTokenIds.slice(sequence.length);
      if (current.spanIds.length === 1) stats.merged += 1;
      current = {
        ...current,
        spanIds: [...current.spanIds, next.spanId],
        prompt: next.prompt,
        response: next.response,
        responseTokenIds: [...current.responseTokenIds!, ...inserted, ...next.responseTokenIds],
        lossMask: [...current.lossMask!, ...inserted.map(() => 0), ...next.responseTokenIds.map(() => 1)],
        logprobs:
          current.logprobs && next.logprobs ? [...current.logprobs, ...inserted.map(() => 0), ...next.logprobs] : null,
        reward: next.reward,
        // Without a chat form in any of its calls, the sequence has none either.
        ...(current.notChat === undefined && next.notChat !== undefined ? { notChat: next.notChat } : {}),
      };
      // Every reply of the sequence is trained (and is an assistant turn of its chat row): cut when any of them was.
      if (next.stoppedAtTokenCap) current.stoppedAtTokenCap = true;
      out[out.length - 1] = current;
      continue;
    }
    if (current && extends_) stats.advantageDiffers += 1;
    else if (current) stats.mismatches += 1;
    current = next;
    out.push(next);
  }
  return out;
}
