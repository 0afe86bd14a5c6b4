// needs: torch, venv
/**
 * `lightning train --nproc-per-node 2 --fsdp`: a GRPO run whose trainer worker shards the tiny policy across 2
 * torchrun ranks (gloo on the CPU, the test venv's torch 2), with the real daemon and the sample agent as a worker;
 * Debian's torch 1.13 is refused before the run starts (nothing recorded), naming the version needed and the fix.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import { runCli } from '../helpers/daemon';
import { daemonWithTools, distributedConfig, runEnded } from '../helpers/distributedTraining';
import { checkpointsOf } from '../../trainer-daemon/protocol';

test('train --nproc-per-node 2 --fsdp: a GRPO run on 2 sharded ranks (torch 2); refused before it starts on torch 1.13, naming the fix', async (t) => {
  const python = process.env.LIGHTNING_TEST_PYTHON;
  assert.ok(
    python,
    'LIGHTNING_TEST_PYTHON is unset: point it at a Python with trainer-daemon/python/requirements-test.txt installed (torch 2)',
  );
  const { cwd, storeFile, client } = await daemonWithTools(t);
  const configOf = (interpreter: string) =>
    distributedConfig(cwd, {
      iterations: 2,
      python: interpreter,
      distributed: { nprocPerNode: 2, fsdp: true },
      lossType: 'grpo',
    });
  const ended = (id: string) => runEnded(client, id, 'the run to end', 200_000);

  // Debian's torch 1.13 has no FSDP2: refused before a run is recorded or a worker starts, naming the fix.
  await assert.rejects(client.request('startTraining', { config: configOf('/usr/bin/python3') }), (error: Error) => {
    assert.match(
      error.message,
      /params\.config\.distributed\.fsdp: --fsdp needs torch 2\.6 or later .*\/usr\/bin\/python3 has torch 1\.13.*point --python at a Python with a newer torch.*or train without --fsdp/,
    );
    return true;
  });
  assert.deepEqual((await client.request('listTrainingRuns', {})).items, [], 'no run was recorded');
  const cli = await runCli(
    [
      'train',
      '--model',
      'tiny',
      '--dataset',
      'tools',
      '--nproc-per-node',
      '2',
      '--fsdp',
      '--python',
      '/usr/bin/python3',
      '--store',
      storeFile,
      '--',
      'node',
      'agent.mjs',
    ],
    { cwd },
  );
  assert.equal(cli.code, 2, cli.stderr);
  assert.match(cli.stderr, /--fsdp needs torch 2\.6 or later/);

  const run = await client.request('startTraining', { config: configOf(python) });
  const done = await ended(run.id);
  assert.equal(done.run.status, 'succeeded', done.run.error ?? '');
  assert.deepEqual(
    checkpointsOf(done).map((c) => c.step),
    [1, 2],
  );
  // Every iteration updates (zero-advantage rows are kept, as TRL keeps them), on both ranks, whatever its row count.
  assert.ok(
    checkpointsOf(done).every((c) => c.metrics.loss !== undefined && c.metrics.worldSize === 2),
    JSON.stringify(checkpointsOf(done).map((c) => c.metrics)),
  );
  assert.deepEqual(fs.readdirSync(checkpointsOf(done).at(-1)!.path).sort(), [
    'config.json',
    'metrics.json',
    'optimizer.pt',
    'trainable.pt',
  ]);
  const list = await runCli(['train', '--list', '--store', storeFile]);
  assert.match(
    list.stdout,
    new RegExp(`${run.id}\\s+grpo\\s+succeeded\\s+2\\s+\\S+\\s+\\S+\\s+torchrun 2 ranks \\(FSDP\\)`),
  );
});
