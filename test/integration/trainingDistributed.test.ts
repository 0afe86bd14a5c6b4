// needs: torch
/**
 * `lightning train --nproc-per-node 2`: a GRPO run whose trainer worker runs under torchrun (2 gloo ranks on
 * the CPU, Debian's torch 1.13), with the real daemon, the tiny policy and the sample agent as a worker. A rank
 * killed mid-run fails the run with an error naming the rank and its host; resume continues from the checkpoint.
 * Two machines are two torchrun launchers on this one, meeting at a static rendezvous on loopback.
 * (`--fsdp`: trainingFsdp.test.ts.)
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import { test } from 'node:test';
import { TrainingRunDetail, checkpointsOf } from '../../trainer-daemon/protocol';
import { otherNodeCommand } from '../../trainer-daemon/training/torchrun';
import { REPO_ROOT, runCli } from '../helpers/daemon';
import { waitFor } from '../helpers/tmp';
import { daemonWithTools, distributedConfig, freePort, ranks, runEnded } from '../helpers/distributedTraining';

test('train --nproc-per-node 2: updates on 2 torchrun ranks; a killed rank fails the run naming it and its host; resume finishes it', async (t) => {
  const { cwd, storeFile, client, daemonPid } = await daemonWithTools(t);
  // dr_grpo: its normaliser (the batch's longest response) is the whole batch's on every rank, no flag needed.
  const config = distributedConfig(cwd, {
    iterations: 3,
    python: '/usr/bin/python3',
    distributed: { nprocPerNode: 2 },
    lossType: 'dr_grpo',
  });
  const run = await client.request('startTraining', { config });
  await waitFor(
    async () => (await client.request('listCheckpoints', { runId: run.id })).items.length >= 1,
    'the first checkpoint',
    200_000,
  );
  const pids = ranks(daemonPid);
  assert.deepEqual([...pids.keys()].sort(), [0, 1], 'torchrun runs two ranks');
  process.kill(pids.get(1)!, 'SIGKILL');
  const failed = await runEnded(client, run.id, 'the run to fail', 60_000);
  assert.equal(failed.run.status, 'failed');
  assert.match(
    failed.run.error ?? '',
    /the trainer worker exited unexpectedly \(code 1\): rank 1 \(local rank 1\) on host \S+ was killed by signal 9/,
  );
  const kept = checkpointsOf(failed).at(-1)!;

  await client.request('startTraining', { resume: run.id });
  const done = await runEnded(client, run.id, 'the resumed run to end', 100_000);
  assert.equal(done.run.status, 'succeeded', done.run.error ?? '');
  TrainingRunDetail.parse(done);
  assert.deepEqual(
    checkpointsOf(done)
      .map((c) => c.step)
      .filter((s) => s > kept.step),
    [1, 2, 3].filter((s) => s > kept.step),
  );
  const latest = checkpointsOf(done).at(-1)!;
  // One checkpoint per step, written by rank 0 only.
  assert.deepEqual(fs.readdirSync(latest.path).sort(), ['config.json', 'metrics.json', 'optimizer.pt', 'trainable.pt']);
  const updated = checkpointsOf(done).filter((c) => c.step > 0 && c.metrics.loss !== undefined);
  assert.ok(
    updated.length > 0 && updated.every((c) => c.metrics.worldSize === 2),
    JSON.stringify(checkpointsOf(done).map((c) => c.metrics)),
  );

  // Where the ranks ran, as they reported when they came up (the resumed worker's ranks).
  const host = os.hostname();
  assert.deepEqual(done.run.placement, {
    rayNodes: [],
    ranks: [
      { rank: 0, localRank: 0, host },
      { rank: 1, localRank: 1, host },
    ],
  });
  const list = await runCli(['train', '--list', '--store', storeFile]);
  assert.match(
    list.stdout,
    new RegExp(
      `${run.id}\\s+grpo\\s+succeeded\\s+3\\s+\\S+\\s+\\S+\\s+torchrun 2 ranks on ${host.replace(/\./g, '\\.')}\\s`,
    ),
  );
});

test('train --nnodes 2 --rdzv-endpoint: the second machine joins with the command Lightning prints; updates on ranks of both nodes', async (t) => {
  const { cwd, storeFile, client } = await daemonWithTools(t);
  const distributed = { nprocPerNode: 1, nnodes: 2, rdzvEndpoint: `127.0.0.1:${await freePort()}` };
  const run = await client.request('startTraining', {
    config: distributedConfig(cwd, { iterations: 2, python: '/usr/bin/python3', distributed }),
  });
  // What the CLI prints for the other machines, as a user pastes it there: this checkout, node rank 1.
  const printed = otherNodeCommand(distributed, '/usr/bin/python3')!;
  const command = printed.replace('<checkout>', REPO_ROOT).replace('--node_rank I', '--node_rank 1');
  let output = '';
  const second = spawn('sh', ['-c', `exec env ${command}`], {
    cwd: os.tmpdir(),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  second.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk.toString()));
  second.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk.toString()));
  const secondExited = new Promise<number | null>((resolve) => second.once('exit', (code) => resolve(code)));
  t.after(() => {
    if (second.exitCode === null && second.signalCode === null) process.kill(-second.pid!, 'SIGKILL');
  });

  const done = await runEnded(client, run.id, 'the two-node run to end', 250_000);
  assert.equal(done.run.status, 'succeeded', `${done.run.error ?? ''}\nsecond node: ${output}`);
  assert.deepEqual(
    checkpointsOf(done).map((c) => c.step),
    [1, 2],
  );
  // Every iteration updates (zero-advantage rows are kept), on both ranks.
  assert.ok(
    checkpointsOf(done).every((c) => c.metrics.loss !== undefined && c.metrics.worldSize === 2),
    JSON.stringify(checkpointsOf(done).map((c) => c.metrics)),
  );
  // Global rank 1 is the other node's only rank (local rank 0), as it reported when it came up.
  const host = os.hostname();
  assert.deepEqual(done.run.placement?.ranks, [
    { rank: 0, localRank: 0, host },
    { rank: 1, localRank: 0, host },
  ]);
  assert.equal(await secondExited, 0, `the second node's torchrun ends with the run: ${output}`);
  const list = await runCli(['train', '--list', '--store', storeFile]);
  assert.match(list.stdout, new RegExp(`${run.id}\\s+grpo\\s+succeeded\\s+2\\s+.*torchrun 2 ranks`));
});
