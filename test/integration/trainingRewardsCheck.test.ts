// needs: torch
/**
 * A GRPO run's rewards file is checked when the run starts — for a resume too, and the default
 * `.lightning/rewards.json` as well — so a missing or broken one is refused before any trainer
 * process starts, not after the worker has loaded the model.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { GrpoConfig, type TrainingRunDetail } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { DaemonError } from '../../trainer-daemon/protocol/errors';
import { toolsTasks } from '../../trainer-daemon/demo/tasks';
import { startDaemon } from '../helpers/daemon';
import { tempDir, waitFor } from '../helpers/tmp';

test('a resume whose rewards file was deleted, and a new run with a broken default rewards file, are refused before a trainer starts', async (t) => {
  const cwd = tempDir(t);
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  const rules = path.join(cwd, 'rules.json');
  fs.writeFileSync(
    rules,
    JSON.stringify({ default: { sources: [{ type: 'rule', name: 'any', rule: { rule: 'regex', pattern: '.' } }] } }),
  );
  // The run's "Python": it notes each time it is started, then fails (so the first run fails fast and can be resumed).
  const marker = path.join(cwd, 'python-started');
  const python = path.join(cwd, 'python');
  fs.writeFileSync(python, `#!/bin/sh\necho started >> ${JSON.stringify(marker)}\nexit 1\n`, { mode: 0o755 });
  const daemon = await startDaemon(storeFile, [], { OPENAI_BASE_URL: '', OPENAI_API_KEY: '' });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(async () => {
    client.dispose();
    await daemon.stop();
  });
  await client.request('importDataset', { name: 'tools', tasks: toolsTasks(4, 2) });
  const config = (rewardsFile: string | null) =>
    GrpoConfig.parse({
      model: { kind: 'tiny' },
      dataset: 'tools',
      iterations: 1,
      device: 'cpu',
      python,
      rewardsFile,
      command: { argv: [process.execPath, '-e', ''], cwd },
    });
  const refusal = (promise: Promise<unknown>) =>
    promise.then(
      (value) => assert.fail(`expected a refusal, got ${JSON.stringify(value)}`),
      (error: unknown) => error,
    );

  const started = await client.request('startTraining', { config: config(rules) });
  const failed = await waitFor(
    async () => {
      const detail: TrainingRunDetail = await client.request('getTrainingRun', { id: started.id });
      return detail.run.status === 'failed' ? detail.run : undefined;
    },
    'the first run to fail on its Python',
    60_000,
  );
  assert.ok(fs.existsSync(marker), 'the first run started its Python');
  fs.rmSync(marker);

  fs.rmSync(rules);
  const resumed = await refusal(client.request('startTraining', { resume: started.id }));
  assert.ok(resumed instanceof DaemonError && resumed.code === -32602, String(resumed));
  assert.match(
    resumed.message,
    new RegExp(`params\\.resume: run ${started.id}'s config\\.rewardsFile: no rewards config at .*rules\\.json`),
  );
  assert.deepEqual((await client.request('getTrainingRun', { id: started.id })).run, failed, 'the run stays as it was');
  assert.ok(!fs.existsSync(marker), 'no trainer process was started');

  const defaultFile = path.join(cwd, '.lightning', 'rewards.json');
  fs.writeFileSync(defaultFile, '{ not json');
  const fresh = await refusal(client.request('startTraining', { config: config(null) }));
  assert.ok(fresh instanceof DaemonError && fresh.code === -32602, String(fresh));
  assert.match(
    fresh.message,
    /^params\.config\.rewardsFile \(null: the default .*rewards\.json\): .*rewards\.json: not valid JSON/,
  );
  assert.deepEqual(
    (await client.request('listTrainingRuns', {})).items.map((run) => run.id),
    [started.id],
    'no run was recorded',
  );
  assert.ok(!fs.existsSync(marker), 'no trainer process was started');
});
