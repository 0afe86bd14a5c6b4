// needs: torch
/**
 * GRPO on automatic rewards: the agent reports no reward; the rules of the run's rewards file score
 * every rollout before LightningRL builds transitions, so the advantages come from them.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { GrpoConfig, metricPoints, type TrainingRunDetail } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { DaemonError } from '../../trainer-daemon/protocol/errors';
import { Store } from '../../trainer-daemon/store/store';
import { toolsTasks } from '../../trainer-daemon/demo/tasks';
import { startDaemon } from '../helpers/daemon';
import { tempDir, waitFor } from '../helpers/tmp';
import { parsed } from '../helpers/params';

/** Asks the policy once and prints what it answered; posts no reward. */
const AGENT = `
const task = JSON.parse(process.env.LIGHTNING_TASK);
const res = await fetch(process.env.OPENAI_BASE_URL + '/chat/completions', {
  method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer unused' },
  body: JSON.stringify({ model: 'policy', messages: [{ role: 'user', content: task.question }], max_tokens: 6 }),
});
if (!res.ok) throw new Error('policy: HTTP ' + res.status);
const answer = (await res.json()).choices[0].message.content ?? '';
console.log(JSON.stringify({ answer }));
`;

/** The rule, as the test computes it on its own from what each agent printed. */
const PATTERN = '^[\\s\\S]{0,3}[a-m]';

test('grpo trains on the rewards file’s rule rewards (validation too); a bad rewards file is refused before a run is recorded', async (t) => {
  const cwd = tempDir(t);
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  fs.writeFileSync(path.join(cwd, 'agent.mjs'), AGENT);
  fs.writeFileSync(
    path.join(cwd, 'rules.json'),
    JSON.stringify({
      default: { sources: [{ type: 'rule', name: 'early-a-to-m', rule: { rule: 'regex', pattern: PATTERN } }] },
    }),
  );
  const daemon = await startDaemon(storeFile, [], { OPENAI_BASE_URL: '', OPENAI_API_KEY: '' });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(async () => {
    client.dispose();
    await daemon.stop();
  });
  await client.request('importDataset', { name: 'tools', tasks: toolsTasks(8, 2) });
  const config = (rewardsFile: string) =>
    GrpoConfig.parse({
      model: { kind: 'tiny', config: { dModel: 32, layers: 1, heads: 2, context: 64 } },
      dataset: 'tools',
      iterations: 1,
      samples: 4,
      tasksPerIteration: 3,
      workers: 4,
      evalEvery: 1,
      device: 'cpu',
      python: '/usr/bin/python3',
      seed: 5,
      rewardsFile,
      command: { argv: [process.execPath, path.join(cwd, 'agent.mjs')], cwd },
    });

  const bad = await client
    .request('startTraining', { config: config(path.join(cwd, 'missing.json')) })
    .catch((error: unknown) => error);
  assert.ok(bad instanceof DaemonError && bad.code === -32602, String(bad));
  assert.match(bad.message, /params\.config\.rewardsFile: no rewards config at .*missing\.json/);
  assert.equal((await client.request('listTrainingRuns', {})).items.length, 0);

  const run = await client.request('startTraining', { config: config(path.join(cwd, 'rules.json')) });
  const done = await waitFor(
    async () => {
      const detail: TrainingRunDetail = await client.request('getTrainingRun', { id: run.id });
      return ['succeeded', 'failed', 'cancelled'].includes(detail.run.status) ? detail : undefined;
    },
    'the run to end',
    180_000,
  );
  assert.equal(done.run.status, 'succeeded', done.run.error ?? '');

  const store = Store.open(storeFile, { readonly: true });
  t.after(() => store.close());
  const logs = path.join(cwd, '.lightning', 'logs', run.id);
  /** Each rollout of a batch: the reward the store chose, and the one the rule gives what its agent printed. */
  const batch = (name: string) =>
    store.listRollouts(parsed('listRollouts', { batchId: `${run.id}-${name}`, limit: 100 })).items.map((r) => {
      const log = fs.readFileSync(path.join(logs, `${run.id}-${name}`, `${r.id}.1.log`), 'utf8');
      assert.equal(r.status, 'succeeded', log);
      const printed = JSON.parse(log.trim()) as { answer: string };
      const rows = store.listRewards(r.id);
      assert.ok(
        rows.every((row) => row.source === 'rule' && row.reason !== null),
        'only the rule scored it, with a reason',
      );
      return { task: r.task?.id ?? null, reward: r.reward, expected: new RegExp(PATTERN).test(printed.answer) ? 1 : 0 };
    });
  const train = batch('train-0');
  assert.equal(train.length, 12);
  assert.deepEqual(
    train.map((r) => r.reward),
    train.map((r) => r.expected),
  );
  const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
  assert.equal(
    metricPoints(done.metrics, 'reward/mean').find((p) => p.step === 1)!.value,
    mean(train.map((r) => r.expected)),
  );
  // Advantages follow the rule's rewards: a group whose rewards are all equal has advantage 0 and counts as a
  // zero-variance group; its transitions still reach the update (as TRL keeps them), so the policy is updated.
  const groups = new Map<string | null, number[]>();
  for (const r of train) groups.set(r.task, [...(groups.get(r.task) ?? []), r.expected]);
  const uniform = [...groups.values()].filter((rewards) => new Set(rewards).size === 1).length;
  assert.equal(metricPoints(done.metrics, 'zeroVarianceGroups').find((p) => p.step === 1)!.value, uniform);
  const transitions = metricPoints(done.metrics, 'transitions').find((p) => p.step === 1)!.value;
  assert.ok(transitions > 0, `transitions trained on: ${transitions}`);
  assert.ok(metricPoints(done.metrics, 'loss').some((p) => p.step === 1));
  const val = batch('val-1');
  assert.equal(val.length, 2);
  assert.deepEqual(
    val.map((r) => r.reward),
    val.map((r) => r.expected),
  );
  assert.equal(
    metricPoints(done.metrics, 'val/reward').find((p) => p.step === 1)!.value,
    mean(val.map((r) => r.expected)),
  );
});
