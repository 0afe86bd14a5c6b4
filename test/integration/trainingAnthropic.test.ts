// needs: torch
/**
 * `lightning train` on an agent written on the Anthropic SDK: its Messages API calls are answered by
 * the tiny policy through chat completions (the proxy translates both ways), recorded with the
 * policy's exact token ids, and trained on by GRPO — the agent's code knows nothing of it.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { metricPoints, checkpointsOf } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { toolsTasks } from '../../trainer-daemon/demo/tasks';
import { REPO_ROOT, runCli, startDaemon } from '../helpers/daemon';
import { tempDir } from '../helpers/tmp';

const AGENT = path.join(REPO_ROOT, 'test', 'fixtures', 'agents', 'anthropic-tools-agent.mjs');

test('lightning train trains an Anthropic-SDK agent on the tiny policy, with exact token ids', async (t) => {
  const cwd = tempDir(t);
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  const daemon = await startDaemon(storeFile, [], {
    OPENAI_BASE_URL: '',
    OPENAI_API_KEY: '',
    ANTHROPIC_BASE_URL: '',
    ANTHROPIC_API_KEY: '',
  });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(async () => {
    client.dispose();
    await daemon.stop();
  });
  await client.request('importDataset', { name: 'tools', tasks: toolsTasks(16, 8) });

  const trained = await runCli(
    [
      'train',
      '--model',
      'tiny',
      '--dataset',
      'tools',
      '--iterations',
      '2',
      '--samples',
      '4',
      '--tasks-per-iteration',
      '4',
      '--eval-every',
      '2',
      '--agent-mode',
      'worker',
      '--workers',
      '1',
      '--per-worker',
      '16',
      '--device',
      'cpu',
      '--python',
      '/usr/bin/python3',
      '--json',
      '--',
      process.execPath,
      AGENT,
    ],
    { cwd, env: { ANTHROPIC_BASE_URL: '', ANTHROPIC_API_KEY: '' } },
  );
  assert.equal(trained.code, 0, trained.stderr);

  const {
    items: [run],
  } = await client.request('listTrainingRuns', {});
  assert.equal(run?.status, 'succeeded', run?.error ?? trained.stderr);
  const detail = await client.request('getTrainingRun', { id: run.id });
  assert.deepEqual(
    metricPoints(detail.metrics, 'reward/mean').map((p) => p.step),
    [1, 2],
  );
  assert.equal(checkpointsOf(detail).length, 2);

  // The training rollouts' calls: the agent's Messages API requests, answered with the policy's token ids.
  const { items: rollouts } = await client.request('listRollouts', { batchId: `${run.id}-train-1`, limit: 100 });
  assert.equal(rollouts.length, 16);
  const spans = (await client.request('listSpans', { rolloutId: rollouts[0]!.id })).items.filter(
    (s) => s.category === 'llm',
  );
  assert.ok(spans.length >= 1);
  for (const span of spans) {
    assert.equal(span.attributes['lightning.api'], 'anthropic.messages');
    assert.equal(span.attributes['lightning.translated_to'], 'chat.completions');
    assert.ok(
      Array.isArray(span.attributes['lightning.prompt_token_ids']) &&
        Array.isArray(span.attributes['lightning.response_token_ids']),
      'exact token ids recorded',
    );
    assert.ok(Array.isArray(span.attributes['lightning.response_logprobs']), 'behaviour logprobs recorded');
  }
  assert.ok(
    rollouts.every((r) => r.status === 'succeeded'),
    JSON.stringify(rollouts.map((r) => [r.status, r.error])),
  );
});
