import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApoResult, candidatesOf, metricPoints, placeholders } from '../../trainer-daemon/protocol';
import { allRollouts, finished, setUp, storeOf, train, WORKERS } from '../helpers/apo';
import { runCli } from '../helpers/daemon';

const MAIN_FLAGS = [
  '--beam',
  '2',
  '--branch',
  '2',
  '--rounds',
  '2',
  '--gradient-batch',
  '3',
  '--val-batch',
  '2',
  '--seed',
  '7',
  '--critique-model',
  'critic-flaky',
  '--edit-model',
  'editor-sloppy',
  '--budget-calls',
  '40',
  '--budget-rollouts',
  '200',
];

test('apo: finds a prompt that beats the seed on validation, keeps its placeholders, stays in budget, records everything', async (t) => {
  const { cwd, upstream, calls } = await setUp(t);
  const run = await train(cwd, upstream, [...MAIN_FLAGS, ...WORKERS]);
  assert.equal(run.code, 0, run.stderr);
  const result = finished(run.stdout);
  assert.equal(result.seed.valScore, 0.5);
  assert.equal(result.best.valScore, 1);
  assert.match(result.best.prompt, /digits/);
  assert.deepEqual(placeholders(result.best.prompt), ['a', 'b']);
  assert.match(result.diff, /^\+ Answer with digits only\.$/m);
  assert.equal(result.stopReason, 'completed');
  assert.equal(result.roundsCompleted, 2);
  assert.ok(result.llmCalls <= 40 && result.rollouts <= 200);
  assert.match(run.stderr, /apo: round 2: .*best r1-\d+ 1\.000 \(seed 0\.500\)/);

  const store = storeOf(cwd);
  t.after(() => store.close());
  // The optimizer's own calls are rollouts of their own, failed attempts (HTTP 500, a dropped placeholder) included.
  const optimizer = allRollouts(store, 'optimizer');
  assert.equal(optimizer.length, result.llmCalls);
  assert.equal(optimizer.length, calls.critique + calls.edit);
  assert.ok(
    optimizer.some((r) => r.status === 'failed' && /HTTP 500/.test(r.error ?? '')),
    'a failing critique call was retried',
  );
  assert.ok(
    optimizer.some(
      (r) => r.status === 'failed' && /dropped \{a\}, \{b\}; placeholders must be kept/.test(r.error ?? ''),
    ),
    'an edit that dropped placeholders was asked again',
  );
  assert.ok(optimizer.every((r) => r.llmCalls === 1));
  // Agent rollouts: as many as the result says, each pinned to the version it ran with, which is what its agent sent.
  const agentRollouts = [...allRollouts(store, 'train'), ...allRollouts(store, 'val')];
  assert.equal(agentRollouts.length, result.rollouts);
  assert.equal(calls.agent.length, result.rollouts);
  for (const rollout of agentRollouts.slice(0, 10)) {
    const detail = store.getRolloutDetail(rollout.id);
    const version = detail.resources.prompt!;
    const template = store.getResource('prompt', version).resource.value as string;
    const input = rollout.task!.input as { a: number; b: number };
    assert.ok(calls.agent.includes(template.replace('{a}', String(input.a)).replace('{b}', String(input.b))));
    assert.equal(detail.rewards.at(-1)!.source, 'rule');
  }
  // The run, its metrics per round and its leaderboard; the seed stays the resource's current version.
  const detail = store.getTrainingRun(result.runId);
  assert.equal(detail.run.status, 'succeeded');
  assert.deepEqual(ApoResult.parse(detail.run.result), result);
  assert.deepEqual(
    metricPoints(detail.metrics, 'best_val_score').map((m) => [m.step, m.value]),
    [
      [0, 0.5],
      [1, 1],
      [2, 1],
    ],
  );
  const best = candidatesOf(detail)[0]!;
  assert.equal(best.id, result.best.candidateId);
  assert.equal(best.valScore, 1);
  assert.match(best.critique!, /digits/);
  assert.equal(best.parentId, 'seed');
  for (const candidate of candidatesOf(detail)) assert.deepEqual(placeholders(candidate.prompt), ['a', 'b']);
  assert.equal(store.getResource('prompt').resource.version, 1);
  const versions = store.getResource('prompt').versions;
  assert.ok(versions.slice(1).every((v) => v.runId === result.runId && !v.current));
  // `train --list`: the run among the others, its best validation score as its VAL.
  const listed = await runCli(['train', '--list'], { cwd });
  assert.equal(listed.code, 0, listed.stderr);
  assert.match(listed.stdout, new RegExp(`${result.runId}\\s+apo\\s+succeeded\\s+2\\s+-\\s+1\\.00\\s`));
});
