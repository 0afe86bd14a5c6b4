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
  const run = new ApoRun(runId, config, plan, context);
  context.signal.addEventListener('abort', run.cancel);
  try {
    if (context.signal.aborted) run.cancel();
    return await run.run();
  } finally {
    context.signal.removeEventListener('abort', run.cancel);
  }
}

/** One APO run's state as its rounds go: the seed, the best so far, what was spent and skipped. Run once. */
class ApoRun {
  private readonly evaluator: Evaluator;
  private readonly llm: OptimizerLlm;
  private readonly random: SeededRandom;
  private readonly seed: Candidate;
  private best: Candidate;
  private readonly skipped: ApoSkip[] = [];
  private rollouts = 0;
  private roundsCompleted = 0;
  private made = 0;
  private cancelled = false;

  constructor(
    private readonly runId: string,
    private readonly config: ApoConfig,
    private readonly plan: ApoPlan,
    private readonly context: ApoContext,
  ) {
    const seedResource = context.store.resource(config.resource);
    this.evaluator = new Evaluator(runId, config, context);
    this.llm = new OptimizerLlm({
      client: context.call,
      runId,
      upstream: config.upstream,
      apiKey: context.env.OPENAI_API_KEY || undefined,
      temperature: config.temperature,
      seed: config.seed,
      budgetCalls: config.budgetCalls,
      attempts: config.callAttempts,
      maxAnswerBytes: context.maxAnswerBytes,
    });
    this.random = new SeededRandom(config.seed);
    this.seed = {
      id: 'seed',
      parentId: null,
      version: seedResource.version,
      prompt: seedResource.value as string,
      batchScore: null,
      valScore: null,
    };
    this.best = this.seed;
  }

  readonly cancel = (): void => {
    this.cancelled = true;
    this.evaluator.cancel();
  };

  /** The rounds until done or stopped, then the result (once: the counters are this run's). */
  async run(): Promise<ApoResult> {
    const { seed, llm } = this;
    let stopReason: ApoResult['stopReason'] = 'completed';
    try {
      await this.scoreSeed();
      let beam: Candidate[] = [seed];
      for (let round = 1; round <= this.config.rounds; round += 1) beam = await this.round(round, beam);
    } catch (error) {
      if (error instanceof BudgetExhaustedError) stopReason = 'budget-calls';
      else if (error instanceof RolloutBudgetError) stopReason = 'budget-rollouts';
      else if (error instanceof CancelledError) stopReason = 'cancelled';
      else throw error;
      if (seed.valScore === null) throw error;
      this.context.progress(`stopped: ${errorMessage(error)}`);
    }
    return ApoResult.parse({
      runId: this.runId,
      resource: this.config.resource,
      seed: { candidateId: seed.id, version: seed.version, prompt: seed.prompt, valScore: seed.valScore },
      best: {
        candidateId: this.best.id,
        version: this.best.version,
        prompt: this.best.prompt,
        valScore: this.best.valScore,
      },
      diff: lineDiff(seed.prompt, this.best.prompt),
      roundsCompleted: this.roundsCompleted,
      llmCalls: llm.callsUsed,
      rollouts: this.rollouts,
      stopReason,
      skipped: this.skipped,
    });
  }

  /** Round 0: the seed, recorded and scored on the whole validation set. */
  private async scoreSeed(): Promise<void> {
    const { seed, runId } = this;
    await this.context.store.recordApoRound({
      runId,
      round: 0,
      candidates: [{ id: seed.id, parentId: null, version: seed.version, critique: null, critiqueStyle: null }],
    });
    await this.scoreFully(seed, 0);
    seed.batchScore = seed.valScore;
    await this.context.store.recordApoRound({
      runId,
      round: 0,
      metrics: {
        best_val_score: seed.valScore!,
        leader_val_score: seed.valScore!,
        rollouts: this.rollouts,
        llm_calls: 0,
      },
    });
    this.context.progress(
      `round 0: seed scores ${seed.valScore!.toFixed(3)} on ${this.plan.val.length} validation tasks`,
    );
  }

  /** One round: each parent's training batch, critiques and edits into children, all scored together; the new beam. */
  private async round(round: number, beam: readonly Candidate[]): Promise<Candidate[]> {
    const { runId, config, random, llm, evaluator } = this;
    const store = this.context.store;
    const children: Candidate[] = [];
    const recorded: ApoSkip[] = [];
    for (const parent of beam) {
      const batch = await this.evaluate(parent, random.sample(this.plan.train, config.gradientBatch), 'train', round);
      const { low, high } = pickExamples(batch, random);
      for (let branch = 0; branch < config.branch; branch += 1) {
        const style: CritiqueStyle = CRITIQUE_STYLES[branch % CRITIQUE_STYLES.length]!;
        const child = await this.makeChild(parent, style, low, high, round, recorded);
        if (!child) continue;
        this.made += 1;
        const candidate: Candidate = {
          id: `r${round}-${this.made}`,
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
    this.skipped.push(...recorded);
    // Parents and children on one common batch, so their scores compare.
    const pool = [...beam, ...children];
    const valBatch = random.sample(this.plan.val, config.valBatch);
    if (this.rollouts + pool.length * valBatch.length > config.budgetRollouts)
      throw new RolloutBudgetError(`the budget of ${config.budgetRollouts} rollouts is spent`);
    for (const candidate of pool)
      candidate.batchScore = mean((await this.evaluate(candidate, valBatch, 'val', round)).map((r) => r.reward));
    await store.recordApoRound({
      runId,
      round,
      scores: pool.map((c) => ({ id: c.id, batchScore: c.batchScore!, rollouts: valBatch.length })),
    });
    // Stable sort: ties keep the pool's order (parents first, then children in the order made).
    const next = [...pool].sort((a, b) => b.batchScore! - a.batchScore!).slice(0, config.beam);
    const leader = next[0]!;
    if (leader.valScore === null) await this.scoreFully(leader, round);
    if (leader.valScore! > this.best.valScore!) this.best = leader;
    const best = this.best;
    this.roundsCompleted = round;
    await store.recordApoRound({
      runId,
      round,
      metrics: {
        best_val_score: best.valScore!,
        leader_val_score: leader.valScore!,
        mean_batch_score: mean(pool.map((c) => c.batchScore!)),
        candidates: children.length,
        skipped: recorded.length,
        rollouts: this.rollouts,
        llm_calls: llm.callsUsed,
        // Agent calls that were not whole answers, so no critique read them (so far in the run).
        'skipped_calls/upstream_errors': evaluator.skippedCalls.upstreamError,
        'skipped_calls/cancelled': evaluator.skippedCalls.cancelled,
        'skipped_calls/truncated': evaluator.skippedCalls.truncated,
      },
    });
    const leftOut = describeSkipped(evaluator.skippedCalls);
    this.context.progress(
      `round ${round}: ${children.length} new candidate(s)${recorded.length ? `, ${recorded.length} branch(es) skipped` : ''}; leader ${leader.id} ${leader.valScore!.toFixed(3)}, best ${best.id} ${best.valScore!.toFixed(3)} (seed ${this.seed.valScore!.toFixed(3)}); ${llm.callsUsed} LLM calls, ${this.rollouts} rollouts${leftOut ? `; agent calls ${leftOut} (not whole answers)` : ''}`,
    );
    return next;
  }

  /** `candidate`'s rollouts on `tasks`, within the rollout budget. */
  private async evaluate(
    candidate: Candidate,
    tasks: readonly EvalTask[],
    mode: Extract<RolloutMode, 'train' | 'val'>,
    round: number,
  ): Promise<ScoredRollout[]> {
    const { budgetRollouts } = this.config;
    if (this.rollouts + tasks.length > budgetRollouts)
      throw new RolloutBudgetError(`the budget of ${budgetRollouts} rollouts is spent`);
    this.rollouts += tasks.length;
    return this.evaluator.run(
      tasks,
      candidate.version,
      mode,
      `apo ${this.runId} round ${round} ${candidate.id} ${mode}`,
    );
  }

  /** `candidate` scored on the whole validation set, and the score recorded. */
  private async scoreFully(candidate: Candidate, round: number): Promise<void> {
    const { val } = this.plan;
    candidate.valScore = mean((await this.evaluate(candidate, val, 'val', round)).map((r) => r.reward));
    await this.context.store.recordApoRound({
      runId: this.runId,
      round,
      scores: [{ id: candidate.id, valScore: candidate.valScore, rollouts: val.length }],
    });
  }

  /**
   * One branch: critique, then edit, then the new prompt stored as a (not current) resource version; null when skipped.
   */
  private async makeChild(
    parent: Candidate,
    style: CritiqueStyle,
    low: Example[],
    high: Example[],
    round: number,
    skips: ApoSkip[],
  ): Promise<{ version: number; prompt: string; critique: string } | null> {
    const { config, llm, context } = this;
    if (this.cancelled) throw new CancelledError('the run was cancelled');
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
    const resource = await context.store.putPrompt(config.resource, prompt, { current: false, runId: this.runId });
    return { version: resource.version, prompt, critique };
  }
}
