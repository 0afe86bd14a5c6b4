import assert from 'node:assert/strict';
import { test } from 'node:test';
import { metricPoints } from '../../trainer-daemon/protocol';
import { allRollouts, finished, setUp, storeOf, train, WORKERS } from '../helpers/apo';

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
    ...WORKERS,
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
    ...WORKERS,
  ]);
  assert.equal(calls.code, 0, calls.stderr);
  const byCalls = finished(calls.stdout);
  assert.equal(byCalls.stopReason, 'budget-calls');
  assert.equal(byCalls.llmCalls, 3);

  const rollouts = await train(cwd, upstream, [
    '--budget-rollouts',
    '8',
    '--gradient-batch',
    '4',
    '--beam',
    '1',
    ...WORKERS,
  ]);
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

test('apo: agent calls that were not whole answers are left out of what the critique reads, and each round says how many and why', async (t) => {
  const { cwd, upstream } = await setUp(t);
  const flags = ['--rounds', '2', '--beam', '1', '--branch', '1', '--gradient-batch', '2', '--val-batch', '2'];
  const run = await train(
    cwd,
    upstream,
    [...flags, '--critique-model', 'critic', '--edit-model', 'editor', ...WORKERS],
    {
      AGENT_FAILS_FIRST: '1',
    },
  );
  assert.equal(run.code, 0, run.stderr);
  const result = finished(run.stdout);
  assert.equal(result.roundsCompleted, 2);
  // Every agent rollout had one failed call (HTTP 500) before its answer; the count is the run's so far.
  const store = storeOf(cwd);
  t.after(() => store.close());
  const metric = (name: string): Array<[number, number]> =>
    metricPoints(store.getTrainingRun(result.runId).metrics, name).map((p) => [p.step, p.value]);
  const perRound = metric('rollouts').filter(([step]) => step !== 0);
  assert.equal(perRound.at(-1)![1], result.rollouts);
  assert.deepEqual(metric('skipped_calls/upstream_errors'), perRound);
  assert.deepEqual(metric('skipped_calls/cancelled'), [
    [1, 0],
    [2, 0],
  ]);
  assert.deepEqual(metric('skipped_calls/truncated'), [
    [1, 0],
    [2, 0],
  ]);
  for (const [round, count] of perRound)
    assert.match(
      run.stderr,
      new RegExp(`round ${round}: .*; agent calls skipped: ${count} upstream errors \\(not whole answers\\)`),
    );
  // The answers the critique read were the agents' whole answers: the seed still scores as without the failures.
  assert.equal(result.seed.valScore, 0.5);
});
