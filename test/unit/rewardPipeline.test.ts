import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { RewardPolicy, ScoreRolloutsParams, type ScoreRolloutsParams as Params } from '../../trainer-daemon/protocol';
import { episodeReward } from '../../trainer-daemon/lightningrl/credit';
import { loadRewardsFile } from '../../trainer-daemon/rewards/config';
import { scoreRollouts } from '../../trainer-daemon/rewards/job';
import { Store } from '../../trainer-daemon/store/store';
import { recordRollout } from '../helpers/rewards';
import { tempDir } from '../helpers/tmp';
import { parsed } from '../helpers/params';

const MODEL_FIXTURE = path.join(__dirname, '..', 'fixtures', 'reward-model');

function setup(t: Parameters<typeof tempDir>[0]): { store: Store; dir: string } {
  const dir = tempDir(t);
  const store = Store.open(path.join(dir, 'store.db'));
  t.after(() => store.close());
  return { store, dir };
}

const score = (store: Store, params: Params, signal?: AbortSignal, onProgress?: (p: { done: number }) => void) =>
  scoreRollouts({ store }, ScoreRolloutsParams.parse(params), { signal, onProgress });

function mathDataset(store: Store): string {
  return store.importDataset(
    parsed('importDataset', {
      name: 'math',
      tasks: [
        { id: 'a', split: 'train', input: '23+45', expected: 68 },
        { id: 'b', split: 'train', input: '2*21', expected: 42 },
      ],
    }),
  ).id;
}

describe('scoring pipeline', () => {
  test('a dataset’s spec from the rewards file: one row per source and the weighted sum, with source, author and reason', async (t) => {
    const { store, dir } = setup(t);
    const datasetId = mathDataset(store);
    const right = recordRollout(store, {
      answer: 'ANS: 68',
      task: { id: 'a', input: '23+45' },
      datasetId,
      tools: ['calc'],
    });
    const wrong = recordRollout(store, {
      answer: '41',
      task: { id: 'b', input: '2*21' },
      datasetId,
      tools: ['calc', 'calc', 'calc'],
    });
    const other = recordRollout(store, { answer: 'hello', task: { input: 'say hi' } });
    fs.writeFileSync(
      path.join(dir, 'rewards.json'),
      JSON.stringify({
        default: { sources: [{ type: 'rule', rule: { rule: 'regex', pattern: '^hello$' } }] },
        datasets: {
          math: {
            sources: [
              { type: 'rule', name: 'correct', rule: { rule: 'numeric' } },
              { type: 'rule', weight: 0.5, rule: { rule: 'steps-penalty', max: 2 } },
            ],
          },
        },
      }),
    );
    const result = await score(store, {});
    assert.deepEqual([result.scored, result.unscored, result.errors, result.cancelled], [3, 0, 0, false]);
    const rows = (id: string) => store.listRewards(id).map((r) => [r.name, r.value, r.source, r.author]);
    assert.deepEqual(rows(right), [
      ['correct', 1, 'rule', 'lightning'],
      ['rule.steps-penalty', 0, 'rule', 'lightning'],
      ['reward', 1, 'rule', 'lightning'],
    ]);
    assert.deepEqual(rows(wrong), [
      ['correct', 0, 'rule', 'lightning'],
      ['rule.steps-penalty', -1, 'rule', 'lightning'],
      ['reward', -0.5, 'rule', 'lightning'],
    ]);
    assert.deepEqual(rows(other), [
      ['rule.regex', 1, 'rule', 'lightning'],
      ['reward', 1, 'rule', 'lightning'],
    ]);
    const combined = store.listRewards(wrong).at(-1)!;
    assert.equal(combined.reason, '1×correct(0) + 0.5×rule.steps-penalty(-1)');
    assert.match(store.listRewards(wrong)[0]!.reason!, /41 is not within tolerance of 42/);
    assert.equal(store.getRollout(wrong).reward, -0.5);
  });

  test('human annotations are never overwritten and always outrank automatic rewards (agent ones too)', async (t) => {
    const { store } = setup(t);
    const spec = { sources: [{ type: 'rule' as const, rule: { rule: 'exact' as const } }] };
    const annotated = recordRollout(store, { answer: 'Paris', task: { input: { expected: 'Paris' } } });
    const human = store.addReward(
      parsed('addReward', { rolloutId: annotated, value: 0.2, source: 'human', author: 'ana', comment: 'too terse' }),
    );
    const agentRated = recordRollout(store, { answer: 'Paris', task: { input: { expected: 'Paris' } } });
    store.addReward(parsed('addReward', { rolloutId: agentRated, value: 0.7, source: 'agent' }));
    await score(store, { spec });
    const rewards = store.listRewards(annotated);
    assert.deepEqual(rewards[0], human, 'the human row is untouched');
    assert.deepEqual(
      rewards.map((r) => [r.source, r.value]),
      [
        ['human', 0.2],
        ['rule', 1],
        ['rule', 1],
      ],
    );
    const policy = RewardPolicy.parse({});
    assert.equal(episodeReward(rewards, policy), 0.2);
    assert.equal(store.getRollout(annotated).reward, 0.2);
    assert.equal(episodeReward(store.listRewards(agentRated), policy), 0.7);
    assert.equal(store.getRollout(agentRated).reward, 0.7);
    // Scoring again appends; the human annotation still wins, and so does a later correction.
    await score(store, { spec });
    assert.equal(store.getRollout(annotated).reward, 0.2);
    store.addReward(parsed('addReward', { rolloutId: annotated, value: 0.9, source: 'human', author: 'ana' }));
    await score(store, { spec });
    assert.equal(store.getRollout(annotated).reward, 0.9);
    assert.equal(store.listRewards(annotated).filter((r) => r.source === 'human').length, 2);
  });

  test('skipScored: of two jobs scoring a rollout at once only the first writes, and a rollout scored before is left out', async (t) => {
    const { store, dir } = setup(t);
    const spec = { sources: [{ type: 'rule' as const, rule: { rule: 'exact' as const } }] };
    const racing = recordRollout(store, { answer: 'Paris', task: { input: { expected: 'Paris' } } });
    // A person's and an agent's reward are not automatic: the rollout is still scored.
    const annotated = recordRollout(store, { answer: 'Rome', task: { input: { expected: 'Paris' } } });
    store.addReward(parsed('addReward', { rolloutId: annotated, value: 0.2, source: 'human', author: 'ana' }));
    // Both jobs choose the rollouts before either writes (a resume and the job of the runner it follows).
    const [first, second] = await Promise.all([
      score(store, { spec, rollouts: [racing, annotated], skipScored: true }),
      score(store, { spec, rollouts: [racing, annotated], skipScored: true }),
    ]);
    const automatic = (id: string) =>
      store
        .listRewards(id)
        .filter((r) => r.source !== 'human')
        .map((r) => [r.name, r.value]);
    assert.deepEqual(automatic(racing), [
      ['rule.exact', 1],
      ['reward', 1],
    ]);
    assert.deepEqual(automatic(annotated), [
      ['rule.exact', 0],
      ['reward', 0],
    ]);
    assert.deepEqual(
      first.results.map((r) => [r.rolloutId, r.value, r.sources[0]!.kind]),
      [
        [racing, 1, 'scored'],
        [annotated, 0, 'scored'],
      ],
    );
    // The second job reports what the first wrote, as a skipped source.
    assert.deepEqual(
      second.results.map((r) => [r.rolloutId, r.value, r.sources[0]!.kind]),
      [
        [racing, 1, 'skipped'],
        [annotated, 0, 'skipped'],
      ],
    );
    assert.match(
      (second.results[0]!.sources[0] as { reason: string }).reason,
      /another scoring job wrote its 2 automatic reward rows first/,
    );
    assert.equal(second.scored, 2);
    // Chosen after the first commit, a scored rollout is not scored again (its sources are not called) but reported as
    // it is; without skipScored it is scored again (rows appended).
    const calls = path.join(dir, 'calls.txt');
    const counting = path.join(dir, 'counting.mjs');
    fs.writeFileSync(
      counting,
      `import fs from 'node:fs';\nexport default () => { fs.appendFileSync(${JSON.stringify(calls)}, 'x'); return 1; };\n`,
    );
    const later = await score(store, {
      spec: { sources: [{ type: 'function', module: counting }] },
      rollouts: [racing],
      skipScored: true,
    });
    assert.deepEqual(
      later.results.map((r) => [r.rolloutId, r.value, r.sources[0]!.kind]),
      [[racing, 1, 'skipped']],
    );
    assert.equal(later.scored, 1);
    assert.equal(fs.existsSync(calls), false, 'the function was not called');
    assert.equal(automatic(racing).length, 2);
    await score(store, { spec, rollouts: [racing] });
    assert.equal(automatic(racing).length, 4);

    // A job whose sources all fail writes no rows; a rollout another job scored meanwhile is reported as it left it.
    const failing = {
      sources: [
        {
          type: 'function' as const,
          module: path.join(__dirname, '..', 'fixtures', 'rewards', 'functions', 'throws.mjs'),
        },
      ],
    };
    const fresh = recordRollout(store, { answer: 'Paris', task: { input: { expected: 'Paris' } } });
    const [, failed] = await Promise.all([
      score(store, { spec, rollouts: [fresh], skipScored: true }),
      score(store, { spec: failing, rollouts: [fresh], skipScored: true }),
    ]);
    assert.deepEqual(
      failed.results.map((r) => [r.value, r.sources[0]!.kind]),
      [[1, 'skipped']],
    );
    assert.equal(automatic(fresh).length, 2);
  });

  test('first-available: the first source that gives a value, in order; the reward model scores the rest', async (t) => {
    const { store } = setup(t);
    const expected = JSON.parse(fs.readFileSync(path.join(MODEL_FIXTURE, 'expected.json'), 'utf8')) as Array<{
      text: string;
      score: number;
    }>;
    const withAnswer = recordRollout(store, { answer: 'Paris', task: { input: { expected: 'Paris' } } });
    const withoutAnswer = expected
      .slice(0, 4)
      .map((e) => recordRollout(store, { answer: e.text, task: { input: 'no reference' } }));
    const result = await score(store, {
      spec: {
        combine: 'first-available',
        sources: [
          { type: 'rule', rule: { rule: 'exact' } },
          { type: 'model', path: path.join(MODEL_FIXTURE, 'model.onnx'), template: '{answer}', batchSize: 2 },
        ],
      },
    });
    const byId = new Map(result.results.map((r) => [r.rolloutId, r]));
    assert.equal(byId.get(withAnswer)!.value, 1);
    withoutAnswer.forEach((id, i) => {
      assert.ok(Math.abs(byId.get(id)!.value! - expected[i]!.score) < 1e-5);
      assert.equal(byId.get(id)!.sources[0]!.kind, 'skipped');
    });
    const row = store.listRewards(withoutAnswer[0]!).at(-1)!;
    assert.deepEqual([row.name, row.source], ['reward', 'model']);
    assert.match(row.reason!, /^first available: model = /);
  });

  test('--unrated selects rollouts without rewards; a reward function error is reported per rollout and writes no row', async (t) => {
    const { store } = setup(t);
    const rated = recordRollout(store, { answer: 'fine' });
    store.addReward(parsed('addReward', { rolloutId: rated, value: 1 }));
    const ok = recordRollout(store, { answer: 'fine' });
    const bad = recordRollout(store, { answer: 'bad' });
    const result = await score(store, {
      unrated: true,
      spec: {
        sources: [
          { type: 'function', module: path.join(__dirname, '..', 'fixtures', 'rewards', 'functions', 'throws.mjs') },
        ],
      },
    });
    assert.deepEqual(result.results.map((r) => r.rolloutId).sort(), [ok, bad].sort());
    assert.deepEqual([result.scored, result.unscored, result.errors], [1, 1, 1]);
    assert.match(JSON.stringify(result.results.find((r) => r.rolloutId === bad)), /TypeError: cannot read the answer/);
    assert.equal(store.listRewards(bad).length, 0);
    assert.equal(store.listRewards(rated).length, 1);
  });

  test('cancelling stops between chunks; what was scored is kept', async (t) => {
    const { store } = setup(t);
    for (let i = 0; i < 600; i += 1) recordRollout(store, { answer: String(i), task: { id: `t${i}`, input: i } });
    const controller = new AbortController();
    const progress: number[] = [];
    const result = await score(
      store,
      { spec: { sources: [{ type: 'rule', rule: { rule: 'steps-penalty', max: 5 } }] } },
      controller.signal,
      (p) => {
        progress.push(p.done);
        controller.abort();
      },
    );
    assert.equal(result.cancelled, true);
    assert.deepEqual(progress, [256]);
    assert.equal(store.stats().rewards, 256 * 2);
  });

  test('bad configs are refused with errors naming the file and the field; nothing is written', async (t) => {
    const { store, dir } = setup(t);
    recordRollout(store, { answer: 'x' });
    const file = path.join(dir, 'bad.json');
    const refuse = (config: unknown, message: RegExp): void => {
      fs.writeFileSync(file, typeof config === 'string' ? config : JSON.stringify(config));
      assert.throws(() => loadRewardsFile(file), message);
    };
    refuse('{ not json', /bad\.json: not valid JSON/);
    refuse({}, /give a `default` spec or at least one entry in `datasets`/);
    refuse({ default: { sources: [{ type: 'oracle' }] } }, /default\.sources\.0\.type/);
    refuse(
      { default: { sources: [{ type: 'rule', rule: { rule: 'tool-called' } }] } },
      /default\.sources\.0\.rule\.tool/,
    );
    refuse(
      { default: { sources: [{ type: 'rule', rule: { rule: 'numeric', absTol: -1 } }] } },
      /default\.sources\.0\.rule\.absTol/,
    );
    refuse({ default: { sources: [] } }, /default\.sources: sources must name at least one reward source/);
    refuse(
      { datasets: { math: { combine: 'max', sources: [{ type: 'rule', rule: { rule: 'exact' } }] } } },
      /datasets\.math\.combine/,
    );
    refuse(
      { default: { sources: [{ type: 'judge', model: 'm', rubric: 'r', apiKeyEnv: 'not a name' }] } },
      /default\.sources\.0\.apiKeyEnv/,
    );
    refuse(
      {
        default: {
          sources: [
            { type: 'rule', rule: { rule: 'exact' } },
            { type: 'rule', rule: { rule: 'exact', caseSensitive: false } },
          ],
        },
      },
      /default\.sources\.1\.name: sources 0 and 1 are both named rule\.exact/,
    );
    refuse(
      { default: { sources: [{ type: 'rule', name: 'reward', rule: { rule: 'exact' } }] } },
      /default\.sources\.0\.name: reward is the combined reward's name/,
    );
    await assert.rejects(
      score(store, { rewardsFile: path.join(dir, 'missing.json') }),
      /no rewards config at .*missing\.json/,
    );
    await assert.rejects(
      score(store, { spec: { sources: [{ type: 'model', path: 'nowhere.onnx' }] } }),
      /reward model .*nowhere\.onnx does not exist/,
    );
    assert.equal(store.stats().rewards, 0);
  });
});
