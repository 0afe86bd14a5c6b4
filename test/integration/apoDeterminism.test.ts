import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApoResult } from '../../trainer-daemon/protocol';
import { allRollouts, board, setUp, storeOf, train } from '../helpers/apo';

test('apo: the same seed gives the same run (sampling, tie-breaks, retries), a different seed samples differently', async (t) => {
  const flags = ['--beam', '1', '--branch', '3', '--rounds', '1', '--gradient-batch', '3', '--val-batch', '2', '--critique-model', 'critic-flaky', '--edit-model', 'editor-sloppy'];
  const runs = [];
  for (const seed of ['3', '3', '4']) {
    const { cwd, upstream } = await setUp(t);
    const run = await train(cwd, upstream, [...flags, '--seed', seed]);
    assert.equal(run.code, 0, run.stderr);
    const result = ApoResult.parse(JSON.parse(run.stdout));
    const store = storeOf(cwd);
    const candidates = board(store.getTrainingRun(result.runId).candidates);
    const batches = [...allRollouts(store, 'train'), ...allRollouts(store, 'val')].reverse().map((r) => `${r.label!.replace(result.runId, '')} ${r.task!.id}`);
    store.close();
    runs.push({ result: { ...result, runId: '' }, candidates, batches });
  }
  assert.deepEqual(runs[1], runs[0]);
  assert.notDeepEqual(runs[2]!.batches, runs[0]!.batches);
});
