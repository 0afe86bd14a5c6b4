// The store's queries and records beside the rollouts' lifecycle (store.test.ts): rollout keys, rewards, listing
// and pagination, where a training run ran.
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import { InvalidInputError } from '../../trainer-daemon/protocol/errors';
import { type ApoResult, type ParamsOf } from '../../trainer-daemon/protocol';
import { openConnection } from '../../trainer-daemon/store/driver';
import { Store } from '../../trainer-daemon/store/store';
import { llmSpan } from '../helpers/spans';
import { openStore } from '../helpers/store';
import { tempDir } from '../helpers/tmp';
import { parsed } from '../helpers/params';
import { testApoConfig, testGrpoConfig } from '../helpers/trainingConfigs';

describe('store: rollout keys', () => {
  test('a rollout key keeps its own Anthropic and Gemini upstreams across a reopen; credentials in them only in memory', (t) => {
    const dir = tempDir(t);
    const file = path.join(dir, 'store.db');
    const store = Store.open(file);
    const secret = 'https://user:pw@gw.example/anthropic?api_key=sk-ant-abcdefghijklmnop';
    const { key } = store.startAgentRun(parsed('createRollout', {}), {
      upstream: null,
      tokenIds: false,
      providerUpstreams: { anthropic: secret, gemini: 'http://127.0.0.1:9000' },
    });
    assert.deepEqual(
      store.findAgentKey(key)!.providerUpstreams,
      { anthropic: secret, gemini: 'http://127.0.0.1:9000' },
      'exact while the daemon runs',
    );
    store.close();
    const reopened = Store.open(file);
    t.after(() => reopened.close());
    const found = reopened.findAgentKey(key)!;
    assert.equal(found.providerUpstreams.gemini, 'http://127.0.0.1:9000');
    assert.doesNotMatch(
      found.providerUpstreams.anthropic!,
      /pw|sk-ant-abcdefghijklmnop/,
      'the store keeps no credential',
    );
    assert.match(found.providerUpstreams.anthropic!, /^https:\/\/gw\.example\/anthropic/);
    const { key: plain } = reopened.startAgentRun(parsed('createRollout', {}), { upstream: null, tokenIds: false });
    assert.deepEqual(reopened.findAgentKey(plain)!.providerUpstreams, {});
  });
});

describe('store: rewards', () => {
  test('rewards are append-only: corrections are new rows, the store refuses updates', (t) => {
    const store = openStore(t);
    const { id } = store.createRollout(parsed('createRollout', {}));
    store.addReward(parsed('addReward', { rolloutId: id, value: 0.2, source: 'agent' }));
    assert.equal(store.getRollout(id).reward, 0.2);
    const human = store.addReward(
      parsed('addReward', { rolloutId: id, value: 1, comment: 'correct answer', author: 'ana' }),
    );
    store.addReward(parsed('addReward', { rolloutId: id, value: 0.5, source: 'agent' }));
    // The human annotation wins over a later automatic reward.
    assert.equal(store.getRollout(id).reward, 1);
    const correction = store.addReward(parsed('addReward', { rolloutId: id, value: 0, comment: 'actually wrong' }));
    assert.equal(store.getRollout(id).reward, 0);
    assert.deepEqual(
      store.listRewards(id).map((r) => [r.value, r.source]),
      [
        [0.2, 'agent'],
        [1, 'human'],
        [0.5, 'agent'],
        [0, 'human'],
      ],
    );
    assert.ok(correction.id > human.id);
    assert.throws(() => store.db.prepare('UPDATE rewards SET value = 5 WHERE id = ?').run(human.id), /append-only/);
    assert.equal(store.listRewards(id)[1]!.value, 1);
  });

  test('a step reward must name a span of the rollout', (t) => {
    const store = openStore(t);
    const { id } = store.createRollout(parsed('createRollout', {}));
    const span = llmSpan();
    store.addSpans({ rolloutId: id, spans: [span] });
    const step = store.addReward(parsed('addReward', { rolloutId: id, spanId: span.spanId, value: 1 }));
    assert.equal(step.spanId, span.spanId);
    // A step reward is not the episode reward.
    assert.equal(store.getRollout(id).reward, null);
    assert.throws(
      () => store.addReward(parsed('addReward', { rolloutId: id, spanId: 'ffffffffffffffff', value: 1 })),
      InvalidInputError,
    );
    assert.equal(store.listRewards(id).length, 1);
  });
});

describe('store: list and pagination', () => {
  function seed(store: Store, count: number): string[] {
    const ids: string[] = [];
    store.db.transaction(() => {
      for (let i = 0; i < count; i += 1) {
        const rollout = store.createRollout(
          parsed('createRollout', {
            label: i % 3 === 0 ? 'weather-agent' : 'calc-agent',
            mode: i % 2 === 0 ? 'train' : 'debug',
            task: { id: `task-${i % 5}`, input: { city: i % 4 === 0 ? 'Zürich' : 'Paris' } },
          }),
        );
        ids.push(rollout.id);
      }
    })();
    return ids;
  }

  test('cursor pagination visits every rollout exactly once, newest first, even with equal timestamps', (t) => {
    const store = openStore(t);
    const ids = seed(store, 123);
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const page = store.listRollouts(parsed('listRollouts', { limit: 10, cursor }));
      seen.push(...page.items.map((r) => r.id));
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
    assert.deepEqual(seen, [...ids].reverse());
    const oldest = store.listRollouts({ order: 'oldest', limit: 500 }).items.map((r) => r.id);
    assert.deepEqual(oldest, ids);
  });

  test('filters combine: status, mode, label, task, text search (short and long), unrated', (t) => {
    const store = openStore(t);
    const ids = seed(store, 60);
    store.transitionRollout(parsed('transitionRollout', { id: ids[0]!, to: 'running' }));
    store.addReward(parsed('addReward', { rolloutId: ids[3]!, value: 1 }));
    const all = store.listRollouts(parsed('listRollouts', { limit: 500 })).items;
    const expect = (predicate: (r: (typeof all)[number]) => boolean): string[] => {
      const matching = all.filter(predicate).map((r) => r.id);
      assert.ok(
        matching.length > 0 && matching.length < all.length,
        'the fixture must make each filter select some rollouts, not all',
      );
      return matching;
    };
    const ids_ = (params: ParamsOf<'listRollouts'>): string[] =>
      store.listRollouts(parsed('listRollouts', { limit: 500, ...params })).items.map((r) => r.id);

    assert.deepEqual(ids_({ status: ['running'] }), [ids[0]]);
    assert.deepEqual(
      ids_({ mode: 'train', label: 'weather-agent' }),
      expect((r) => r.mode === 'train' && r.label === 'weather-agent'),
    );
    assert.deepEqual(
      ids_({ taskId: 'task-2' }),
      expect((r) => r.task?.id === 'task-2'),
    );
    assert.deepEqual(
      ids_({ search: 'WEATHER' }),
      expect((r) => r.label === 'weather-agent'),
    );
    assert.deepEqual(
      ids_({ search: 'zür' }),
      expect((r) => JSON.stringify(r.task).includes('Zürich')),
    );
    assert.deepEqual(
      ids_({ search: 'k-3' }),
      expect((r) => r.task?.id === 'task-3'),
    );
    assert.deepEqual(ids_({ search: '"quoted' }), []);
    assert.deepEqual(ids_({ search: '%' }), []);
    assert.equal(ids_({ unrated: true }).length, 59);
    assert.ok(!ids_({ unrated: true }).includes(ids[3]!));
  });

  test('a forged cursor is rejected with a message saying what to do', (t) => {
    const store = openStore(t);
    assert.throws(
      () => store.listRollouts(parsed('listRollouts', { cursor: 'garbage' })),
      /params\.cursor: not a cursor/,
    );
  });

  test('stats count rollouts by status, spans, rewards and unrated finished rollouts', (t) => {
    const store = openStore(t);
    const ids = seed(store, 4);
    for (const id of ids.slice(0, 2)) {
      store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
      store.transitionRollout(parsed('transitionRollout', { id, to: 'succeeded' }));
    }
    store.addSpans({ rolloutId: ids[0]!, spans: [llmSpan(), llmSpan()] });
    store.addReward(parsed('addReward', { rolloutId: ids[0]!, value: 1 }));
    const stats = store.stats();
    assert.equal(stats.rollouts, 4);
    assert.equal(stats.byStatus.succeeded, 2);
    assert.equal(stats.byStatus.queued, 2);
    assert.equal(stats.spans, 2);
    assert.equal(stats.rewards, 1);
    assert.equal(stats.unrated, 1);
  });
});

describe('store: where a training run ran', () => {
  test('an attempt keeps its Ray node; a run counts the nodes of its attempts and keeps the ranks it started with', (t) => {
    const store = openStore(t);
    const run = store.recordTrainingRun({
      algorithm: 'grpo',
      config: testGrpoConfig({ ray: { address: '10.0.0.7:6379' } }),
    });
    assert.equal(run.placement, undefined, 'nothing recorded yet');
    const nodeA = { nodeId: 'aa', ip: '10.0.0.5', host: 'gpu-1' };
    const nodeB = { nodeId: 'bb', ip: '10.0.0.10', host: 'gpu-2' };
    const attempt = (
      batchId: string,
      node: typeof nodeA | undefined,
      to: 'succeeded' | 'failed' = 'succeeded',
    ): string => {
      const { id } = store.createRollout(parsed('createRollout', { mode: 'train', batchId }));
      store.transitionRollout(parsed('transitionRollout', { id, to: 'running' }));
      store.transitionRollout(parsed('transitionRollout', { id, to, ...(node ? { node } : {}) }));
      return id;
    };
    const failed = attempt(`${run.id}-train-0`, nodeB, 'failed');
    attempt(`${run.id}-train-0`, nodeA);
    attempt(`${run.id}-val-0`, nodeA);
    attempt(`${run.id}-val-0`, undefined);
    attempt('another-run-train-0', nodeB);
    assert.deepEqual(
      store.getRolloutDetail(failed).attempts.map((a) => a.node),
      [nodeB],
    );
    store.recordRunRanks(run.id, [
      { rank: 1, localRank: 1, host: 'host-a' },
      { rank: 0, localRank: 0, host: 'host-a' },
    ]);
    const placed = store.recordRunRayNodes(run.id);
    assert.deepEqual(placed.placement, {
      rayNodes: [
        { ...nodeA, attempts: 2 },
        { ...nodeB, attempts: 1 },
      ],
      ranks: [
        { rank: 0, localRank: 0, host: 'host-a' },
        { rank: 1, localRank: 1, host: 'host-a' },
      ],
    });
    assert.deepEqual(store.listTrainingRuns(10)[0]!.placement, placed.placement, 'the list carries it too');
  });

  test("a run's result is its algorithm's: an APO run ends with its ApoResult, read back typed; a GRPO run records none", (t) => {
    const store = openStore(t);
    store.putResource(parsed('putResource', { name: 'prompt', kind: 'prompt_template', value: 'v1 {a}' }));
    const apo = store.recordTrainingRun({ algorithm: 'apo', config: testApoConfig() });
    store.setTrainingRunStatus(apo.id, 'running');
    const prompt = { candidateId: 'c', version: 1, prompt: 'p', valScore: 0.5 };
    const result: ApoResult = {
      runId: apo.id,
      resource: 'prompt',
      seed: prompt,
      best: { ...prompt, valScore: 0.75 },
      diff: '',
      roundsCompleted: 1,
      llmCalls: 2,
      rollouts: 4,
      stopReason: 'completed',
      skipped: [],
    };
    const done = store.setTrainingRunStatus(apo.id, 'succeeded', { result });
    switch (done.algorithm) {
      case 'apo':
        assert.deepEqual(done.result, result, 'read back typed');
        break;
      default:
        assert.fail(`an APO run read back as ${done.algorithm}`);
    }
    const grpo = store.recordTrainingRun({
      algorithm: 'grpo',
      config: testGrpoConfig(),
    });
    assert.throws(
      () => store.setTrainingRunStatus(grpo.id, 'running', { result }),
      /is a GRPO run, which records no result/,
    );
    assert.equal(store.trainingRun(grpo.id).status, 'queued', 'nothing written');
  });

  test('an APO run recorded before the daemon ran APO (no algorithm, no command in its config) still lists', (t) => {
    const file = path.join(tempDir(t), 'store.db');
    const first = Store.open(file);
    const apo = first.recordTrainingRun({ algorithm: 'apo', config: testApoConfig() });
    first.close();
    // As the CLI process of earlier versions recorded it: ApoConfig without `algorithm`, `command` or `upstream`.
    const { db } = openConnection(file, { readonly: false });
    db.prepare('UPDATE training_runs SET config = ? WHERE id = ?').run(
      JSON.stringify({ resource: 'prompt', dataset: 'sums', beam: 3 }),
      apo.id,
    );
    db.close();
    const store = Store.open(file);
    t.after(() => store.close());
    const [listed] = store.listTrainingRuns(10);
    switch (listed!.algorithm) {
      case 'apo':
        assert.deepEqual(
          [listed!.config.algorithm, listed!.config.command, listed!.config.upstream, listed!.config.beam],
          ['apo', null, null, 3],
        );
        break;
      default:
        assert.fail(`read back as ${listed!.algorithm}`);
    }
  });
});
