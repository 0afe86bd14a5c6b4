import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { allRollouts, finished, setUp, storeOf, train, WORKERS } from '../helpers/apo';

/** One short round: what matters here is how the seed prompt is scored (its agents run as workers). */
const FLAGS = [
  '--rounds',
  '1',
  '--beam',
  '1',
  '--branch',
  '1',
  '--gradient-batch',
  '2',
  '--val-batch',
  '2',
  '--seed',
  '3',
  '--critique-model',
  'critic',
  '--edit-model',
  'editor',
  ...WORKERS,
];

test('apo scores the answer an agent reports itself (lightning.answer) through the scoring pipeline', async (t) => {
  const { cwd, upstream } = await setUp(t);
  // The model spells sums under ten out ("five"), which the expected "5" does not match; the agent reports digits.
  const run = await train(cwd, upstream, FLAGS, { AGENT_REPORTS_DIGITS: '1' });
  assert.equal(run.code, 0, run.stderr);
  const result = finished(run.stdout);
  assert.equal(result.seed.valScore, 1, 'every reported answer matches (the last call’s text would score 0.5)');

  const store = storeOf(cwd);
  t.after(() => store.close());
  const small = allRollouts(store, 'val').find(
    (r) => (r.task!.input as { a: number; b: number }).a + (r.task!.input as { a: number; b: number }).b < 10,
  )!;
  const rows = store.getRolloutDetail(small.id).rewards.map((r) => [r.name, r.value, r.source, r.reason]);
  assert.deepEqual(rows, [
    ['match.normalized', 1, 'rule', 'normalized answer matches'],
    ['reward', 1, 'rule', '1×match.normalized(1)'],
  ]);
});

test('apo --rewards FILE scores with that file’s spec for the dataset', async (t) => {
  const { cwd, upstream } = await setUp(t);
  fs.writeFileSync(
    path.join(cwd, 'quarter.mjs'),
    'export default () => ({ value: 0.25, reason: "a quarter for trying" });\n',
  );
  fs.writeFileSync(
    path.join(cwd, 'rewards.json'),
    JSON.stringify({ datasets: { sums: { sources: [{ type: 'function', name: 'quarter', module: 'quarter.mjs' }] } } }),
  );
  const run = await train(cwd, upstream, [...FLAGS, '--rewards', 'rewards.json']);
  assert.equal(run.code, 0, run.stderr);
  assert.equal(finished(run.stdout).seed.valScore, 0.25);
  const store = storeOf(cwd);
  t.after(() => store.close());
  const rollout = allRollouts(store, 'val')[0]!;
  assert.deepEqual(
    store.getRolloutDetail(rollout.id).rewards.map((r) => [r.name, r.value, r.source, r.reason]),
    [
      ['quarter', 0.25, 'rule', 'a quarter for trying'],
      ['reward', 0.25, 'rule', '1×quarter(0.25)'],
    ],
  );

  const missing = await train(cwd, upstream, [...FLAGS, '--rewards', 'nope.json']);
  assert.notEqual(missing.code, 0);
  assert.match(missing.stderr, /no rewards config at .*nope\.json/);
});
