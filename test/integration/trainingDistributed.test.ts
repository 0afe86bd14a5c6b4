// needs: torch, venv
/**
 * `lightning train --nproc-per-node 2`: a GRPO run whose trainer worker runs under torchrun (2 gloo ranks on
 * the CPU, Debian's torch 1.13), with the real daemon, the tiny policy and the sample agent as a worker. A rank
 * killed mid-run fails the run with an error naming the rank and its host; resume continues from the checkpoint.
 * Two machines are two torchrun launchers on this one, meeting at a static rendezvous on loopback.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test, type TestContext } from 'node:test';
import { GrpoConfig, TrainingRunDetail, type GrpoConfigInput } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/connection';
import { toolsTasks } from '../../trainer-daemon/demo/tasks';
import { otherNodeCommand } from '../../trainer-daemon/training/torchrun';
import { REPO_ROOT, runCli, startDaemon } from '../helpers/daemon';
import { tempDir, waitFor } from '../helpers/tmp';

const AGENT = path.join(REPO_ROOT, 'test', 'fixtures', 'agents', 'parity-worker.mjs');

/** The pids of the ranks torchrun started (processes running the ddp worker), by LOCAL_RANK. */
function ranks(): Map<number, number> {
  const found = new Map<number, number>();
  for (const line of execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' }).split('\n')) {
    if (!line.includes('lightning_trainer.ddp_worker') || line.includes('lightning_trainer.torchrun')) continue;
    const pid = Number(line.trim().split(/\s+/)[0]);
    try {
      const env = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      const local = env.find((v) => v.startsWith('LOCAL_RANK='));
      if (local) found.set(Number(local.split('=')[1]), pid);
    } catch {
      // It ended meanwhile.
    }
  }
  return found;
}

/** A daemon on a fresh store in a temp folder with the `tools` dataset (8 train + 4 val tasks); stopped when the test ends. */
async function daemonWithTools(t: TestContext): Promise<{ cwd: string; storeFile: string; client: RpcClient }> {
  const cwd = tempDir(t);
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  const daemon = await startDaemon(storeFile, [], { OPENAI_BASE_URL: '', OPENAI_API_KEY: '' });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(async () => {
    client.dispose();
    await daemon.stop();
  });
  await client.request('importDataset', { name: 'tools', tasks: toolsTasks(8, 4) });
  return { cwd, storeFile, client };
}

/** GRPO on a small tiny policy over `tools` (4 samples of 4 tasks an iteration), the parity worker as the agent, on the CPU. */
function distributedConfig(
  cwd: string,
  run: { iterations: number; python: string; distributed: GrpoConfigInput['distributed'] },
): GrpoConfig {
  return GrpoConfig.parse({
    model: { kind: 'tiny', config: { dModel: 48, layers: 2, heads: 4, context: 64 } },
    dataset: 'tools',
    iterations: run.iterations,
    samples: 4,
    tasksPerIteration: 4,
    agentMode: 'worker',
    workers: 1,
    perWorker: 16,
    evalEvery: 10,
    device: 'cpu',
    python: run.python,
    distributed: run.distributed,
    command: { argv: [process.execPath, AGENT], cwd },
  });
}

/** The run's detail once it is no longer running. */
function runEnded(client: RpcClient, id: string, what: string, timeoutMs: number): Promise<TrainingRunDetail> {
  return waitFor(
    async () => {
      const detail = await client.request('getTrainingRun', { id });
      return detail.run.status === 'running' ? undefined : detail;
    },
    what,
    timeoutMs,
  );
}

test('train --nproc-per-node 2: updates on 2 torchrun ranks; a killed rank fails the run naming it and its host; resume finishes it', async (t) => {
  const { cwd, storeFile, client } = await daemonWithTools(t);
  const config = distributedConfig(cwd, {
    iterations: 3,
    python: '/usr/bin/python3',
    distributed: { nprocPerNode: 2 },
  });
  const run = await client.request('startTraining', { config });
  await waitFor(
    async () => (await client.request('listCheckpoints', { runId: run.id })).items.length >= 1,
    'the first checkpoint',
    200_000,
  );
  const pids = ranks();
  assert.deepEqual([...pids.keys()].sort(), [0, 1], 'torchrun runs two ranks');
  process.kill(pids.get(1)!, 'SIGKILL');
  const failed = await runEnded(client, run.id, 'the run to fail', 60_000);
  assert.equal(failed.run.status, 'failed');
  assert.match(
    failed.run.error ?? '',
    /the trainer worker exited unexpectedly \(code 1\): rank 1 \(local rank 1\) on host \S+ was killed by signal 9/,
  );
  const kept = failed.checkpoints.at(-1)!;

  await client.request('startTraining', { resume: run.id });
  const done = await runEnded(client, run.id, 'the resumed run to end', 100_000);
  assert.equal(done.run.status, 'succeeded', done.run.error ?? '');
  TrainingRunDetail.parse(done);
  assert.deepEqual(
    done.checkpoints.map((c) => c.step).filter((s) => s > kept.step),
    [1, 2, 3].filter((s) => s > kept.step),
  );
  const latest = done.checkpoints.at(-1)!;
  // One checkpoint per step, written by rank 0 only.
  assert.deepEqual(fs.readdirSync(latest.path).sort(), ['config.json', 'metrics.json', 'optimizer.pt', 'trainable.pt']);
  const updated = done.checkpoints.filter((c) => c.step > 0 && c.metrics.loss !== undefined);
  assert.ok(
    updated.length > 0 && updated.every((c) => c.metrics.worldSize === 2),
    JSON.stringify(done.checkpoints.map((c) => c.metrics)),
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

test('train --nproc-per-node 2 --fsdp: a GRPO run on 2 sharded ranks (torch 2); refused on torch 1.13 naming the version needed', async (t) => {
  const python = process.env.LIGHTNING_TEST_PYTHON;
  assert.ok(
    python,
    'LIGHTNING_TEST_PYTHON is unset: point it at a Python with trainer-daemon/python/requirements-test.txt installed (torch 2)',
  );
  const { cwd, storeFile, client } = await daemonWithTools(t);
  const configOf = (interpreter: string) =>
    distributedConfig(cwd, { iterations: 2, python: interpreter, distributed: { nprocPerNode: 2, fsdp: true } });
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
  // An iteration whose groups all had equal rewards updates nothing (and records no worldSize).
  const updated = done.checkpoints.filter((c) => c.metrics.loss !== undefined);
  assert.ok(
    updated.length > 0 && updated.every((c) => c.metrics.worldSize === 2),
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

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
    server.once('error', reject);
  });
}

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
  second.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  second.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const secondExited = new Promise<number | null>((resolve) => second.once('exit', (code) => resolve(code)));
  t.after(() => {
    if (second.exitCode === null && second.signalCode === null) process.kill(-second.pid!, 'SIGKILL');
  });

  const done = await runEnded(client, run.id, 'the two-node run to end', 250_000);
  assert.equal(done.run.status, 'succeeded', `${done.run.error ?? ''}\nsecond node: ${output}`);
  assert.deepEqual(
    done.checkpoints.map((c) => c.step),
    [1, 2],
  );
  // An iteration whose groups all had equal rewards updates nothing (and records no worldSize).
  const updated = done.checkpoints.filter((c) => c.metrics.loss !== undefined);
  assert.ok(
    updated.length > 0 && updated.every((c) => c.metrics.worldSize === 2),
    JSON.stringify(done.checkpoints.map((c) => c.metrics)),
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
