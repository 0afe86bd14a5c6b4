/**
 * The panel's groups (RPC `rollouts/groups` on a real store, through the handler table): the user's own
 * runs apart, one group per batch named by its dataset or training run, the counts one filter gives
 * everywhere; and how the list words them (webview/format.ts).
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import { createHandlers, invoke } from '../../trainer-daemon/rpc/handlers';
import { Store } from '../../trainer-daemon/store/store';
import { grpoBatchId, RolloutGroups, type RolloutGroup, type RolloutStatus } from '../../trainer-daemon/protocol';
import { countText, groupFacts, groupTitle, rolloutTitle, taskText } from '../../webview/format';
import { testGrpoConfig } from '../helpers/trainingConfigs';
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
  const run = store.recordTrainingRun({ algorithm: 'grpo', config: testGrpoConfig() });
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
  const apo = seed.store.createTrainingRun(
    parsed('createTrainingRun', { algorithm: 'apo', config: { resource: 'system-prompt', dataset: 'cities' } }),
  );
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

describe('rollouts/groups', () => {
  test('own runs apart; each batch a group, newest first, named by its dataset or its training run', async (t) => {
    const { handlers, run } = seeded(t);
    const counted = RolloutGroups.parse(await invoke(handlers, 'rolloutGroups', {}));
    assert.equal(counted.total, 3 + 3 + 2 + 4);
    assert.equal(counted.ungrouped, 3);
    assert.equal(counted.more, false);
    const rows = counted.groups.map((g) => [
      g.batchId,
      g.count,
      g.failed,
      g.active,
      g.mode,
      g.datasetName,
      g.runId,
      g.algorithm,
      g.step,
    ]);
    assert.deepEqual(rows, [
      [grpoBatchId(run.id, 'train', 0), 4, 0, 0, 'train', 'cities', run.id, 'grpo', 0],
      [grpoBatchId(run.id, 'val', 0), 2, 0, 0, 'val', 'cities', run.id, 'grpo', 0],
      ['batch-0a1b2c', 3, 1, 1, 'train', 'cities', null, null, null],
    ]);
    // The counts add up: the own runs and every group are the total.
    assert.equal(counted.ungrouped + counted.groups.reduce((sum, g) => sum + g.count, 0), counted.total);
  });

  test('one filter, one count: the groups, the list pages and the store stats agree', async (t) => {
    const { handlers, own } = seeded(t);
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
      [failed.total, failed.ungrouped, failed.groups.map((g) => [g.batchId, g.count, g.failed])],
      [2, 1, [['batch-0a1b2c', 1, 1]]],
    );
    const searched = RolloutGroups.parse(await invoke(handlers, 'rolloutGroups', { search: 'Oslo' }));
    assert.deepEqual([searched.total, searched.ungrouped, searched.groups.map((g) => g.count)], [1, 0, [1]]);
    const oneBatch = RolloutGroups.parse(await invoke(handlers, 'rolloutGroups', { batchId: 'batch-0a1b2c' }));
    assert.deepEqual([oneBatch.total, oneBatch.groups.length], [3, 1]);
    // Each group's count is what listing its batch gives.
    for (const group of all.groups)
      assert.equal(
        (await invoke(handlers, 'listRollouts', { batchId: group.batchId, limit: 500 })).items.length,
        group.count,
      );
  });

  test("an APO run's optimizer calls are a group of the run", async (t) => {
    const { handlers, apo } = withApo(t);
    const counted = RolloutGroups.parse(await invoke(handlers, 'rolloutGroups', {}));
    assert.equal(counted.ungrouped, 3, 'still only the user’s own runs');
    const group = counted.groups[0]!;
    assert.deepEqual(
      [group.batchId, group.count, group.mode, group.runId, group.algorithm, group.step],
      [`${apo.id}-optimizer`, 2, 'optimizer', apo.id, 'apo', null],
    );
    assert.equal(groupTitle(group), `APO ${apo.id} · optimizer calls`);
  });

  test('the newest `limit` groups, and whether there are more', async (t) => {
    const { handlers } = seeded(t);
    const two = RolloutGroups.parse(await invoke(handlers, 'rolloutGroups', { limit: 2 }));
    assert.deepEqual([two.groups.length, two.more, two.total], [2, true, 12]);
    await assert.rejects(invoke(handlers, 'rolloutGroups', { limit: 0 }), /limit/);
    await assert.rejects(invoke(handlers, 'rolloutGroups', { cursor: 'x' }), /cursor/);
  });
});

describe('the list’s words', () => {
  const group = (extra: Partial<RolloutGroup>): RolloutGroup => ({
    batchId: 'b',
    count: 1,
    failed: 0,
    active: 0,
    mode: 'train',
    label: null,
    datasetId: null,
    datasetName: null,
    runId: null,
    algorithm: null,
    step: null,
    createdAt: 0,
    updatedAt: 0,
    ...extra,
  });

  test('a group by what ran it', () => {
    assert.equal(
      groupTitle(group({ runId: 'train-98c5', algorithm: 'grpo', step: 3 })),
      'GRPO train-98c5 · iteration 4',
    );
    assert.equal(
      groupTitle(group({ runId: 'train-98c5', algorithm: 'grpo', step: 0, mode: 'val' })),
      'GRPO train-98c5 · validation before training',
    );
    assert.equal(
      groupTitle(group({ runId: 'train-98c5', algorithm: 'grpo', step: 2, mode: 'val' })),
      'GRPO train-98c5 · validation after iteration 2',
    );
    assert.equal(groupTitle(group({ runId: 'apo-1', algorithm: 'apo', step: 2 })), 'APO apo-1 · evaluation 2');
    assert.equal(
      groupTitle(group({ runId: 'apo-1', algorithm: 'apo', mode: 'optimizer' })),
      'APO apo-1 · optimizer calls',
    );
    assert.equal(groupTitle(group({ datasetName: 'cities', label: 'my label' })), 'Dataset run · cities');
    assert.equal(groupTitle(group({ batchId: 'batch-x' })), 'Batch batch-x');
    assert.equal(groupFacts(group({ count: 128, failed: 3, active: 2 })), '128 rollouts · 3 failed · 2 running');
    assert.equal(groupFacts(group({ count: 1 })), '1 rollout');
    assert.equal(countText(675, false), '675 rollouts');
    assert.equal(countText(100_000, true), '100,000 rollouts match');
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
