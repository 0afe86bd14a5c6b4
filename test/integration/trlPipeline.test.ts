// needs: venv
/**
 * GRPO's pipeline against TRL's GRPOTrainer, from rewards to gradients: three tasks × 4 rollouts with prompts of
 * different lengths (one task whose rewards are all equal: advantage 0), through the daemon's own code —
 * LightningRL's advantages with GRPO's options (grpoAdvantageOptions), the rows it keeps (toWorkerTransitions,
 * the config's zeroAdvantage) and the worker request it builds (workerTrainParams) — then the worker's update and
 * TRL's own advantage statements and `_compute_loss` on the same rows (trainer-daemon/python/tests/trl_pipeline.py).
 * With the defaults they agree: advantages within 1e-6, loss and gradients within 1e-5 (dr_grpo also with a given
 * maxResponseLength, TRL's max_completion_length); with `zeroAdvantage: drop` the rows and the normaliser differ
 * from TRL's, with `std: population` the advantages are larger by sqrt(n / (n − 1)), and the comparison says so.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import type { GrpoConfigInput, Transition } from '../../trainer-daemon/protocol';
import { rolloutAdvantages } from '../../trainer-daemon/lightningrl/credit';
import { grpoAdvantageOptions, toWorkerTransitions, workerTrainParams } from '../../trainer-daemon/training/grpoUpdate';
import { REPO_ROOT } from '../helpers/daemon';
import { testGrpoConfig } from '../helpers/trainingConfigs';

const TESTS = path.join(REPO_ROOT, 'trainer-daemon', 'python', 'tests');
const GROUPS = [
  { task: 'short', prompt: 3, rewards: [1, 0, 0.5, 1] },
  { task: 'flat', prompt: 7, rewards: [0.2, 0.2, 0.2, 0.2] },
  { task: 'long', prompt: 11, rewards: [0, 3, 1, 2] },
];

interface Row {
  promptIds: number[];
  responseIds: number[];
  mask: Array<0 | 1>;
}
interface Compared {
  advantages: { trl: number[]; ours: Array<number | null> };
  rows: { trl: number; ours: number };
  loss: { trl: number; ours: number };
  kl: number;
  gradients: { largestDifference: number; largest: number };
  useBiasCorrectionKlDefault: boolean;
}

/** Token ids below the tiny Qwen2's vocabulary and above its special tokens, different for every rollout. */
function rows(): Row[] {
  let next = 10;
  const ids = (n: number): number[] => Array.from({ length: n }, () => (next = (next * 7 + 3) % 180) + 10);
  return GROUPS.flatMap((group, g) =>
    group.rewards.map((_, i) => {
      const responseIds = ids(2 + (((g * 4 + i) * 5) % 8));
      // An environment token inside some responses (a tool result): no loss.
      const mask = responseIds.map((_, k) => (i % 2 === 1 && k === 1 ? 0 : 1)) as Array<0 | 1>;
      return { promptIds: ids(group.prompt), responseIds, mask };
    }),
  );
}

function transition(row: Row, rolloutId: string, taskId: string, advantage: number): Transition {
  return {
    rolloutId,
    taskId,
    step: 0,
    spanId: rolloutId,
    spanIds: [rolloutId],
    agentName: null,
    model: null,
    api: 'chat.completions',
    prompt: { messages: null, input: null, tools: null },
    response: { message: null, output: null, text: null },
    promptTokenIds: row.promptIds,
    responseTokenIds: row.responseIds,
    needsTokenization: false,
    logprobs: null,
    lossMask: row.mask,
    episodeReward: 0,
    reward: 0,
    advantage,
  };
}

/** The worker request the daemon builds from the batch under `extra` over the defaults (klCoef 0.05). */
function request(extra: Partial<GrpoConfigInput>): unknown {
  const config = testGrpoConfig({ klCoef: 0.05, ...extra });
  const batch = rows();
  const rollouts = GROUPS.flatMap((group, g) =>
    group.rewards.map((reward, i) => ({ id: `r${g * 4 + i}`, group: group.task, reward })),
  );
  const { advantages } = rolloutAdvantages(rollouts, grpoAdvantageOptions(config));
  const transitions = rollouts.map((r, i) => transition(batch[i]!, r.id, r.group, advantages!.get(r.id)!));
  // One epoch and micro-batches of 5 (3 of them: TRL's gradient accumulation steps), so both sides take one step.
  return {
    ...workerTrainParams(config, toWorkerTransitions(transitions, config.zeroAdvantage)),
    epochs: 1,
    microBatch: 5,
  };
}

const CASES: Record<string, Partial<GrpoConfigInput>> = {
  defaults: {},
  grpo: { lossType: 'grpo' },
  bnpo: { lossType: 'bnpo' },
  dr_grpo: { lossType: 'dr_grpo' },
  // TRL's max_completion_length, given: both sides divide by it.
  drGrpoCap: { lossType: 'dr_grpo', maxResponseLength: 16 },
  drop: { zeroAdvantage: 'drop' },
  population: { std: 'population' },
  plainKl: { klBiasCorrection: false },
};

/** Every case's request, compared with TRL in one run of the test venv's Python. */
function compared(): Record<string, Compared> {
  const python = process.env.LIGHTNING_TEST_PYTHON;
  assert.ok(
    python,
    'LIGHTNING_TEST_PYTHON is unset: point it at a Python with trainer-daemon/python/requirements-test.txt installed',
  );
  const cases = Object.fromEntries(Object.entries(CASES).map(([name, extra]) => [name, request(extra)]));
  const input = JSON.stringify({ rewards: GROUPS.flatMap((g) => g.rewards), numGenerations: 4, rows: rows(), cases });
  const run = spawnSync(python, [path.join(TESTS, 'trl_pipeline.py')], {
    cwd: TESTS,
    input,
    encoding: 'utf8',
    timeout: 280_000,
    env: {
      ...process.env,
      PYTHONPATH: `${TESTS}${path.delimiter}${path.dirname(TESTS)}`,
      OMP_NUM_THREADS: '1',
      OPENBLAS_NUM_THREADS: '1',
    },
  });
  assert.equal(run.status, 0, run.stderr.slice(-3000));
  return JSON.parse(run.stdout.trim().split('\n').at(-1)!) as Record<string, Compared>;
}

test('GRPO against TRL from rewards to gradients: the defaults agree for every loss type (dr_grpo with a given cap too); drop, the population std and the plain KL term do not', () => {
  const results = compared();
  const result = results.defaults!;
  assert.equal(result.useBiasCorrectionKlDefault, true, "TRL's use_bias_correction_kl default, which ours follows");
  assert.equal(result.rows.ours, result.rows.trl, 'every row is kept, a zero advantage too');
  result.advantages.trl.forEach((trl, i) => {
    assert.ok(
      Math.abs(result.advantages.ours[i]! - trl) < 1e-6,
      `advantage ${i}: ours ${result.advantages.ours[i]}, TRL ${trl}`,
    );
  });
  assert.deepEqual(result.advantages.ours.slice(4, 8), [0, 0, 0, 0], 'the flat group');
  assert.ok(result.kl > 0 && result.gradients.largest > 1e-3, 'a KL term and gradients worth comparing');
  for (const name of ['defaults', 'grpo', 'bnpo', 'dr_grpo', 'drGrpoCap']) {
    const { loss, gradients } = results[name]!;
    assert.ok(Math.abs(loss.ours - loss.trl) < 1e-5, `${name}: loss ours ${loss.ours}, TRL ${loss.trl}`);
    assert.ok(gradients.largestDifference < 1e-5, `${name}: gradients differ by ${gradients.largestDifference}`);
  }
  // Where ours departs from TRL's defaults, the comparison sees it (so it can fail).
  const dropped = results.drop!;
  assert.equal(dropped.rows.ours, dropped.rows.trl - 4, 'drop leaves the flat group out');
  assert.ok(
    Math.abs(dropped.loss.ours - dropped.loss.trl) > 1e-4,
    `a smaller normaliser weighs the other rows more: ${JSON.stringify(dropped.loss)}`,
  );
  assert.ok(results.plainKl!.gradients.largestDifference > 1e-5, "the plain k3 term is not TRL 1.13's default");
  // --std population: each group's advantages are TRL's × sqrt(n / (n − 1)) (4 samples: ≈1.15), the flat group's 0.
  const population = results.population!;
  population.advantages.trl.forEach((trl, i) => {
    const ours = population.advantages.ours[i]!;
    if (Math.abs(trl) < 1e-9) assert.equal(ours, 0);
    else assert.ok(Math.abs(ours / trl - Math.sqrt(4 / 3)) < 1e-3, `advantage ${i}: ours ${ours}, TRL ${trl}`);
  });
});
