/**
 * Automatic Prompt Optimization (Agent Lightning's APO, after ProTeGi's beam search over textual
 * gradients). The seed prompt is scored on the validation set; each round, every prompt in the
 * beam runs a training batch, its low- and high-reward rollouts go to the critique model (one
 * critique style per branch), the edit model turns each critique into a new prompt (placeholders
 * kept), and parents and children are scored on a common validation batch; the top `beam` stay.
 * The round's leader is scored on the full validation set and the best ever is kept. Budgets stop
 * the run cleanly; a failing critique or edit skips that branch and is reported.
 *
 * The daemon runs it (training/manager.ts) through its TrainingService, as GRPO and SFT: the editor sees the run,
 * its leaderboard and a notification per round, and `trainingRuns/cancel` (or the daemon's shutdown) stops it with
 * the best so far. The run's status is the manager's to record; this returns its result.
 */
import {
  ApoResult,
  CRITIQUE_STYLES,
  describeSkipped,
  type ApoConfig,
  type ApoSkip,
  type CritiqueStyle,
  type RolloutMode,
} from '../protocol';
import { errorMessage, LightningError } from '../protocol/errors';
import { lineDiff } from './diff';
import type { ApoContext } from './context';
import { CancelledError, Evaluator, type EvalTask, type ScoredRollout } from './evaluate';
import { BudgetExhaustedError, OptimizerLlm } from './llm';
import type { ApoPlan } from './prepare';
import { critiqueMessages, editMessages, parseCritique, parseEdit, type Example } from './prompts';
import { SeededRandom } from '../util/random';

interface Candidate {
  readonly id: string;
  readonly parentId: string | null;
  readonly version: number;
  readonly prompt: string;
  batchScore: number | null;
  valScore: number | null;
}

/** The rollout budget is spent: the run stops cleanly. */
class RolloutBudgetError extends LightningError {}

const mean = (values: readonly number[]): number => values.reduce((a, b) => a + b, 0) / Math.max(1, values.length);
const MAX_LOW = 3;
const MAX_HIGH = 2;

/** Low-reward rollouts (worst first) and high-reward ones (best first); ties broken by the seeded order. */
function pickExamples(rollouts: readonly ScoredRollout[], random: SeededRandom): { low: Example[]; high: Example[] } {
  const ordered = random.shuffle(rollouts).sort((a, b) => a.reward - b.reward);
  const best = ordered.at(-1)?.reward ?? 0;
  const worst = ordered[0]?.reward ?? 0;
  const example = (r: ScoredRollout): Example => ({
    input: r.task.input,
    answer: r.answer,
    expected: r.task.expected,
    reward: r.reward,
  });
  const low = ordered.filter((r) => r.reward < best);
  return {
    low: (low.length ? low : ordered).slice(0, MAX_LOW).map(example),
    high: ordered
      .filter((r) => r.reward > worst)
      .reverse()
      .slice(0, MAX_HIGH)
      .map(example),
  };
}

/**
 * Runs APO run `runId` (recorded and running) to its result: the best prompt found, with why it stopped (`cancelled`
 * once the seed was scored: the best so far). Throws CancelledError when cancelled before the seed was scored.
 */
export async function runApo(runId: string, config: ApoConfig, plan: ApoPlan, context: ApoContext): Promise<ApoResult> {
  const { store } = context;
  const { train, val } = plan;
  const seedResource = store.resource(config.resource);
  const evaluator = new Evaluator(runId, config, context);
  const llm = new OptimizerLlm({
    client: context.call,
    runId,
    upstream: config.upstream,
    apiKey: context.env.OPENAI_API_KEY || undefined,
    temperature: config.temperature,
    seed: config.seed,
    budgetCalls: config.budgetCalls,
    attempts: config.callAttempts,
  });
  let cancelled = false;
  const cancel = (): void => {
    cancelled = true;
    evaluator.cancel();
  };
  if (context.signal.aborted) cancel();
  context.signal.addEventListener('abort', cancel);

  const random = new SeededRandom(config.seed);
  const skipped: ApoSkip[] = [];
  let rollouts = 0;
  let roundsCompleted = 0;
  let stopReason: ApoResult['stopReason'] = 'completed';
  const seed: Candidate = {
    id: 'seed',
    parentId: null,
    version: seedResource.version,
    prompt: seedResource.value as string,
    batchScore: null,
    valScore: null,
  };
  let best = seed;

  const evaluate = async (
    candidate: Candidate,
    tasks: readonly EvalTask[],
    mode: Extract<RolloutMode, 'train' | 'val'>,
    round: number,
  ): Promise<ScoredRollout[]> => {
    if (rollouts + tasks.length > config.budgetRollouts)
      throw new RolloutBudgetError(`the budget of ${config.budgetRollouts} rollouts is spent`);
    rollouts += tasks.length;
    return evaluator.run(tasks, candidate.version, mode, `apo ${runId} round ${round} ${candidate.id} ${mode}`);
  };
  const scoreFully = async (candidate: Candidate, round: number): Promise<void> => {
    candidate.valScore = mean((await evaluate(candidate, val, 'val', round)).map((r) => r.reward));
    await store.recordApoRound({
      runId,
      round,
      scores: [{ id: candidate.id, valScore: candidate.valScore, rollouts: val.length }],
    });
  };

  try {
    try {
      await store.recordApoRound({
        runId,
        round: 0,
        candidates: [{ id: seed.id, parentId: null, version: seed.version, critique: null, critiqueStyle: null }],
      });
      await scoreFully(seed, 0);
      seed.batchScore = seed.valScore;
      await store.recordApoRound({
        runId,
        round: 0,
        metrics: { best_val_score: seed.valScore!, leader_val_score: seed.valScore!, rollouts, llm_calls: 0 },
      });
      context.progress(`round 0: seed scores ${seed.valScore!.toFixed(3)} on ${val.length} validation tasks`);
      let beam: Candidate[] = [seed];
      let made = 0;
      for (let round = 1; round <= config.rounds; round += 1) {
        const children: Candidate[] = [];
        const recorded: ApoSkip[] = [];
        for (const parent of beam) {
          const batch = await evaluate(parent, random.sample(train, config.gradientBatch), 'train', round);
          const { low, high } = pickExamples(batch, random);
          for (let branch = 0; branch < config.branch; branch += 1) {
            const style: CritiqueStyle = CRITIQUE_STYLES[branch % CRITIQUE_STYLES.length]!;
            const child = await makeChild(parent, style, low, high, round, recorded);
            if (!child) continue;
            made += 1;
            const candidate: Candidate = {
              id: `r${round}-${made}`,
              parentId: parent.id,
              version: child.version,
              prompt: child.prompt,
              batchScore: null,
              valScore: null,
            };
            await store.recordApoRound({
              runId,
              round,
              candidates: [
                {
                  id: candidate.id,
                  parentId: parent.id,
                  version: candidate.version,
                  critique: child.critique,
                  critiqueStyle: style,
                },
              ],
            });
            children.push(candidate);
          }
        }
        skipped.push(...recorded);
        // Parents and children on one common batch, so their scores compare.
        const pool = [...beam, ...children];
        const valBatch = random.sample(val, config.valBatch);
        if (rollouts + pool.length * valBatch.length > config.budgetRollouts)
          throw new RolloutBudgetError(`the budget of ${config.budgetRollouts} rollouts is spent`);
        for (const candidate of pool)
          candidate.batchScore = mean((await evaluate(candidate, valBatch, 'val', round)).map((r) => r.reward));
        await store.recordApoRound({
          runId,
          round,
          scores: pool.map((c) => ({ id: c.id, batchScore: c.batchScore!, rollouts: valBatch.length })),
        });
        // Stable sort: ties keep the pool's order (parents first, then children in the order made).
        beam = [...pool].sort((a, b) => b.batchScore! - a.batchScore!).slice(0, config.beam);
        const leader = beam[0]!;
        if (leader.valScore === null) await scoreFully(leader, round);
        if (leader.valScore! > best.valScore!) best = leader;
        roundsCompleted = round;
        await store.recordApoRound({
          runId,
          round,
          metrics: {
            best_val_score: best.valScore!,
            leader_val_score: leader.valScore!,
            mean_batch_score: mean(pool.map((c) => c.batchScore!)),
            candidates: children.length,
            skipped: recorded.length,
            rollouts,
            llm_calls: llm.callsUsed,
            // Agent calls that were not whole answers, so no critique read them (so far in the run).
            'skipped_calls/upstream_errors': evaluator.skippedCalls.upstreamError,
            'skipped_calls/cancelled': evaluator.skippedCalls.cancelled,
            'skipped_calls/truncated': evaluator.skippedCalls.truncated,
          },
        });
        const leftOut = describeSkipped(evaluator.skippedCalls);
        context.progress(
          `round ${round}: ${children.length} new candidate(s)${recorded.length ? `, ${recorded.length} branch(es) skipped` : ''}; leader ${leader.id} ${leader.valScore!.toFixed(3)}, best ${best.id} ${best.valScore!.toFixed(3)} (seed ${seed.valScore!.toFixed(3)}); ${llm.callsUsed} LLM calls, ${rollouts} rollouts${leftOut ? `; agent calls ${leftOut} (not whole answers)` : ''}`,
        );
      }
    } catch (error) {
      if (error instanceof BudgetExhaustedError) stopReason = 'budget-calls';
      else if (error instanceof RolloutBudgetError) stopReason = 'budget-rollouts';
      else if (error instanceof CancelledError) stopReason = 'cancelled';
      else throw error;
      if (seed.valScore === null) throw error;
      context.progress(`stopped: ${errorMessage(error)}`);
    }
    return ApoResult.parse({
      runId,
      resource: config.resource,
      seed: { candidateId: seed.id, version: seed.version, prompt: seed.prompt, valScore: seed.valScore },
      best: { candidateId: best.id, version: best.version, prompt: best.prompt, valScore: best.valScore },
      diff: lineDiff(seed.prompt, best.prompt),
      roundsCompleted,
      llmCalls: llm.callsUsed,
      rollouts,
      stopReason,
      skipped,
    });
  } finally {
    context.signal.removeEventListener('abort', cancel);
  }

  /**
   * One branch: critique, then edit, then the new prompt stored as a (not current) resource version; null when skipped.
   */
  async function makeChild(
    parent: Candidate,
    style: CritiqueStyle,
    low: Example[],
    high: Example[],
    round: number,
    skips: ApoSkip[],
  ): Promise<{ version: number; prompt: string; critique: string } | null> {
    if (cancelled) throw new CancelledError('the run was cancelled');
    let critique: string;
    try {
      critique = await llm.ask(
        `critique of ${parent.id} (${style})`,
        config.critiqueModel,
        critiqueMessages(parent.prompt, low, high, style),
        parseCritique,
      );
    } catch (error) {
      if (error instanceof BudgetExhaustedError) throw error;
      skips.push({ round, parentId: parent.id, stage: 'critique', error: errorMessage(error) });
      context.progress(`round ${round}: skipped a branch of ${parent.id}: critique failed: ${errorMessage(error)}`);
      return null;
    }
    let prompt: string;
    try {
      prompt = await llm.ask(
        `edit of ${parent.id} (${style})`,
        config.editModel,
        editMessages(parent.prompt, critique),
        (answer) => parseEdit(answer, parent.prompt),
      );
    } catch (error) {
      if (error instanceof BudgetExhaustedError) throw error;
      skips.push({ round, parentId: parent.id, stage: 'edit', error: errorMessage(error) });
      context.progress(`round ${round}: skipped a branch of ${parent.id}: edit failed: ${errorMessage(error)}`);
      return null;
    }
    const resource = await store.putPrompt(config.resource, prompt, { current: false, runId });
    return { version: resource.version, prompt, critique };
  }
}
