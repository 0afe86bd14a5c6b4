/**
 * Checkpoint retention: which checkpoints a run keeps (the best by validation reward, else by the reward of the
 * rollouts each served; the last N; what is in use) and where optimizer state stays (the newest only); applied by
 * TrainingService to a real store and real folders; `checkpoints/delete` and what it refuses; the flag's parsing.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';
import { checkpointsOf, parseKeepCheckpoints, type Checkpoint } from '../../trainer-daemon/protocol';
import { ConflictError } from '../../trainer-daemon/protocol/errors';
import { Store } from '../../trainer-daemon/store/store';
import { planRetention } from '../../trainer-daemon/training/retention';
import { TrainingService } from '../../trainer-daemon/training/service';
import { grpoConfigFromFlags } from '../../trainer-daemon/cli/commands/trainGrpo';
import { tempDir } from '../helpers/tmp';
import { testGrpoConfig } from '../helpers/trainingConfigs';

const at = (step: number): Checkpoint => ({
  id: `c${step}`,
  runId: 'r',
  step,
  path: `/x/${step}`,
  metrics: {},
  createdAt: step,
});
const point = (step: number, name: string, value: number) => ({ step, name, value });
const steps = (list: readonly Checkpoint[]): number[] => list.map((c) => c.step);

describe('checkpoint retention: the plan', () => {
  const ten = Array.from({ length: 10 }, (_, i) => at(i + 1));

  it('keeps the best by validation reward and the last N; optimizer state only in the newest', () => {
    const metrics = [point(5, 'val/reward', 0.9), point(10, 'val/reward', 0.7), point(4, 'reward/mean', 1)];
    const plan = planRetention(ten, metrics, 3);
    assert.deepEqual(steps(plan.remove), [1, 2, 3, 4, 6, 7]);
    assert.deepEqual(plan.best && [plan.best.checkpoint.step, plan.best.by, plan.best.score], [5, 'val/reward', 0.9]);
    assert.deepEqual(steps(plan.dropOptimizer), [5, 8, 9]);
  });

  it('an SFT run: the best is the one with the lowest validation loss', () => {
    const metrics = [
      point(0, 'val/loss', 0.1),
      point(3, 'val/loss', 0.4),
      point(4, 'val/loss', 0.2),
      point(8, 'val/loss', 0.5),
      point(4, 'loss', 9),
    ];
    const plan = planRetention(ten, metrics, 2);
    assert.deepEqual(plan.best && [plan.best.checkpoint.step, plan.best.by, plan.best.score], [4, 'val/loss', -0.2]);
    assert.deepEqual(steps(plan.remove), [1, 2, 3, 5, 6, 7, 8]);
  });

  it('without validation, the best is the one whose rollouts (the next step’s) earned the most reward', () => {
    // reward/mean at step s is the reward of rollouts served by checkpoint s − 1.
    const plan = planRetention(
      ten,
      [point(3, 'reward/mean', 0.8), point(4, 'reward/mean', 0.2), point(9, 'reward/mean', 0.8)],
      2,
    );
    assert.deepEqual(
      plan.best && [plan.best.checkpoint.step, plan.best.by],
      [8, 'reward/mean'],
      'a tie goes to the later checkpoint',
    );
    assert.deepEqual(steps(plan.remove), [1, 2, 3, 4, 5, 6, 7]);
  });

  it('`all` deletes nothing (but still drops old optimizer state); what is in use is kept; nothing scored keeps the last N', () => {
    assert.deepEqual(planRetention(ten, [], 'all').remove, []);
    assert.equal(planRetention(ten, [], 'all').dropOptimizer.length, 9);
    const plan = planRetention(ten, [], 1, new Set(['c2']));
    assert.equal(plan.best, undefined);
    assert.deepEqual(steps(plan.remove), [1, 3, 4, 5, 6, 7, 8, 9]);
    assert.deepEqual(planRetention([], [], 3), { remove: [], dropOptimizer: [], best: undefined });
  });

  it('--keep-checkpoints and the setting: all or a whole number ≥ 1, else an error naming both forms', () => {
    assert.equal(parseKeepCheckpoints('all'), 'all');
    assert.equal(parseKeepCheckpoints(' 5 '), 5);
    for (const bad of ['0', '-1', '2.5', 'most', ''])
      assert.match((parseKeepCheckpoints(bad) as { error: string }).error, /"all" or a whole number ≥ 1/);
    const flags = { algorithm: 'grpo' as const, model: 'tiny', dataset: 'd', store: 'store.db' };
    assert.equal(grpoConfigFromFlags(flags, ['node', 'a.js'], '/w').keepCheckpoints, 3);
    assert.equal(
      grpoConfigFromFlags({ ...flags, keepCheckpoints: 'all' }, ['node', 'a.js'], '/w').keepCheckpoints,
      'all',
    );
    assert.throws(
      () => grpoConfigFromFlags({ ...flags, keepCheckpoints: 'none' }, ['node', 'a.js'], '/w'),
      /--keep-checkpoints must be "all" or a whole number/,
    );
    // A run recorded before retention existed reads back with the default.
    const { keepCheckpoints, ...old } = testGrpoConfig();
    assert.equal(keepCheckpoints, 3);
    assert.equal(testGrpoConfig(old).keepCheckpoints, 3);
  });
});

/** A checkpoint folder as the worker writes it (config.json, weights, optimizer state), sizes in bytes. */
function folder(dir: string, weights: number, optimizer: number): string {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'config.json'), '{}');
  fs.writeFileSync(path.join(dir, 'trainable.pt'), Buffer.alloc(weights));
  fs.writeFileSync(path.join(dir, 'optimizer.pt'), Buffer.alloc(optimizer));
  return dir;
}

describe('checkpoint retention: applied to a store and its folders', () => {
  function setUp(t: Parameters<typeof tempDir>[0]) {
    const dir = tempDir(t);
    const store = Store.open(path.join(dir, 'store.db'));
    t.after(() => store.close());
    const training = new TrainingService(store);
    const run = store.recordTrainingRun({ algorithm: 'grpo', config: testGrpoConfig() });
    return { dir, store, training, run };
  }

  it('deletes what the plan does not keep, records and folders, and optimizer state but the newest; sizes are measured', async (t) => {
    const { training, run, store } = setUp(t);
    for (let step = 1; step <= 6; step += 1) {
      const dir = folder(training.checkpointDir(run.id, step), 1000, 2000);
      await training.recordStep(run.id, step, step === 2 ? { 'val/reward': 1 } : {}, { dir, metrics: {} });
    }
    const before = training.measuredCheckpoints(run.id);
    assert.deepEqual(
      before.map((c) => [c.bytes, c.optimizerState]),
      Array.from({ length: 6 }, () => [3002, true]),
    );
    const plan = await training.applyRetention(run.id, 2);
    assert.deepEqual(steps(plan.remove), [1, 3, 4]);
    const after = training.measuredCheckpoints(run.id);
    assert.deepEqual(
      after.map((c) => [c.step, c.bytes, c.optimizerState]),
      [
        [2, 1002, false],
        [5, 1002, false],
        [6, 3002, true],
      ],
    );
    for (const step of [1, 3, 4]) assert.equal(fs.existsSync(training.checkpointDir(run.id, step)), false);
    assert.deepEqual(steps(checkpointsOf(store.getTrainingRun(run.id))), [2, 5, 6]);
  });

  it('checkpoints/delete: frees the folder; refuses the served one, one being exported, and the newest of a running run', async (t) => {
    const { training, run, store } = setUp(t);
    for (let step = 1; step <= 3; step += 1) {
      await training.recordStep(
        run.id,
        step,
        {},
        { dir: folder(training.checkpointDir(run.id, step), 10, 20), metrics: {} },
      );
    }
    const [one, two, three] = training.checkpoints(run.id) as [Checkpoint, Checkpoint, Checkpoint];
    training.protectServed(() => two.id);
    await assert.rejects(
      training.deleteCheckpoint(two.id),
      (e: Error) => e instanceof ConflictError && /being served .*Stop Using Checkpoint/.test(e.message),
    );
    let release!: () => void;
    const exporting = training.using(one.id, () => new Promise<void>((resolve) => (release = resolve)));
    await assert.rejects(training.deleteCheckpoint(one.id), /being exported/);
    assert.deepEqual(
      steps((await training.applyRetention(run.id, 1)).remove),
      [],
      'in use: retention leaves both (their optimizer state goes)',
    );
    release();
    await exporting;
    store.setTrainingRunStatus(run.id, 'running');
    await assert.rejects(training.deleteCheckpoint(three.id), /newest of run .* running: the run continues from it/);
    assert.deepEqual(await training.deleteCheckpoint(one.id), { deleted: one.id, bytes: 12 });
    assert.equal(fs.existsSync(one.path), false);
    assert.deepEqual(steps(training.checkpoints(run.id)), [2, 3]);
    await assert.rejects(training.deleteCheckpoint(one.id), /does not exist/);
  });
});
