// needs: torch, ray
/**
 * `lightning train --ray ADDRESS`: a GRPO run whose agents (worker mode) run as Ray tasks on a real local Ray head,
 * their calls served by the trainer worker's policy through the daemon. Needs LIGHTNING_TEST_PYTHON with ray.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { toolsTasks } from '../../trainer-daemon/demo/tasks';
import { spawn } from 'node:child_process';
import { isProcessAlive } from '../../trainer-daemon/protocol/node/discovery';
import { CLI, REPO_ROOT, runCli } from '../helpers/daemon';
import { rayFixture } from '../helpers/ray';
import { tempDir, waitFor } from '../helpers/tmp';

const AGENT = path.join(REPO_ROOT, 'test', 'fixtures', 'agents', 'parity-worker.mjs');
const ray = rayFixture();

before(() => ray.start());
after(() => ray.stop());

test('train --ray: the agents run as Ray tasks on one driver, every iteration updates, train --list says which nodes ran them, the logs name the node', async (t) => {
  const { python, head } = ray;
  const cwd = tempDir(t);
  fs.writeFileSync(
    path.join(cwd, 'tasks.jsonl'),
    toolsTasks(8, 4)
      .map((task) => JSON.stringify(task))
      .join('\n'),
  );
  const imported = await runCli(['dataset', 'import', 'tasks.jsonl', '--name', 'tools'], { cwd });
  assert.equal(imported.code, 0, imported.stderr);
  const run = await runCli(
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
      '10',
      '--agent-mode',
      'worker',
      '--workers',
      '2',
      '--per-worker',
      '8',
      '--device',
      'cpu',
      '--python',
      '/usr/bin/python3',
      '--ray',
      head.address,
      '--ray-python',
      python,
      '--json',
      '--',
      process.execPath,
      AGENT,
    ],
    { cwd, env: { OPENAI_BASE_URL: '', OPENAI_API_KEY: '' } },
  );
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stderr, new RegExp(`agents on Ray ${head.address.replace(/\./g, '\\.')}`));
  const finished = JSON.parse(run.stdout.trim().split('\n').at(-1)!) as {
    run: { id: string; status: string };
    checkpoints: Array<{ step: number; metrics: Record<string, number> }>;
  };
  assert.equal(finished.run.status, 'succeeded');
  assert.ok(
    finished.checkpoints
      .filter((c) => c.step > 0)
      .every((c) => c.metrics.loss !== undefined && (c.metrics.transitions ?? 0) > 0),
    JSON.stringify(finished.checkpoints),
  );
  const logs = path.join(cwd, '.lightning', 'logs', finished.run.id);
  const workerLogs = fs
    .readdirSync(logs, { recursive: true, encoding: 'utf8' })
    .filter((file) => /worker-w\d+\.log$/.test(file));
  assert.ok(
    workerLogs.some((file) => file.includes('-train-0')),
    workerLogs.join(', '),
  );
  for (const file of workerLogs)
    assert.match(
      fs.readFileSync(path.join(logs, file), 'utf8'),
      /^\[lightning\] running on Ray node \S+ \(.+\), node id [0-9a-f]+\n/,
      file,
    );
  // The list names the node that ran the agents (the head's, as the logs name it), not the configured address.
  const [, ip, host, nodeId] = /^\[lightning\] running on Ray node (\S+) \((.+)\), node id ([0-9a-f]+)\n/.exec(
    fs.readFileSync(path.join(logs, workerLogs[0]!), 'utf8'),
  )!;
  const list = await runCli(['train', '--list'], { cwd });
  assert.match(
    list.stdout,
    new RegExp(
      `${finished.run.id}\\s+grpo\\s+succeeded\\s+2\\s+\\S+\\s+\\S+\\s+agents on 1 Ray node \\(${ip!.replace(/\./g, '\\.')}\\)`,
    ),
  );
  // 2 iterations × 4 tasks × 4 samples, and 4 validation tasks before the first and after the last: one attempt each.
  const [listed] = JSON.parse((await runCli(['train', '--list', '--json'], { cwd })).stdout) as Array<{
    placement?: unknown;
  }>;
  assert.deepEqual(listed!.placement, { rayNodes: [{ nodeId, ip, host, attempts: 40 }], ranks: [] });
  // One driver connected to the cluster for the run's four batches (two train, two validation).
  const driverLogs = fs
    .readdirSync(logs, { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('ray-driver.log'));
  assert.deepEqual(driverLogs, ['ray-driver.log']);
  assert.equal(
    fs.readFileSync(path.join(logs, 'ray-driver.log'), 'utf8').match(/lightning ray runner \d+: connected to /g)
      ?.length,
    1,
  );
});

test('train --ray: a worker that keeps dying on its node fails the run with an error naming the node', async (t) => {
  const { python, head } = ray;
  const cwd = tempDir(t);
  fs.writeFileSync(
    path.join(cwd, 'tasks.jsonl'),
    toolsTasks(2, 0)
      .map((task) => JSON.stringify(task))
      .join('\n'),
  );
  assert.equal((await runCli(['dataset', 'import', 'tasks.jsonl', '--name', 'tools'], { cwd })).code, 0);
  const run = await runCli(
    [
      'train',
      '--model',
      'tiny',
      '--dataset',
      'tools',
      '--iterations',
      '1',
      '--samples',
      '2',
      '--eval-every',
      '10',
      '--agent-mode',
      'worker',
      '--workers',
      '1',
      '--device',
      'cpu',
      '--python',
      '/usr/bin/python3',
      '--ray',
      head.address,
      '--ray-python',
      python,
      '--',
      process.execPath,
      '-e',
      'process.exit(3)',
    ],
    { cwd, env: { OPENAI_BASE_URL: '', OPENAI_API_KEY: '' } },
  );
  assert.equal(run.code, 1, run.stderr);
  assert.match(run.stdout, /failed: the agent worker exited with code 3 on Ray node \S+ \(.+\); 3 restarts used up/);
});

/** A worker that records its pid and never asks for a rollout. */
const HANGING_WORKER =
  "require('node:fs').appendFileSync('pids', process.pid + '\\n'); setInterval(() => undefined, 1000);";

test("train --ray: Ctrl-C cancels the run, its agents on the node stop, and the run's Ray driver ends", async (t) => {
  const { python, head } = ray;
  const cwd = tempDir(t);
  fs.writeFileSync(
    path.join(cwd, 'tasks.jsonl'),
    toolsTasks(2, 0)
      .map((task) => JSON.stringify(task))
      .join('\n'),
  );
  assert.equal((await runCli(['dataset', 'import', 'tasks.jsonl', '--name', 'tools'], { cwd })).code, 0);
  const child = spawn(
    process.execPath,
    [
      CLI,
      'train',
      '--model',
      'tiny',
      '--dataset',
      'tools',
      '--iterations',
      '1',
      '--samples',
      '2',
      '--eval-every',
      '10',
      '--agent-mode',
      'worker',
      '--workers',
      '2',
      '--device',
      'cpu',
      '--python',
      '/usr/bin/python3',
      '--ray',
      head.address,
      '--ray-python',
      python,
      '--',
      process.execPath,
      '-e',
      HANGING_WORKER,
    ],
    { cwd, env: { ...process.env, OPENAI_BASE_URL: '', OPENAI_API_KEY: '' }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk.toString()));
  const code = new Promise<number | null>((resolve) => child.once('close', resolve));
  const pidFile = path.join(cwd, 'pids');
  const pids = await waitFor(
    () => {
      const list = fs.existsSync(pidFile)
        ? fs.readFileSync(pidFile, 'utf8').trim().split('\n').filter(Boolean).map(Number)
        : [];
      return list.length === 2 ? list : null;
    },
    'both workers to start on the Ray node',
    120_000,
  );
  const runId = /training run (train-[0-9a-f]+)/.exec(stderr)![1]!;
  const driverLog = path.join(cwd, '.lightning', 'logs', runId, 'ray-driver.log');
  const driver = Number(/lightning ray runner (\d+): connected/.exec(fs.readFileSync(driverLog, 'utf8'))![1]);
  child.kill('SIGINT');
  assert.equal(await code, 130, stderr);
  await waitFor(() => pids.every((pid) => !isProcessAlive(pid)), 'the workers on the node to be stopped', 30_000);
  await waitFor(() => !isProcessAlive(driver), "the run's Ray driver to exit", 30_000);
  const [listed] = JSON.parse((await runCli(['train', '--list', '--json'], { cwd })).stdout) as Array<{
    status: string;
  }>;
  assert.equal(listed!.status, 'cancelled');
});
