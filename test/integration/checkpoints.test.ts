// needs: torch
/**
 * Checkpoints on disk, with real parts: a GRPO run of the tiny policy in the daemon keeps its best and last
 * checkpoints (optimizer state only in the newest), is cancelled and resumed from that newest one, and `lightning
 * checkpoints` shows sizes and the run's total; `checkpoints delete` frees one; the tiny policy's export is refused
 * with the reason. Exports of Hugging Face checkpoints: checkpointsExport.test.ts.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { GrpoConfig, type GrpoConfigInput, type TrainingRunDetail, checkpointsOf } from '../../trainer-daemon/protocol';
import { formatBytes } from '../../trainer-daemon/protocol/format';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { Store } from '../../trainer-daemon/store/store';
import { toolsTasks } from '../../trainer-daemon/demo/tasks';
import { REPO_ROOT, runCli, startDaemon } from '../helpers/daemon';
import { tempDir, waitFor } from '../helpers/tmp';
import { parsed } from '../helpers/params';

const AGENT = path.join(REPO_ROOT, 'trainer-daemon', 'demo', 'sample-agent.mjs');

async function untilFinal(client: RpcClient, id: string): Promise<TrainingRunDetail> {
  return waitFor(
    async () => {
      const detail = await client.request('getTrainingRun', { id });
      return ['succeeded', 'failed', 'cancelled'].includes(detail.run.status) ? detail : undefined;
    },
    `training run ${id} to end`,
    180_000,
  );
}

test('retention keeps the best and the last checkpoint, optimizer state only in the newest; resume continues from it; sizes and delete', async (t) => {
  const cwd = tempDir(t);
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  const daemon = await startDaemon(storeFile, [], { OPENAI_BASE_URL: '', OPENAI_API_KEY: '' });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(async () => {
    client.dispose();
    await daemon.stop();
  });
  await client.request('importDataset', { name: 'tools', tasks: toolsTasks(16, 8) });
  const config: GrpoConfigInput = {
    model: { kind: 'tiny', config: { dModel: 48, layers: 2, heads: 4, context: 64 } },
    dataset: 'tools',
    iterations: 4,
    samples: 4,
    tasksPerIteration: 2,
    agentMode: 'worker',
    workers: 1,
    perWorker: 32,
    evalEvery: 1,
    device: 'cpu',
    python: '/usr/bin/python3',
    command: { argv: [process.execPath, path.basename(AGENT)], cwd: path.dirname(AGENT) },
    keepCheckpoints: 1,
  };
  const run = await client.request('startTraining', { config: GrpoConfig.parse(config) });
  await waitFor(
    async () =>
      (await client.request('getTrainingRun', { id: run.id })).metrics.some(
        (m) => m.step === 2 && m.name === 'val/reward',
      ),
    'the second iteration',
    180_000,
  );
  await client.request('cancelTrainingRun', { id: run.id });
  const stopped = await untilFinal(client, run.id);
  assert.equal(stopped.run.status, 'cancelled');

  const checkRetained = (detail: TrainingRunDetail): void => {
    const kept = checkpointsOf(detail);
    const newest = kept.at(-1)!;
    const val = new Map(
      detail.metrics
        .filter((m) => m.name === 'val/reward' && kept.some((c) => c.step === m.step))
        .map((m) => [m.step, m.value]),
    );
    const best = Math.max(
      ...detail.metrics
        .filter((m) => m.name === 'val/reward' && m.step > 0 && m.step <= newest.step)
        .map((m) => m.value),
    );
    assert.ok(kept.length <= 2, `kept: the best and the last (steps ${kept.map((c) => c.step).join(', ')})`);
    assert.ok(
      [...val.values()].includes(best),
      `the best validation reward (${best}) is among the kept: ${JSON.stringify([...val])}`,
    );
    for (const c of kept) {
      assert.equal(c.optimizerState, c.id === newest.id, `optimizer state at step ${c.step}`);
      assert.equal(fs.existsSync(path.join(c.path, 'optimizer.pt')), c.id === newest.id);
      assert.ok(c.bytes! > 0);
    }
    const left = fs
      .readdirSync(path.join(cwd, '.lightning', 'checkpoints', run.id))
      .filter((name) => !name.startsWith('.'));
    assert.deepEqual(
      left.sort(),
      kept.map((c) => String(c.step)).sort(),
      'the folders of deleted checkpoints are gone',
    );
  };
  checkRetained(stopped);
  const resumedFrom = checkpointsOf(stopped).at(-1)!;

  await client.request('startTraining', { resume: run.id });
  const done = await untilFinal(client, run.id);
  assert.equal(done.run.status, 'succeeded', done.run.error ?? '');
  assert.equal(checkpointsOf(done).at(-1)!.step, 4);
  checkRetained(done);
  // The first batch after the resume was served by the newest checkpoint, the one that kept its optimizer state.
  const store = Store.open(storeFile, { readonly: true });
  t.after(() => store.close());
  const next = store.listRollouts(parsed('listRollouts', { batchId: `${run.id}-train-${resumedFrom.step}`, limit: 1 }))
    .items[0]!;
  const policy = store.db
    .prepare<[number], { value: string }>(`SELECT value FROM resources WHERE name = 'policy' AND version = ?`)
    .get(next.resourcesVersion!)!;
  assert.equal(JSON.parse(policy.value).checkpoint, resumedFrom.path);

  const listed = await runCli(['checkpoints', '--store', storeFile, '--run', run.id], { cwd });
  assert.equal(listed.code, 0, listed.stderr);
  assert.match(listed.stdout, /SIZE/);
  const newest = checkpointsOf(done).at(-1)!;
  assert.ok(
    listed.stdout
      .split('\n')
      .some((line) => line.startsWith(newest.id) && line.includes(`${formatBytes(newest.bytes!)} +optimizer`)),
    listed.stdout,
  );
  const total = checkpointsOf(done).reduce((sum, c) => sum + c.bytes!, 0);
  const count = checkpointsOf(done).length;
  assert.ok(
    listed.stdout.includes(`run ${run.id}: ${count} checkpoint${count === 1 ? '' : 's'}, ${formatBytes(total)}`),
    listed.stdout,
  );

  // The tiny policy has no standard format: said, with the reason, and nothing written.
  const tiny = await runCli(
    ['checkpoints', 'export', checkpointsOf(done).at(-1)!.id, '--format', 'hf', '--out', 'out', '--store', storeFile],
    { cwd },
  );
  assert.notEqual(tiny.code, 0);
  assert.match(tiny.stderr, /tiny built-in policy .*not a transformers architecture/);
  assert.equal(fs.existsSync(path.join(cwd, 'out')), false);

  // Delete the oldest kept checkpoint, whichever retention kept (the best and the last may be one): a finished run's
  // newest may go too.
  const older = checkpointsOf(done)[0]!;
  const deleted = await runCli(['checkpoints', 'delete', older.id, '--store', storeFile], { cwd });
  assert.equal(deleted.code, 0, deleted.stderr);
  assert.equal(deleted.stdout.trim(), `Deleted ${older.id} (${formatBytes(older.bytes!)} freed)`);
  assert.equal(fs.existsSync(older.path), false);
  assert.deepEqual(
    (await client.request('listCheckpoints', { runId: run.id })).items.map((c) => c.id),
    checkpointsOf(done)
      .slice(1)
      .map((c) => c.id),
  );
  const again = await runCli(['checkpoints', 'delete', older.id, '--store', storeFile], { cwd });
  assert.notEqual(again.code, 0, 'a deleted checkpoint is gone');
  assert.match(again.stderr, new RegExp(older.id));
});
