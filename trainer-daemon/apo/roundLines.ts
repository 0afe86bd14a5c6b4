/**
 * What `lightning train --algorithm apo` prints while it follows a run the daemon drives: one line per round, read
 * from the round's metrics and the leaderboard (`apo: round N: …` on stderr), and at the end the branches that were
 * skipped and why the run stopped, read from its result. Pure: unit-tested.
 */
import { describeSkipped, type ApoCandidate, type ApoConfig, type ApoResult } from '../protocol';
import { assertNever } from '../protocol/assert';

const score = (value: number | undefined): string => (value === undefined ? '-' : value.toFixed(3));

/**
 * The candidate a round's metric names by its score: among the candidates made by then with that full validation
 * score, the one with the best batch score (the round's leader is its beam's best by batch score), then the earliest.
 */
function candidateScoring(
  candidates: readonly ApoCandidate[],
  round: number,
  valScore: number | undefined,
  byBatch: boolean,
): string {
  const matching = candidates
    .filter((c) => c.round <= round && c.valScore !== null && c.valScore === valScore)
    .sort(
      (a, b) =>
        (byBatch ? (b.batchScore ?? -Infinity) - (a.batchScore ?? -Infinity) : 0) ||
        a.round - b.round ||
        a.createdAt - b.createdAt,
    );
  return matching[0]?.id ?? '?';
}

/** A round's progress line (round 0: the seed's score), as the loop reports it. */
export function roundLine(
  round: number,
  m: Readonly<Record<string, number>>,
  candidates: readonly ApoCandidate[],
): string {
  if (round === 0) return `round 0: seed scores ${score(m.best_val_score)} on ${m.rollouts ?? 0} validation tasks`;
  const seed = candidates.find((c) => c.id === 'seed')?.valScore ?? undefined;
  const made = m.candidates ?? 0;
  const skipped = m.skipped ?? 0;
  const leftOut = describeSkipped({
    upstreamError: m['skipped_calls/upstream_errors'] ?? 0,
    cancelled: m['skipped_calls/cancelled'] ?? 0,
    truncated: m['skipped_calls/truncated'] ?? 0,
  });
  return (
    `round ${round}: ${made} new candidate(s)${skipped ? `, ${skipped} branch(es) skipped` : ''}; ` +
    `leader ${candidateScoring(candidates, round, m.leader_val_score, true)} ${score(m.leader_val_score)}, ` +
    `best ${candidateScoring(candidates, round, m.best_val_score, false)} ${score(m.best_val_score)} (seed ${score(seed)}); ` +
    `${m.llm_calls ?? 0} LLM calls, ${m.rollouts ?? 0} rollouts${leftOut ? `; agent calls ${leftOut} (not whole answers)` : ''}`
  );
}

/** Why the run stopped early, or null when it completed its rounds. */
function stopLine(result: ApoResult, config: Pick<ApoConfig, 'budgetCalls' | 'budgetRollouts'>): string | null {
  switch (result.stopReason) {
    case 'completed':
      return null;
    case 'budget-calls':
      return `stopped: the budget of ${config.budgetCalls} LLM calls is spent`;
    case 'budget-rollouts':
      return `stopped: the budget of ${config.budgetRollouts} rollouts is spent`;
    case 'cancelled':
      return 'stopped: the run was cancelled';
    default:
      return assertNever(result.stopReason);
  }
}

/** The end of a run: each skipped branch with its error, then why it stopped (when early). */
export function endLines(result: ApoResult, config: Pick<ApoConfig, 'budgetCalls' | 'budgetRollouts'>): string[] {
  const stopped = stopLine(result, config);
  return [
    ...result.skipped.map((s) => `round ${s.round}: skipped a branch of ${s.parentId}: ${s.stage} failed: ${s.error}`),
    ...(stopped ? [stopped] : []),
  ];
}
