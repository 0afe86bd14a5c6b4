// needs: torch
/**
 * RL training end to end, with real parts: the daemon (`lightning serve`), the Python trainer worker
 * with the tiny built-in policy, and the sample agent (the `openai` SDK) as long-lived agent workers.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import {
  GrpoConfig,
  Methods,
  TrainingRunDetail,
  metricPoints,
  type GrpoConfigInput,
  type TrainingRun,
  checkpointsOf,
} from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { DaemonError } from '../../trainer-daemon/protocol/errors';
import { Store } from '../../trainer-daemon/store/store';
import { randomToolDemonstrations, toolsTasks } from '../../trainer-daemon/demo/tasks';
import { REPO_ROOT, runCli, startDaemon, type RunningDaemon } from '../helpers/daemon';
import { tempDir, waitFor } from '../helpers/tmp';
import { parsed } from '../helpers/params';

const AGENT = path.join(REPO_ROOT, 'trainer-daemon', 'demo', 'sample-agent.mjs');

interface Setup {
  readonly cwd: string;
  readonly storeFile: string;
  readonly daemon: RunningDaemon;
  readonly client: RpcClient;
  readonly config: (overrides?: Partial<GrpoConfigInput>) => GrpoConfigInput;
}

async function setUp(t: Parameters<typeof tempDir>[0] & { after(fn: () => unknown): void }): Promise<Setup> {
  const cwd = tempDir(t);
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  fs.mkdirSync(path.dirname(storeFile), { recursive: true });
  const tasks = toolsTasks(16, 8);
  fs.writeFileSync(
    path.join(cwd, 'demonstrations.jsonl'),
    randomToolDemonstrations(
      tasks.filter((task) => task.split === 'train'),
      0,
    ),
  );
  const daemon = await startDaemon(storeFile, [], { OPENAI_BASE_URL: '', OPENAI_API_KEY: '' });
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(async () => {
    client.dispose();
    await daemon.stop();
  });
  await client.request('importDataset', { name: 'tools', tasks });
  const config = (overrides: Partial<GrpoConfigInput> = {}): GrpoConfigInput => ({
    model: { kind: 'tiny', config: { dModel: 48, layers: 2, heads: 4, context: 64 } },
    dataset: 'tools',
    iterations: 3,
    samples: 4,
    tasksPerIteration: 4,
    agentMode: 'worker',
    workers: 1,
    perWorker: 32,
    evalEvery: 2,
    device: 'cpu',
    python: '/usr/bin/python3',
    // Relative to its own folder, not the daemon's working directory (the repository root): the agents run in `cwd`.
    command: { argv: [process.execPath, path.basename(AGENT)], cwd: path.dirname(AGENT) },
    ...overrides,
  });
  return { cwd, storeFile, daemon, client, config };
}

async function untilFinal(client: RpcClient, id: string, timeoutMs = 120_000): Promise<TrainingRunDetail> {
  return waitFor(
    async () => {
      const detail = await client.request('getTrainingRun', { id });
      return ['succeeded', 'failed', 'cancelled'].includes(detail.run.status) ? detail : undefined;
    },
    `training run ${id} to end`,
    timeoutMs,
  );
}

test('bad training params are refused naming the field, and nothing is recorded', async (t) => {
  const { client, cwd, config } = await setUp(t);
  const refused = async (params: unknown): Promise<DaemonError> => {
    try {
      await client.requestRaw(Methods.startTraining.method, params);
    } catch (error) {
      return error as DaemonError;
    }
    assert.fail(`training/start accepted ${JSON.stringify(params)}`);
  };
  const samples = await refused({ config: { ...config(), samples: 1 } });
  assert.equal(samples.code, -32602);
  assert.match(samples.message, /params\.config\.samples: samples must be at least 2/);
  const model = await refused({ config: { ...config(), model: { kind: 'gpt-9' } } });
  assert.match(model.message, /params\.config\.model\.kind/);
  // A launch configuration's variables travel with the run, but not its secrets: the store keeps the config.
  const secret = await refused({
    config: config({ command: { argv: ['node', AGENT], cwd, env: { AGENT_MODEL: 'm', SEARCH_API_KEY: 'k-123' } } }),
  });
  assert.equal(secret.code, -32602);
  assert.match(secret.message, /params\.config\.command\.env: secrets are not stored with a run/);
  const dataset = await refused({ config: config({ dataset: 'nope' }) });
  assert.match(dataset.message, /dataset nope does not exist/);
  assert.equal((await client.request('listTrainingRuns', {})).items.length, 0);

  const cli = await runCli(['train', '--model', 'tiny', '--dataset', 'tools', '--samples', '1', '--', 'node', AGENT], {
    cwd,
  });
  assert.equal(cli.code, 2, cli.stderr);
  assert.match(cli.stderr, /--samples: samples must be at least 2/);
  const notNumber = await runCli(
    ['train', '--model', 'tiny', '--dataset', 'tools', '--lr', 'fast', '--', 'node', AGENT],
    { cwd },
  );
  assert.equal(notNumber.code, 2);
  assert.match(notNumber.stderr, /--lr fast: not a number/);
  const noCommand = await runCli(['train', '--model', 'tiny', '--dataset', 'tools'], { cwd });
  assert.match(noCommand.stderr, /give the agent command after --/);
  // One command for every algorithm: a flag of the other one is refused, named.
  const apoFlag = await runCli(['train', '--model', 'tiny', '--dataset', 'tools', '--beam', '3', '--', 'node', AGENT], {
    cwd,
  });
  assert.equal(apoFlag.code, 2);
  assert.match(apoFlag.stderr, /--beam: applies to --algorithm apo only/);
  const grpoFlag = await runCli(
    [
      'train',
      '--algorithm',
      'apo',
      '--resource',
      'prompt',
      '--dataset',
      'tools',
      '--iterations',
      '3',
      '--',
      'node',
      AGENT,
    ],
    { cwd },
  );
  assert.equal(grpoFlag.code, 2);
  assert.match(grpoFlag.stderr, /--iterations: applies to --algorithm grpo only/);
});

test('a run records metrics and checkpoints as it goes; cancel keeps the last checkpoint and resume continues from it', async (t) => {
  const { client, config, storeFile } = await setUp(t);
  const changed: string[] = [];
  client.onNotification('trainingRunChanged', ({ run }) => changed.push(run.status));
  const base = config();
  // Every checkpoint kept (retention has its own test, checkpoints.test.ts): the list below is the whole run.
  const run = await client.request('startTraining', {
    config: GrpoConfig.parse(
      config({
        iterations: 4,
        keepCheckpoints: 'all',
        command: { ...base.command, env: { AGENT_MODEL: 'policy-from-env' } },
      }),
    ),
  });
  assert.equal(run.status, 'running');
  await waitFor(
    async () => (await client.request('listCheckpoints', { runId: run.id })).items.length >= 1,
    'the first checkpoint',
    120_000,
  );
  // The daemon runs it: the answer comes once it has stopped.
  const cancelled = await client.request('cancelTrainingRun', { id: run.id });
  assert.deepEqual([cancelled.id, cancelled.status, cancelled.cancelRequested], [run.id, 'cancelled', true]);
  const stopped = await untilFinal(client, run.id);
  assert.equal(stopped.run.status, 'cancelled');
  await waitFor(() => changed.includes('cancelled'), 'a trainingRuns/changed notification of the cancel');
  const kept = checkpointsOf(stopped);
  assert.ok(kept.length >= 1 && kept.length < 4, `checkpoints at cancel: ${kept.map((c) => c.step)}`);
  for (const checkpoint of kept) assert.ok(fs.existsSync(checkpoint.path), `${checkpoint.path} exists`);
  assert.equal(
    (await client.request('listRollouts', { status: ['running', 'queued'] })).items.length,
    0,
    'no rollout left running',
  );

  await client.request('startTraining', { resume: run.id });
  const done = await untilFinal(client, run.id);
  assert.equal(done.run.status, 'succeeded', done.run.error ?? '');
  TrainingRunDetail.parse(done);
  assert.deepEqual(
    checkpointsOf(done).map((c) => c.step),
    [...kept.map((c) => c.step), ...[1, 2, 3, 4].filter((s) => s > kept.at(-1)!.step)],
  );
  for (const step of [1, 2, 3, 4])
    assert.ok(
      metricPoints(done.metrics, 'reward/mean').some((p) => p.step === step),
      `reward at iteration ${step}`,
    );
  assert.deepEqual(
    metricPoints(done.metrics, 'val/reward')
      .map((p) => p.step)
      .filter((s) => s > 0),
    [2, 4],
  );
  await waitFor(() => changed.includes('succeeded'), 'a trainingRuns/changed notification of the end');

  // The rollouts after the resume were served by the checkpoint the cancel kept.
  const store = Store.open(storeFile, { readonly: true });
  t.after(() => store.close());
  const next = store.listRollouts(parsed('listRollouts', { batchId: `${run.id}-train-${kept.at(-1)!.step}`, limit: 1 }))
    .items[0]!;
  const policy = store.db
    .prepare<[number], { value: string }>(`SELECT value FROM resources WHERE name = 'policy' AND version = ?`)
    .get(next.resourcesVersion!)!;
  assert.equal(JSON.parse(policy.value).checkpoint, kept.at(-1)!.path);

  // The run's command.env reached the agents: they asked for the model it names.
  const spans = (await client.request('listSpans', { rolloutId: next.id })).items;
  assert.ok(
    spans.some((span) => span.attributes['gen_ai.request.model'] === 'policy-from-env'),
    JSON.stringify(spans.map((span) => span.attributes['gen_ai.request.model'])),
  );

  const { items } = await client.request('listTrainingRuns', {});
  assert.deepEqual(
    items.map((r) => [r.id, r.status, r.step]),
    [[run.id, 'succeeded', 4]],
  );
  const cli = await runCli(['train', '--list', '--store', storeFile]);
  assert.match(cli.stdout, new RegExp(`${run.id}\\s+grpo\\s+succeeded\\s+4`));
});

test('a call that was not a whole answer is left out of the batch, and the step says how many and why', async (t) => {
  const { client, config, daemon } = await setUp(t);
  const agent = path.join(REPO_ROOT, 'test', 'fixtures', 'agents', 'refused-call-agent.mjs');
  const run = await client.request('startTraining', {
    config: GrpoConfig.parse(
      config({
        iterations: 1,
        samples: 2,
        tasksPerIteration: 2,
        agentMode: 'process',
        evalEvery: 10,
        command: { argv: [process.execPath, path.basename(agent)], cwd: path.dirname(agent) },
      }),
    ),
  });
  const done = await untilFinal(client, run.id);
  assert.equal(done.run.status, 'succeeded', done.run.error ?? '');
  // Four rollouts, each with a call the policy refused (HTTP 400) before the one it answered.
  const metric = (name: string): unknown[] => metricPoints(done.metrics, name).map((p) => [p.step, p.value]);
  assert.deepEqual(metric('skipped/upstreamErrors'), [[1, 4]]);
  assert.deepEqual(metric('skipped/cancelled'), [[1, 0]]);
  assert.deepEqual(metric('skipped/truncated'), [[1, 0]]);
  await waitFor(
    () =>
      daemon.stderr().includes('GRPO step 1: skipped: 4 upstream errors (not whole answers: left out of the batch)'),
    'the step’s log line',
  );
});

test('a crash of the trainer worker fails the run with its Python traceback; the daemon keeps serving', async (t) => {
  const { client, config, daemon } = await setUp(t);
  const run: TrainingRun = await client.request('startTraining', {
    config: GrpoConfig.parse(config({ iterations: 50 })),
  });
  await waitFor(
    async () => (await client.request('listCheckpoints', { runId: run.id })).items.length >= 1,
    'the first checkpoint',
    120_000,
  );
  const worker = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(daemon.process.pid)], { encoding: 'utf8' })
    .split('\n')
    .find((line) => line.includes('lightning_trainer.worker'));
  assert.ok(worker, 'the daemon runs the worker');
  // Ctrl-C reaches Python as KeyboardInterrupt, which the worker does not answer: a real crash with a traceback.
  process.kill(Number(worker.trim().split(/\s+/)[0]), 'SIGINT');
  const failed = await untilFinal(client, run.id);
  assert.equal(failed.run.status, 'failed');
  assert.match(failed.run.error ?? '', /the trainer worker exited unexpectedly/);
  assert.match(failed.run.error ?? '', /Traceback \(most recent call last\)[\s\S]*KeyboardInterrupt/);
  assert.equal((await client.request('daemonInfo', {})).pid, daemon.process.pid);
  assert.equal(
    (await client.request('listRollouts', { status: ['running', 'queued'] })).items.length,
    0,
    'no rollout left running',
  );
});
