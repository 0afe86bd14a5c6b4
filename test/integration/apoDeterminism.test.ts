import assert from 'node:assert/strict';
import { test } from 'node:test';
import { candidatesOf } from '../../trainer-daemon/protocol';
import { agentLogs, allRollouts, board, finished, setUp, storeOf, train, WORKERS } from '../helpers/apo';

test('apo: the same seed gives the same run (sampling, tie-breaks, retries) with agent processes or agent workers, a different seed samples differently', async (t) => {
  const flags = [
    '--beam',
    '1',
    '--branch',
    '3',
    '--rounds',
    '1',
    '--gradient-batch',
    '3',
    '--val-batch',
    '1',
    '--critique-model',
    'critic-flaky',
    '--edit-model',
    'editor-sloppy',
  ];
  const runs = [];
  // The first run starts a process per rollout, the others run their agents as workers (one per batch). The third run
  // only needs its first training batch: the rollout budget stops it there.
  for (const [seed, budget, mode] of [
    ['3', '1000', []],
    ['3', '1000', WORKERS],
    ['4', '7', WORKERS],
  ] as const) {
    const { cwd, upstream } = await setUp(t);
    const run = await train(cwd, upstream, [...flags, '--seed', seed, '--budget-rollouts', budget, ...mode]);
    assert.equal(run.code, 0, run.stderr);
    const result = finished(run.stdout);
    const store = storeOf(cwd);
    // A log per rollout (process mode), or per worker: one worker per batch (the evaluations of the run).
    const agentRollouts = [...allRollouts(store, 'train'), ...allRollouts(store, 'val')];
    const evaluations = new Set(agentRollouts.map((r) => r.batchId)).size;
    assert.ok(evaluations > 1 && evaluations < result.rollouts);
    assert.deepEqual(
      agentLogs(cwd, result.runId),
      mode.length === 0 ? { workers: 0, rollouts: result.rollouts } : { workers: evaluations, rollouts: 0 },
    );
    const candidates = board(candidatesOf(store.getTrainingRun(result.runId)));
    const batches = [...agentRollouts].reverse().map((r) => `${r.label!.replace(result.runId, '')} ${r.task!.id}`);
    const firstTrainingBatch = allRollouts(store, 'train')
      .reverse()
      .slice(0, 3)
      .map((r) => r.task!.id);
    store.close();
    runs.push({ result: { ...result, runId: '' }, candidates, batches, firstTrainingBatch });
  }
  assert.deepEqual(runs[1], runs[0]);
  assert.equal(runs[2]!.result.stopReason, 'budget-rollouts');
  assert.notDeepEqual(runs[2]!.firstTrainingBatch, runs[0]!.firstTrainingBatch);
});
