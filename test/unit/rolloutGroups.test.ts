/**
 * The panel's groups (RPC `rollouts/groups` on a real store, through the handler table): the user's own
 * runs apart, one group per run (a training run with its batches inside, a dataset run), the newest `limit`
 * runs with the count of all, the counts one filter gives everywhere; and how the list words them
 * (trainer-daemon/protocol/ui/rolloutText.ts) — by label, never by id alone.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import { createHandlers, invoke } from '../../trainer-daemon/rpc/handlers';
import { Store } from '../../trainer-daemon/store/store';
import {
  grpoBatchId,
  RolloutGroups,
  type RolloutBatchGroup,
  type RolloutRunGroup,
  type RolloutStatus,
} from '../../trainer-daemon/protocol';
import { rolloutCount } from '../../trainer-daemon/protocol/format';
import { groupByRun } from '../../trainer-daemon/store/runGroups';
import type { BatchCount } from '../../trainer-daemon/store/rollouts';
import {
  batchTitle,
  countText,
  groupFacts,
  moreRunsText,
  rolloutTitle,
  runGroupFacts,
  runGroupTime,
  runGroupTitle,
  taskText,
} from '../../trainer-daemon/protocol/ui/rolloutText';
import { testApoConfig, testGrpoConfig } from '../helpers/trainingConfigs';
import { tempDir } from '../helpers/tmp';
import { parsed } from '../helpers/params';

function seeded(t: Parameters<typeof tempDir>[0]) {
  const store = Store.open(path.join(tempDir(t), 'store.db'));
  t.after(() => store.close());
  const handlers = createHandlers({
    store,
    info: () => ({ version: 'test', pid: process.pid, store: 'x', schemaVersion: store.schemaVersion, startedAt: 0 }),
  });
  const finish = (id: string, to: RolloutStatus): void => {
    store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
    if (to !== 'running')
      store.transitionRollout(
        parsed('transitionRollout', {
          id,
          to,
          ...(to === 'failed' ? { error: 'exited with code 1', exitCode: 1 } : {}),
        }),
      );
  };
  // The user's own: two debug sessions and a `lightning run`.
  const own = [
    store.createRollout(
      parsed('createRollout', {
        mode: 'debug',
        label: 'Weather agent',
        source: { kind: 'launch', name: 'Weather agent' },
      }),
    ).id,
    store.createRollout(
      parsed('createRollout', {
        mode: 'debug',
        label: 'Weather agent',
        source: { kind: 'launch', name: 'Weather agent' },
      }),
    ).id,
    store.createRollout(
      parsed('createRollout', { mode: 'debug', source: { kind: 'command', argv: ['python', 'agent.py'] } }),
    ).id,
  ];
  finish(own[0]!, 'succeeded');
  finish(own[1]!, 'failed');
  // A dataset run of three tasks, one of which failed.
  const dataset = store.importDataset(
    parsed('importDataset', {
      name: 'cities',
      tasks: ['Paris', 'Oslo', 'Lima'].map((city, i) => ({
        id: `t${i}`,
        split: 'train',
        input: { question: `Weather in ${city}?` },
        expected: null,
      })),
    }),
  );
  const datasetRun = ['Paris', 'Oslo', 'Lima'].map(
    (city, i) =>
      store.createRollout(
        parsed('createRollout', {
          mode: 'train',
          label: 'cities',
          task: { id: `t${i}`, input: { question: `Weather in ${city}?` } },
          datasetId: dataset.id,
          batchId: 'batch-0a1b2c',
        }),
      ).id,
  );
  finish(datasetRun[0]!, 'succeeded');
  finish(datasetRun[1]!, 'failed');
  finish(datasetRun[2]!, 'running');
  // A GRPO run: iteration 1's sampled batch (2 tasks × 2 samples) and the validation before training.
  const run = store.recordTrainingRun({ algorithm: 'grpo', config: testGrpoConfig({ dataset: 'cities' }) });
  const batch = (mode: 'train' | 'val', step: number, count: number): string[] =>
    Array.from(
      { length: count },
      (_, i) =>
        store.createRollout(
          parsed('createRollout', {
            mode,
            label: run.id,
            task: { id: `q${i % 2}`, input: `3 minus ${i % 2 === 0 ? 7 : 2}` },
            datasetId: dataset.id,
            batchId: grpoBatchId(run.id, mode, step),
          }),
        ).id,
    );
  const validation = batch('val', 0, 2);
  const sampled = batch('train', 0, 4);
  for (const id of [...validation, ...sampled]) finish(id, 'succeeded');
  return { store, handlers, own, dataset, datasetRun, run, validation, sampled };
}

/** An APO run's optimizer calls, as apo/llm.ts records them: a group of the run's, not the user's own. */
function withApo(t: Parameters<typeof tempDir>[0]) {
  const seed = seeded(t);
  seed.store.putResource(
    parsed('putResource', { name: 'system-prompt', kind: 'prompt_template', value: 'Answer {question}' }),
  );
  const apo = seed.store.recordTrainingRun({
    algorithm: 'apo',
    config: testApoConfig({ resource: 'system-prompt', dataset: 'cities' }),
  });
  for (let i = 0; i < 2; i += 1)
    seed.store.createRollout(
      parsed('createRollout', {
        mode: 'optimizer',
        label: `apo ${apo.id}: critique`,
        batchId: `${apo.id}-optimizer`,
        source: { kind: 'api', client: `lightning apo ${apo.id}` },
      }),
    );
  return { ...seed, apo };
}

/** A run's row as the tests compare it: its key, counts and names; a training run's batches as [id, count, step]. */
function runRow(run: RolloutRunGroup): unknown[] {
  return run.kind === 'training'
    ? [
        'training',
        run.runId,
        run.algorithm,
        run.target,
        run.dataset,
        run.count,
        run.failed,
        run.active,
        run.batches.map((b) => [b.batchId, b.count, b.mode, b.step]),
      ]
    : ['batch', run.batchId, run.datasetName, run.label, run.count, run.failed, run.active];
}

describe('rollouts/groups', () => {
  test('own runs apart; a training run one group with its batches inside, a dataset run another, newest first', async (t) => {
    const { handlers, run, dataset } = seeded(t);
    const counted = RolloutGroups.parse(await invoke(handlers, 'rolloutGroups', {}));
    assert.equal(counted.total, 3 + 3 + 2 + 4);
    assert.equal(counted.ungrouped, 3);
    assert.deepEqual([counted.runCount, counted.more], [2, false]);
    assert.deepEqual(counted.runs.map(runRow), [
      [
        'training',
        run.id,
        'grpo',
        'tiny',
        'cities',
        6,
        0,
        0,
        [
          [grpoBatchId(run.id, 'train', 0), 4, 'train', 0],
          [grpoBatchId(run.id, 'val', 0), 2, 'val', 0],
        ],
      ],
      ['batch', 'batch-0a1b2c', 'cities', 'cities', 3, 1, 1],
    ]);
    const training = counted.runs[0]!;
    assert.ok(training.kind === 'training');
    assert.equal(training.startedAt, run.createdAt);
    assert.ok(training.batches.every((batch) => batch.datasetId === dataset.id && batch.datasetName === 'cities'));
    // The counts add up: the own runs and every run are the total; a run is its batches.
    assert.equal(counted.ungrouped + counted.runs.reduce((sum, r) => sum + r.count, 0), counted.total);
    assert.equal(
      training.batches.reduce((sum, b) => sum + b.count, 0),
      training.count,
    );
  });

  test('one filter, one count: the groups, the list pages and the store stats agree', async (t) => {
    const { handlers, own, run } = seeded(t);
    const all = RolloutGroups.parse(await invoke(handlers, 'rolloutGroups', {}));
    assert.equal(all.total, (await invoke(handlers, 'getStats', {})).rollouts, 'the status bar’s number (stats/get)');
    const ownPage = await invoke(handlers, 'listRollouts', { inBatch: false, limit: 500 });
    assert.deepEqual(
      ownPage.items.map((r) => r.id),
      [...own].reverse(),
      'the own runs, newest first, no batch’s',
    );
    assert.equal(
      (await invoke(handlers, 'listRollouts', { inBatch: true, limit: 500 })).items.length,
      all.total - all.ungrouped,
    );

    const failed = RolloutGroups.parse(await invoke(handlers, 'rolloutGroups', { status: ['failed'] }));
    assert.deepEqual(
      [failed.total, failed.ungrouped, failed.runs.map((r) => [r.kind, r.count, r.failed])],
      [2, 1, [['batch', 1, 1]]],
      'a run with no matching rollout is not listed',
    );
    const searched = RolloutGroups.parse(await invoke(handlers, 'rolloutGroups', { search: 'Oslo' }));
    assert.deepEqual([searched.total, searched.ungrouped, searched.runs.map((r) => r.count)], [1, 0, [1]]);
    const validation = RolloutGroups.parse(await invoke(handlers, 'rolloutGroups', { mode: 'val' }));
    assert.deepEqual(
      validation.runs.map((r) => runRow(r).at(-1)),
      [[[grpoBatchId(run.id, 'val', 0), 2, 'val', 0]]],
      'a filtered run holds only its matching batches',
    );
    const oneBatch = RolloutGroups.parse(await invoke(handlers, 'rolloutGroups', { batchId: 'batch-0a1b2c' }));
    assert.deepEqual([oneBatch.total, oneBatch.runs.length], [3, 1]);
    // Each batch's count is what listing it gives.
    const batches = all.runs.flatMap((r) => (r.kind === 'training' ? r.batches : [r]));
    assert.equal(batches.length, 3);
    for (const batch of batches)
      assert.equal(
        (await invoke(handlers, 'listRollouts', { batchId: batch.batchId, limit: 500 })).items.length,
        batch.count,
      );
  });

  test("an APO run's evaluations and optimizer calls are batches of the run, not runs of their own", async (t) => {
    const { handlers, apo } = withApo(t);
    const counted = RolloutGroups.parse(await invoke(handlers, 'rolloutGroups', {}));
    assert.equal(counted.ungrouped, 3, 'still only the user’s own runs');
    const group = counted.runs[0]!;
    assert.ok(group.kind === 'training');
    assert.deepEqual(
      [group.runId, group.algorithm, group.target, group.count, group.batches.map((b) => [b.batchId, b.mode, b.step])],
      [apo.id, 'apo', 'system-prompt', 2, [[`${apo.id}-optimizer`, 'optimizer', null]]],
    );
    assert.equal(batchTitle(group.batches[0]!, group.algorithm), 'Optimizer calls');
  });

  test('the newest `limit` runs, how many there are, and whether there are more', async (t) => {
    const { handlers, run } = seeded(t);
    const one = RolloutGroups.parse(await invoke(handlers, 'rolloutGroups', { limit: 1 }));
    assert.deepEqual([one.runs.length, one.runCount, one.more, one.total], [1, 2, true, 12]);
    // A run is never cut in two: the limit counts runs, and the one listed has both its batches.
    assert.deepEqual(one.runs.map(runRow)[0]!.slice(0, 2), ['training', run.id]);
    assert.equal(one.runs[0]!.kind === 'training' && one.runs[0]!.batches.length, 2);
    // What the "more runs" row says is left out: the rollouts of the runs not listed.
    const left = one.total - one.ungrouped - one.runs.reduce((sum, r) => sum + r.count, 0);
    assert.equal(moreRunsText(one.runCount - one.runs.length, left), '1 more run · 3 rollouts');
    await assert.rejects(invoke(handlers, 'rolloutGroups', { limit: 0 }), /limit/);
    await assert.rejects(invoke(handlers, 'rolloutGroups', { cursor: 'x' }), /cursor/);
  });

  test('a batch whose training run is gone (or never was) is a run of its own, with no step read from its id', () => {
    const grouped = groupByRun(
      {
        total: 5,
        ungrouped: 0,
        batches: [
          { ...batchCount('ghost-train-0', 3), newest: 9 },
          { ...batchCount('train-1-val-0', 2), newest: 4 },
        ],
      },
      10,
      { run: () => undefined, datasetName: () => undefined },
    );
    assert.deepEqual(
      grouped.runs.map((r) => [r.kind, r.kind === 'batch' ? r.batchId : '', r.kind === 'batch' ? r.step : 0]),
      [
        ['batch', 'ghost-train-0', null],
        ['batch', 'train-1-val-0', null],
      ],
    );
  });
});

function batchCount(batchId: string, count: number): Omit<BatchCount, 'newest'> {
  return {
    batchId,
    count,
    failed: 0,
    active: 0,
    mode: 'train',
    label: null,
    datasetId: null,
    createdAt: 0,
    updatedAt: 0,
  };
}

describe('the list’s words', () => {
  const batch = (extra: Partial<RolloutBatchGroup>): RolloutBatchGroup => ({
    batchId: 'b',
    count: 1,
    failed: 0,
    active: 0,
    mode: 'train',
    label: null,
    datasetId: null,
    datasetName: null,
    step: null,
    createdAt: 0,
    updatedAt: 0,
    ...extra,
  });
  const at = new Date(2026, 11, 3, 14, 3, 12).getTime();

  test('a run by its algorithm, model, dataset and start; a dataset run by its dataset; never by an id alone', () => {
    const training: RolloutRunGroup = {
      kind: 'training',
      runId: 'train-98c54a16730b',
      algorithm: 'grpo',
      target: 'tiny',
      dataset: 'sums',
      startedAt: at,
      count: 675,
      failed: 3,
      active: 0,
      createdAt: at,
      updatedAt: at,
      batches: [
        batch({ step: 0, mode: 'val' }),
        batch({ step: 0 }),
        batch({ step: 1 }),
        batch({ step: 1, mode: 'val' }),
      ],
    };
    assert.equal(runGroupTitle(training), 'GRPO tiny on sums');
    assert.equal(runGroupTime(training, at), '14:03:12', 'when it started, beside its name');
    assert.ok(!runGroupTitle(training).includes(training.runId));
    assert.equal(runGroupFacts(training), '2 iterations · 675 rollouts · 3 failed', 'iterations, not validations');
    assert.equal(
      runGroupFacts({
        ...training,
        algorithm: 'apo',
        target: 'system-prompt',
        batches: [batch({ step: 1 }), batch({ step: 2, mode: 'val' }), batch({ mode: 'optimizer' })],
      }),
      '2 evaluations · 675 rollouts · 3 failed',
      'every evaluation, train or val; not the optimizer’s calls',
    );
    const datasetRun: RolloutRunGroup = {
      kind: 'batch',
      ...batch({ datasetName: 'cities', label: 'my label', createdAt: at }),
    };
    assert.equal(runGroupTitle(datasetRun), 'cities · dataset run');
    assert.equal(runGroupTime(datasetRun, at), '14:03:12');
    assert.equal(runGroupTitle({ kind: 'batch', ...batch({ label: 'nightly' }) }), 'nightly · dataset run');
    assert.equal(runGroupTitle({ kind: 'batch', ...batch({ batchId: 'batch-x' }) }), 'Batch batch-x');
  });

  test('a batch of a training run by what it was', () => {
    assert.equal(batchTitle(batch({ step: 3 }), 'grpo'), 'Iteration 4');
    assert.equal(batchTitle(batch({ step: 0, mode: 'val' }), 'grpo'), 'Validation before training');
    assert.equal(batchTitle(batch({ step: 2, mode: 'val' }), 'grpo'), 'Validation after iteration 2');
    assert.equal(batchTitle(batch({ step: 2 }), 'apo'), 'Evaluation 2');
    assert.equal(batchTitle(batch({ mode: 'optimizer' }), 'apo'), 'Optimizer calls');
    assert.equal(groupFacts(batch({ count: 1280, failed: 3, active: 2 })), '1,280 rollouts · 3 failed · 2 running');
    assert.equal(groupFacts(batch({ count: 1 })), '1 rollout');
  });

  test('one count, written one way: the panel’s toolbar, its groups and the status bar', () => {
    assert.equal(countText(675, false), '675 rollouts');
    assert.equal(countText(100_000, true), '100,000 rollouts match');
    assert.equal(rolloutCount(1), '1 rollout');
    assert.equal(rolloutCount(2_345), '2,345 rollouts');
    assert.equal(moreRunsText(12, 3_456), '12 more runs · 3,456 rollouts');
  });

  test('a batch’s rollout by its task, not the run’s label', async (t) => {
    const { store, sampled, own, datasetRun } = seeded(t);
    assert.equal(rolloutTitle(store.getRollout(sampled[0]!)), '3 minus 7');
    assert.equal(rolloutTitle(store.getRollout(datasetRun[1]!)), 'Weather in Oslo?');
    assert.equal(rolloutTitle(store.getRollout(own[0]!)), 'Weather agent');
    assert.equal(rolloutTitle(store.getRollout(own[2]!)), 'python agent.py');
    assert.equal(taskText({ input: { city: 'Oslo', days: 2 } }), '{"city":"Oslo","days":2}');
    assert.equal(taskText({ id: 'only-id', input: null }), 'only-id');
    assert.equal(taskText({ input: { prompt: `a\n\nlong ${'word '.repeat(50)}` } }, 20), 'a long word word wo…');
  });
});
