// needs: torch
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { TrainingRunDetail, metricPoints, checkpointsOf } from '../../trainer-daemon/protocol';
import { Store } from '../../trainer-daemon/store/store';
import { REPO_ROOT, runCli } from '../helpers/daemon';
import { tempDir } from '../helpers/tmp';
import { parsed } from '../helpers/params';

test('npm run demo (shortened) trains the sample agent offline and leaves the run, its rollouts, metrics, checkpoints and a chart in .lightning', async (t) => {
  const cwd = tempDir(t);
  const child = spawn(process.execPath, [path.join(REPO_ROOT, 'dist', 'demo.js')], {
    cwd,
    // The user's OpenAI settings must not be used: the demo's agent talks to the policy being trained.
    env: {
      ...process.env,
      LIGHTNING_DEMO_ITERATIONS: '1',
      LIGHTNING_DEMO_WARM_START_STEPS: '60',
      OPENAI_BASE_URL: 'http://127.0.0.1:9/v1',
      OPENAI_API_KEY: 'sk-should-not-be-used-0123456789',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  assert.equal(code, 0, out);
  assert.match(out, /^ITER\s+REWARD\s+VAL\s+LOSS/m);
  assert.match(out, /^start\s+-\s+\d\.\d\d/m);
  assert.match(out, /^1\s+\d\.\d\d ± \d\.\d\d/m);
  assert.match(out, /Run train-\w+ succeeded in \d+ s\./);
  assert.match(out, /validation reward\s+\d\.\d\d → \d\.\d\d/);

  const store = Store.open(path.join(cwd, '.lightning', 'store.db'), { readonly: true });
  t.after(() => store.close());
  const [run] = store.trainingRunRecords();
  assert.ok(run);
  const detail = TrainingRunDetail.parse(store.getTrainingRun(run.id));
  assert.equal(detail.run.status, 'succeeded');
  const at = (name: string): number[] => metricPoints(detail.metrics, name).map((p) => p.step);
  // A shortened warm start (the full demo stops it once the demonstrations are copied well enough);
  // from random weights the loss is ln(259) ≈ 5.6.
  assert.ok(metricPoints(detail.metrics, 'sft/loss')[0]!.value < 2.5, 'the warm start learned from the demonstrations');
  assert.equal(metricPoints(detail.metrics, 'sft/steps')[0]!.value, 60);
  assert.deepEqual(at('reward/mean'), [1]);
  assert.deepEqual(at('val/reward'), [0, 1]);
  // Every whole answer is a transition, those of tasks whose rollouts all agree too (advantage 0, kept in the
  // normaliser and the KL as TRL's GRPOTrainer keeps them), so the update runs every iteration; that it learns is
  // test/integration/training-learning.test.ts.
  const transitions = metricPoints(detail.metrics, 'transitions')[0]!.value;
  assert.ok(transitions > 0, "the iteration's whole answers are transitions");
  assert.ok(metricPoints(detail.metrics, 'zeroVarianceGroups')[0]!.value <= 16);
  assert.deepEqual(at('loss'), [1]);
  for (const point of metricPoints(detail.metrics, 'maxRatioDeviation'))
    assert.ok(point.value < 1e-3, 'exact token ids: training logprobs equal the served ones');
  assert.deepEqual(
    checkpointsOf(detail).map((c) => c.step),
    [0, 1],
  );
  for (const checkpoint of checkpointsOf(detail))
    assert.ok(fs.readdirSync(checkpoint.path).length > 0, `${checkpoint.path} holds the checkpoint`);

  // Every rollout was the real agent through the proxy: LLM calls with exact token ids, the agent's reward.
  const train = store.listRollouts(parsed('listRollouts', { batchId: `${run.id}-train-0`, limit: 500 })).items;
  assert.equal(train.length, 16 * 8);
  assert.ok(train.every((r) => r.status === 'succeeded' && r.reward !== null && r.llmCalls >= 1 && r.mode === 'train'));
  const spans = store.getRolloutDetail(train[0]!.id).spans.filter((s) => s.category === 'llm');
  assert.ok(Array.isArray(spans[0]!.attributes['lightning.response_token_ids']));
  assert.equal(store.listRollouts(parsed('listRollouts', { mode: 'val', limit: 500 })).items.length, 2 * 32);

  const chart = fs.readFileSync(path.join(cwd, '.lightning', 'demo', `${run.id}.html`), 'utf8');
  assert.match(chart, /<svg[\s\S]*<polyline[\s\S]*Validation reward/);
  const listed = await runCli(['train', '--list'], { cwd });
  assert.match(listed.stdout, new RegExp(`${run.id}\\s+grpo\\s+succeeded\\s+1`));
});
