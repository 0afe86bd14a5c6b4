/**
 * A two-role world that learns (test/fixtures/agents/two-role-learner.mjs: the planner must write digits, the solver
 * letters only), trained with `lightning train` through a real daemon on a tiny Qwen2 built from its config, in worker
 * mode with a validation split. Shared by the learning test (test/integration/trainingPoliciesLearning.test.ts) and the
 * bench's separate-vs-shared adapter rows (test/bench/policies.ts), so both train the same world on the same budget.
 */
import fs from 'node:fs';
import path from 'node:path';
import {
  ListRolloutsParams,
  metricPoints,
  type MetricSeries,
  type Reward,
  type TrainingRunSummary,
} from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { episodeReward } from '../../trainer-daemon/lightningrl/credit';
import { Store } from '../../trainer-daemon/store/store';
import { REPO_ROOT, runCli, startDaemon } from './daemon';
import { saveTinyQwen } from './tinyHf';

export const TWO_ROLE_LEARNER = path.join(REPO_ROOT, 'test', 'fixtures', 'agents', 'two-role-learner.mjs');

/**
 * Initialized with std 0.2 rather than Qwen2's 0.02 (helpers/tinyHf): at 0.02 the frozen output layer cannot make any
 * reply likely, so nothing learns.
 */
const INITIALIZER_RANGE = 0.2;

/** The first 4 train, the other 8 are held out for validation. */
const QUESTIONS = [
  ...['3 plus 4', '2 times 5', '9 minus 1', '8 plus 8'],
  ...['6 minus 1', '7 times 3', '5 plus 2', '4 minus 4', '9 plus 3', '6 times 2', '8 minus 5', '1 plus 7'],
];

/** The two roles as separate policies, each learning from its own reward dimension. */
export const SEPARATE_ADAPTERS = [
  ...['--policy', 'planner=^planner$', '--policy', 'solver=^solver'],
  ...['--policy-reward', 'planner=digits', '--policy-reward', 'solver=letters'],
];
/** Both roles' calls answered and trained by one adapter, learning from the episode reward (the two roles' mean). */
export const SHARED_ADAPTER = ['--policy', 'shared=^(planner|solver)'];

export interface TwoRoleBudget {
  readonly iterations: number;
  readonly samples: number;
  readonly lr: number;
  readonly evalEvery: number;
  readonly seed: number;
}

/**
 * The budget the learning test and the bench train on: 30 iterations × 4 tasks × 4 samples, validated 7 times on 8
 * held-out tasks. At lr 0.03 a role now and then unlearned late in the run (the planner 0.63 → 0.17 in CI, its
 * sampled reward falling too); at 0.02 and with 8 held-out tasks rather than 4, 12 runs of seed 0 all ended at 0.50
 * or more.
 */
export const TWO_ROLE_BUDGET: TwoRoleBudget = { iterations: 30, samples: 4, lr: 0.02, evalEvery: 5, seed: 0 };

export interface TwoRoleResult {
  readonly run: TrainingRunSummary;
  /** The run's recorded metric points. */
  readonly metrics: MetricSeries;
  /** Validation points (step: iterations done; 0 before training) of each role's own dimension and the episode's. */
  readonly val: { readonly digits: number[]; readonly letters: number[]; readonly reward: number[] };
  readonly steps: number[];
  readonly seconds: number;
  readonly output: string;
}

/**
 * Trains the two-role world in `cwd` with `policyFlags` (SEPARATE_ADAPTERS or SHARED_ADAPTER) on `budget`: 4 train
 * tasks × `samples` rollouts per iteration, 8 validation tasks validated greedily before training and every
 * `evalEvery` iterations. Each role's validation reward is read from the validation rollouts' own reward dimensions,
 * so a shared adapter's run is measured on the same two numbers as the separate adapters'.
 */
export async function trainTwoRoleWorld(
  cwd: string,
  python: string,
  policyFlags: readonly string[],
  budget: TwoRoleBudget,
): Promise<TwoRoleResult> {
  const model = path.join(cwd, 'tiny-qwen2');
  saveTinyQwen(python, model, { seed: budget.seed, initializerRange: INITIALIZER_RANGE });
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  const daemon = await startDaemon(storeFile, [], { OPENAI_BASE_URL: '', OPENAI_API_KEY: '' });
  let trained: { code: number; stdout: string; stderr: string; seconds: number };
  try {
    const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
    try {
      await client.request('importDataset', {
        name: 'roles',
        tasks: QUESTIONS.map((question, i) => ({
          id: `q${i}`,
          split: i < 4 ? 'train' : 'val',
          input: { question },
          expected: null,
        })),
      });
    } finally {
      client.dispose();
    }
    const started = performance.now();
    const result = await runCli(
      [
        'train',
        ...['--model', model, '--dataset', 'roles', ...policyFlags],
        ...['--iterations', String(budget.iterations), '--samples', String(budget.samples)],
        ...['--lr', String(budget.lr), '--eval-every', String(budget.evalEvery), '--seed', String(budget.seed)],
        ...['--agent-mode', 'worker', '--workers', '1', '--per-worker', String(4 * budget.samples)],
        ...['--keep-checkpoints', '1', '--device', 'cpu', '--python', python, '--store', storeFile],
        ...['--', process.execPath, TWO_ROLE_LEARNER],
      ],
      { cwd },
    );
    trained = { ...result, seconds: (performance.now() - started) / 1000 };
  } finally {
    await daemon.stop();
  }
  const output = `${trained.stdout}\n${trained.stderr}`;
  if (trained.code !== 0) throw new Error(`lightning train exited ${trained.code}:\n${output}`);
  const store = Store.open(storeFile);
  try {
    const run = store.listTrainingRuns(10)[0]!;
    const metrics = store.getTrainingRun(run.id).metrics;
    const points = metricPoints(metrics, 'val/reward');
    const batches = valBatches(store);
    if (batches.length !== points.length)
      throw new Error(`${batches.length} validation batches for ${points.length} val/reward points:\n${output}`);
    return {
      run,
      metrics,
      steps: points.map((p) => p.step),
      val: {
        digits: batches.map((b) => meanOf(b, 'digits')),
        letters: batches.map((b) => meanOf(b, 'letters')),
        reward: points.map((p) => p.value),
      },
      seconds: trained.seconds,
      output,
    };
  } finally {
    store.close();
  }
}

/** The validation rollouts' rewards, a list per batch in the order the batches ran. */
function valBatches(store: Store): Reward[][][] {
  const rollouts = store.listRollouts(ListRolloutsParams.parse({ mode: 'val', limit: 500, order: 'oldest' })).items;
  const batches = new Map<string, Reward[][]>();
  for (const rollout of [...rollouts].sort((a, b) => a.createdAt - b.createdAt)) {
    const key = rollout.batchId ?? rollout.id;
    batches.set(key, [...(batches.get(key) ?? []), store.listRewards(rollout.id)]);
  }
  return [...batches.values()];
}

/** A batch's mean of one reward dimension (a rollout without it counts 0, as training fills it). */
function meanOf(batch: readonly Reward[][], name: string): number {
  const policy = { name, missing: 'fill' as const, fillValue: 0 };
  return batch.reduce((sum, rewards) => sum + (episodeReward(rewards, policy) ?? 0), 0) / batch.length;
}
