import assert from 'node:assert/strict';
import { test } from 'node:test';
import { allRollouts, finished, setUp, storeOf, train } from '../helpers/apo';

test('apo: a branch whose edits keep failing is skipped and reported; budgets stop the run cleanly', async (t) => {
  const { cwd, upstream } = await setUp(t);
  const broken = await train(cwd, upstream, [
    '--rounds',
    '1',
    '--beam',
    '1',
    '--branch',
    '2',
    '--edit-model',
    'editor-broken',
    '--critique-model',
    'critic',
  ]);
  assert.equal(broken.code, 0, broken.stderr);
  const result = finished(broken.stdout);
  assert.equal(result.stopReason, 'completed');
  assert.deepEqual(
    result.skipped.map((s) => [s.round, s.parentId, s.stage]),
    [
      [1, 'seed', 'edit'],
      [1, 'seed', 'edit'],
    ],
  );
  assert.match(result.skipped[0]!.error, /<prompt>/);
  // Two branches: a critique and three edit attempts each.
  assert.equal(result.llmCalls, 8);
  assert.equal(result.best.candidateId, 'seed');
  assert.equal(result.diff, '');
  assert.match(broken.stderr, /skipped a branch of seed: edit failed/);

  const calls = await train(cwd, upstream, [
    '--budget-calls',
    '3',
    '--critique-model',
    'critic',
    '--edit-model',
    'editor',
  ]);
  assert.equal(calls.code, 0, calls.stderr);
  const byCalls = finished(calls.stdout);
  assert.equal(byCalls.stopReason, 'budget-calls');
  assert.equal(byCalls.llmCalls, 3);

  const rollouts = await train(cwd, upstream, ['--budget-rollouts', '8', '--gradient-batch', '4', '--beam', '1']);
  assert.equal(rollouts.code, 0, rollouts.stderr);
  const byRollouts = finished(rollouts.stdout);
  assert.equal(byRollouts.stopReason, 'budget-rollouts');
  assert.equal(byRollouts.rollouts, 8);
  const store = storeOf(cwd);
  t.after(() => store.close());
  const mine = [...allRollouts(store, 'train'), ...allRollouts(store, 'val')].filter((r) =>
    r.label?.includes(byRollouts.runId),
  );
  assert.equal(mine.length, 8);
  assert.equal(store.getTrainingRun(byRollouts.runId).run.status, 'succeeded');
});
