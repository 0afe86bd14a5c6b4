/**
 * `datasets/agents`: the names a dataset's recorded calls went by, which Start Training offers as policies. A real
 * daemon records a two-role agent (test/fixtures/agents/two-role-agent.mjs: a planner naming itself in the W3C baggage,
 * a solver and a critic asking for models of their own) run on the dataset by `lightning dataset run` against a
 * scripted upstream; the method counts each agent and model over that dataset's rollouts only; the baggage's agent
 * name is on the call's record, where `--agent` reads it too.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { ListRolloutsParams } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { Store } from '../../trainer-daemon/store/store';
import { REPO_ROOT, runCli, startDaemon } from '../helpers/daemon';
import { startScriptedUpstream } from '../helpers/scriptedUpstream';
import { tempDir } from '../helpers/tmp';

const AGENT = path.join(REPO_ROOT, 'test', 'fixtures', 'agents', 'two-role-agent.mjs');

test("datasets/agents: a dataset's rollouts' agent names (the baggage's) and models, counted; other datasets' left out", async (t) => {
  const cwd = tempDir(t);
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  const upstream = await startScriptedUpstream();
  t.after(() => upstream.close());
  const daemon = await startDaemon(storeFile, [], {
    LIGHTNING_UPSTREAM_URL: upstream.url,
    OPENAI_BASE_URL: '',
    OPENAI_API_KEY: '',
  });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(async () => {
    client.dispose();
    await daemon.stop();
  });
  const question = (id: string, text: string) => ({
    id,
    split: 'train' as const,
    input: { question: text },
    expected: null,
  });
  await client.request('importDataset', {
    name: 'roles',
    tasks: [question('t1', '3 plus 4'), question('t2', '2 times 5')],
  });
  await client.request('importDataset', { name: 'other', tasks: [question('o1', '1 plus 1')] });

  const empty = await client.request('datasetAgents', { dataset: 'roles' });
  assert.deepEqual(empty, { rollouts: 0, agents: [], models: [] }, 'no rollouts yet: nothing to offer');

  for (const [dataset, samples] of [
    ['roles', '2'],
    ['other', '1'],
  ] as const) {
    const run = await runCli(
      ['dataset', 'run', dataset, '--samples', samples, '--store', storeFile, '--', process.execPath, AGENT],
      { cwd },
    );
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
  }

  const seen = await client.request('datasetAgents', { dataset: 'roles' });
  assert.equal(seen.rollouts, 4, '2 tasks × 2 samples of roles; the other dataset’s rollout not read');
  assert.deepEqual(seen.agents, [{ name: 'planner', calls: 4, rollouts: 4 }]);
  assert.deepEqual(seen.models, [
    { name: 'critic', calls: 4, rollouts: 4 },
    { name: 'policy', calls: 4, rollouts: 4 },
    { name: 'solver-model', calls: 4, rollouts: 4 },
  ]);
  const newest = await client.request('datasetAgents', { dataset: 'roles', limit: 1 });
  assert.equal(newest.rollouts, 1);
  assert.deepEqual(newest.agents, [{ name: 'planner', calls: 1, rollouts: 1 }]);

  // The name is on the planner call's own record (as --agent and a policy's REGEX read it), and on no other call.
  const store = Store.open(storeFile, { readonly: true });
  t.after(() => store.close());
  const datasetId = store.listTasks('roles').dataset.id;
  const rollout = store.listRollouts(ListRolloutsParams.parse({ datasetId, limit: 1 })).items[0]!;
  const names = store
    .listSpans(rollout.id, 0, 100)
    .filter((span) => span.category === 'llm')
    .map((span) => [span.attributes['gen_ai.request.model'], span.attributes['gen_ai.agent.name'] ?? null]);
  assert.deepEqual(names, [
    ['policy', 'planner'],
    ['solver-model', null],
    ['critic', null],
  ]);

  await assert.rejects(client.request('datasetAgents', { dataset: 'nope' }), /nope/);
});
