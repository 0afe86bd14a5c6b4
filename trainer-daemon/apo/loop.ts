/**
 * Automatic Prompt Optimization (Agent Lightning's APO, after ProTeGi's beam search over textual
 * gradients). The seed prompt is scored on the validation set; each round, every prompt in the
 * beam runs a training batch, its low- and high-reward rollouts go to the critique model (one
 * critique style per branch), the edit model turns each critique into a new prompt (placeholders
 * kept), and parents and children are scored on a common validation batch; the top `beam` stay.
 * The round's leader is scored on the full validation set and the best ever is kept. Budgets stop
 * the run cleanly; a failing critique or edit skips that branch and is reported.
 *
 * Everything goes through the daemon's RPC, so the editor sees the run, its leaderboard and a
 * notification per round, and can cancel it.
 */
import {
  ApoResult,
  CRITIQUE_STYLES,
  describeSkipped,
  type ApoConfig,
  type ApoSkip,
  type CritiqueStyle,
  type RolloutMode,
  type Task,
} from '../protocol';
import { errorMessage, InvalidInputError, LightningError } from '../protocol/errors';
import type { RpcClient } from '../protocol/connection';
import { lineDiff } from './diff';
import type { RolloutScoring } from '../runner/pool';
import { CancelledError, Evaluator, type EvalTask, type ScoredRollout } from './evaluate';
import { BudgetExhaustedError, OptimizerLlm } from './llm';
import { critiqueMessages, editMessages, parseCritique, parseEdit, type Example } from './prompts';
import { SeededRandom } from './random';

export interface ApoRunOptions {
  readonly client: RpcClient;
  readonly config: ApoConfig;
  /** The agent command. */
  readonly argv: readonly string[];
  /** Upstream of agent and optimizer calls: the user's OPENAI_BASE_URL, or null for the daemon's. */
  readonly upstream: string | null;
  readonly apiKey: string | undefined;
  readonly env: NodeJS.ProcessEnv;
  readonly logDir: string;
  /** How each agent rollout is scored (apoScoring). */
  readonly scoring: RolloutScoring | undefined;
  /** Aborting it cancels the run (Ctrl-C); so does `trainingRuns/cancel` from any client. */
  readonly signal?: AbortSignal;
}

export interface ApoIo {
  /** The run exists (its id is what `trainingRuns/get` and `trainingRuns/cancel` take). */
  started(runId: string): void;
  /** One line of progress, for people. */
  progress(line: string): void;
}

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

async function loadTasks(client: RpcClient, dataset: string, split: Task['split'], flag: string): Promise<EvalTask[]> {
  const all = (await client.request('listTasks', { dataset })).items;
  const chosen = all.some((task) => task.split === split)
    ? all.filter((task) => task.split === split)
    : split === 'train' || flag === '--val'
      ? all
      : [];
  if (chosen.length === 0)
    throw new InvalidInputError(
      `${flag}: dataset ${dataset} has no ${split} tasks; give validation tasks with --val DATASET`,
    );
  return chosen.map((task) => ({ id: task.id, datasetId: task.datasetId, input: task.input, expected: task.expected }));
}

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

export async function runApo(options: ApoRunOptions, io: ApoIo): Promise<ApoResult> {
  const { client, config } = options;
  const seedResource = (await client.request('getResource', { name: config.resource })).resource;
  if (seedResource.kind !== 'prompt_template' || typeof seedResource.value !== 'string') {
    throw new InvalidInputError(
      `--resource: ${config.resource} is a ${seedResource.kind} resource; APO optimizes prompt templates`,
    );
  }
  const train = await loadTasks(client, config.dataset, 'train', '--dataset');
  const val = config.valDataset
    ? await loadTasks(client, config.valDataset, 'val', '--val')
    : await loadTasks(client, config.dataset, 'val', '--dataset');
  if (config.budgetRollouts < val.length)
    throw new InvalidInputError(
      `--budget-rollouts: ${config.budgetRollouts} cannot even score the seed on the ${val.length} validation tasks`,
    );

  const run = await client.request('createTrainingRun', { algorithm: 'apo', config });
  await client.request('updateTrainingRun', { id: run.id, status: 'running' });
  io.started(run.id);
  const evaluator = new Evaluator({
    client,
    runId: run.id,
    config,
    argv: options.argv,
    upstream: options.upstream,
    env: options.env,
    logDir: options.logDir,
    scoring: options.scoring,
  });
  const llm = new OptimizerLlm({
    client,
    runId: run.id,
    upstream: options.upstream,
    apiKey: options.apiKey,
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
  options.signal?.addEventListener('abort', cancel);
  const subscription = client.onNotification('trainingRunChanged', (change) => {
    if (change.run.id === run.id && change.run.cancelRequested) cancel();
  });

  const random = new SeededRandom(config.seed);
  const skipped: ApoSkip[] = [];
  let rollouts = 0;
  let roundsCompleted = 0;
  let stopReason: ApoResult['stopReason'] = 'completed';
  const seed: Candidate = {
    id: 'seed',
    parentId: null,
    version: seedResource.version,
    prompt: seedResource.value,
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
    return evaluator.run(tasks, candidate.version, mode, `apo ${run.id} round ${round} ${candidate.id} ${mode}`);
  };
  const scoreFully = async (candidate: Candidate, round: number): Promise<void> => {
    candidate.valScore = mean((await evaluate(candidate, val, 'val', round)).map((r) => r.reward));
    await client.request('recordApoRound', {
      runId: run.id,
      round,
      scores: [{ id: candidate.id, valScore: candidate.valScore, rollouts: val.length }],
    });
  };

  try {
    try {
      await client.request('recordApoRound', {
        runId: run.id,
        round: 0,
        candidates: [{ id: seed.id, parentId: null, version: seed.version, critique: null, critiqueStyle: null }],
      });
      await scoreFully(seed, 0);
      seed.batchScore = seed.valScore;
      await client.request('recordApoRound', {
        runId: run.id,
        round: 0,
        metrics: { best_val_score: seed.valScore!, leader_val_score: seed.valScore!, rollouts, llm_calls: 0 },
      });
      io.progress(`round 0: seed scores ${seed.valScore!.toFixed(3)} on ${val.length} validation tasks`);
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
            await client.request('recordApoRound', {
              runId: run.id,
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
        await client.request('recordApoRound', {
          runId: run.id,
          round,
          scores: pool.map((c) => ({ id: c.id, batchScore: c.batchScore!, rollouts: valBatch.length })),
        });
        // Stable sort: ties keep the pool's order (parents first, then children in the order made).
        beam = [...pool].sort((a, b) => b.batchScore! - a.batchScore!).slice(0, config.beam);
        const leader = beam[0]!;
        if (leader.valScore === null) await scoreFully(leader, round);
        if (leader.valScore! > best.valScore!) best = leader;
        roundsCompleted = round;
        await client.request('recordApoRound', {
          runId: run.id,
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
        io.progress(
          `round ${round}: ${children.length} new candidate(s)${recorded.length ? `, ${recorded.length} branch(es) skipped` : ''}; leader ${leader.id} ${leader.valScore!.toFixed(3)}, best ${best.id} ${best.valScore!.toFixed(3)} (seed ${seed.valScore!.toFixed(3)}); ${llm.callsUsed} LLM calls, ${rollouts} rollouts${leftOut ? `; agent calls ${leftOut} (not whole answers)` : ''}`,
        );
      }
    } catch (error) {
      if (error instanceof BudgetExhaustedError) stopReason = 'budget-calls';
      else if (error instanceof RolloutBudgetError) stopReason = 'budget-rollouts';
      else if (error instanceof CancelledError) stopReason = 'cancelled';
      else throw error;
      if (seed.valScore === null) throw error;
      io.progress(`stopped: ${errorMessage(error)}`);
    }
    const result = ApoResult.parse({
      runId: run.id,
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
    await client.request('updateTrainingRun', {
      id: run.id,
      status: stopReason === 'cancelled' ? 'cancelled' : 'succeeded',
      result,
    });
    return result;
  } catch (error) {
    await client
      .request('updateTrainingRun', {
        id: run.id,
        status: error instanceof CancelledError ? 'cancelled' : 'failed',
        error: errorMessage(error),
      })
      .catch(() => undefined);
    throw error;
  } finally {
    subscription.dispose();
    options.signal?.removeEventListener('abort', cancel);
  }

  /** One branch: critique, then edit, then the new prompt stored as a (not current) resource version; null when skipped. */
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
      io.progress(`round ${round}: skipped a branch of ${parent.id}: critique failed: ${errorMessage(error)}`);
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
      io.progress(`round ${round}: skipped a branch of ${parent.id}: edit failed: ${errorMessage(error)}`);
      return null;
    }
    const resource = await client.request('putResource', {
      name: config.resource,
      kind: 'prompt_template',
      value: prompt,
      current: false,
      runId: run.id,
    });
    return { version: resource.version, prompt, critique };
  }
}
