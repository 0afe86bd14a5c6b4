// needs: torch, venv
/**
 * `lightning train --nproc-per-node 2 --fsdp`: a GRPO run whose trainer worker shards the tiny policy across 2
 * torchrun ranks (gloo on the CPU, the test venv's torch 2), with the real daemon and the sample agent as a worker;
 * Debian's torch 1.13 is refused naming the version needed.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import { runCli } from '../helpers/daemon';
import { daemonWithTools, distributedConfig, runEnded } from '../helpers/distributedTraining';

test('train --nproc-per-node 2 --fsdp: a GRPO run on 2 sharded ranks (torch 2); refused on torch 1.13 naming the version needed', async (t) => {
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

  const old = await client.request('startTraining', { config: configOf('/usr/bin/python3') });
  const refused = await ended(old.id);
  assert.equal(refused.run.status, 'failed');
  assert.match(refused.run.error ?? '', /FSDP \(--fsdp\) needs torch 2\.6 or later .*this worker's torch is 1\.13/);

  const run = await client.request('startTraining', { config: configOf(python) });
  const done = await ended(run.id);
  assert.equal(done.run.status, 'succeeded', done.run.error ?? '');
  assert.deepEqual(
    done.checkpoints.map((c) => c.step),
    [1, 2],
  );
  // Every iteration updates (zero-advantage rows are kept, as TRL keeps them), on both ranks, whatever its row count.
  assert.ok(
    done.checkpoints.every((c) => c.metrics.loss !== undefined && c.metrics.worldSize === 2),
    JSON.stringify(done.checkpoints.map((c) => c.metrics)),
  );
  assert.deepEqual(fs.readdirSync(done.checkpoints.at(-1)!.path).sort(), [
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
