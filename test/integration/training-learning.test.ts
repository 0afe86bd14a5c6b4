// needs: torch
/**
 * The closed loop learns: a dense-reward task the tiny policy starts out bad at (reply with digits;
 * reward = the fraction of digits in the reply), trained from random weights through the whole stack —
 * daemon, long-lived agent workers, the recording proxy, LightningRL, the Python worker — improves the
 * sampled reward, for two seeds, by a generous margin, in a bounded number of iterations (15).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { GrpoConfig, metricPoints } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon } from '../helpers/daemon';
import { tempDir, waitFor } from '../helpers/tmp';

/** An agent worker: one chat call per rollout, rewarded by the share of digits in the reply. */
const AGENT = `
const post = (url, body) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body ?? {}) });
async function work() {
  for (;;) {
    const next = await post(process.env.LIGHTNING_RUNNER_URL + '/next');
    if (next.status === 204) return;
    const { url, task } = await next.json();
    const response = await post(url + '/v1/chat/completions', { model: 'policy', messages: [{ role: 'user', content: task.prompt }], max_tokens: 8 });
    const text = (await response.json()).choices?.[0]?.message?.content ?? '';
    const digits = [...text].filter((c) => c >= '0' && c <= '9').length;
    await post(url + '/reward', { value: digits / 8 });
    await post(url + '/finish', { status: response.ok ? 'succeeded' : 'failed' });
  }
}
Promise.all(Array.from({ length: Number(process.env.LIGHTNING_RUNNER_CONCURRENCY) }, work));
`;

async function learn(t: Parameters<typeof tempDir>[0], seed: number): Promise<number[]> {
  const cwd = tempDir(t);
  fs.writeFileSync(path.join(cwd, 'agent.js'), AGENT);
  const daemon = await startDaemon(path.join(cwd, '.lightning', 'store.db'));
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  try {
    const tasks = ['a number', 'digits', 'count', 'pin'].map((prompt, i) => ({
      id: `t${i}`,
      split: 'train' as const,
      input: { prompt },
      expected: null,
    }));
    await client.request('importDataset', { name: 'digits', tasks });
    const config = GrpoConfig.parse({
      model: { kind: 'tiny', config: { dModel: 48, layers: 2, heads: 4, context: 32 } },
      dataset: 'digits',
      iterations: 15,
      samples: 8,
      lr: 3e-3,
      epochs: 4,
      minibatch: 16,
      seed,
      agentMode: 'worker',
      workers: 1,
      perWorker: 32,
      device: 'cpu',
      python: '/usr/bin/python3',
      command: { argv: [process.execPath, path.join(cwd, 'agent.js')], cwd },
    });
    const { id } = await client.request('startTraining', { config });
    const detail = await waitFor(
      async () => {
        const d = await client.request('getTrainingRun', { id });
        return d.run.status !== 'running' ? d : undefined;
      },
      'the run to end',
      250_000,
    ); // within the runner's 300 s per file; a loaded 2-core machine needs more than a quiet one
    assert.equal(detail.run.status, 'succeeded', detail.run.error ?? '');
    for (const point of metricPoints(detail.metrics, 'maxRatioDeviation'))
      assert.ok(point.value < 1e-3, 'the update sees the served logprobs');
    return metricPoints(detail.metrics, 'reward/mean').map((p) => p.value);
  } finally {
    client.dispose();
    await daemon.stop();
  }
}

test('GRPO through the whole stack raises the reward of a task the tiny policy starts out bad at (2 seeds)', async (t) => {
  const [a, b] = await Promise.all([learn(t, 0), learn(t, 1)]);
  for (const rewards of [a, b]) {
    const mean = (xs: number[]): number => xs.reduce((x, y) => x + y, 0) / xs.length;
    const before = mean(rewards.slice(0, 3));
    const after = mean(rewards.slice(-3));
    t.diagnostic(`sampled reward per iteration: ${rewards.map((r) => r.toFixed(2)).join(' ')}`);
    assert.ok(
      after > before + 0.15,
      `sampled reward first 3 → last 3 iterations: ${before.toFixed(2)} → ${after.toFixed(2)} (${rewards.map((r) => r.toFixed(2)).join(' ')})`,
    );
  }
});
