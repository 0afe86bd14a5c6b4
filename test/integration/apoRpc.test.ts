import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { findDaemon } from '../../trainer-daemon/protocol/node/discovery';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { candidatesOf } from '../../trainer-daemon/protocol';
import { AGENT, setUp, storeOf, train } from '../helpers/apo';
import { CLI, runCli, startDaemon } from '../helpers/daemon';
import { waitFor } from '../helpers/tmp';

/** The pids of this test's agent processes still alive (`node AGENT`, started in `cwd`). */
function agentsIn(cwd: string): number[] {
  return fs
    .readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        return (
          fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[1] === AGENT &&
          fs.readlinkSync(`/proc/${pid}/cwd`) === cwd
        );
      } catch {
        return false; // exited meanwhile
      }
    })
    .map(Number);
}

test('apo: bad parameters are refused naming the flag or field, nothing started', async (t) => {
  const { cwd, upstream } = await setUp(t);
  for (const [flags, message] of [
    [['--beam', '0'], /--beam: .*(>=|≥|at least|too small).*\(got 0\)/i],
    [['--temperature', 'hot'], /--temperature: .*"hot"/],
    [['--val', 'nope'], /dataset nope does not exist/],
    [['--workers', '0'], /--workers: .*\(got 0\)/],
    [['--agent-mode', 'process', '--workers', '2'], /--workers: with --agent-mode process APO runs --concurrency/],
  ] as const) {
    const bad = await train(cwd, upstream, [...flags]);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, message);
  }
  const missing = await runCli(
    ['train', '--algorithm', 'apo', '--resource', 'nope', '--dataset', 'sums', '--', process.execPath, AGENT],
    { cwd },
  );
  assert.equal(missing.code, 3, missing.stderr);
  assert.match(missing.stderr, /resource nope does not exist/);

  const store = storeOf(cwd);
  assert.equal(store.listTrainingRuns(10).length, 0);
  store.close();
  // Over the RPC: -32602 naming the field.
  const server = spawn(process.execPath, [CLI, 'serve'], { cwd, stdio: ['ignore', 'pipe', 'ignore'] });
  t.after(() => server.kill());
  const live = await waitFor(() => findDaemon(path.join(cwd, '.lightning', 'store.db')), 'the daemon', 10_000);
  const client = await RpcClient.connect(live.info.url, live.token);
  t.after(() => client.dispose());
  const agent = { argv: [process.execPath, AGENT], cwd };
  await assert.rejects(
    client.requestRaw('lightning/training/start', {
      config: { algorithm: 'apo', command: agent, resource: 'prompt', dataset: 'sums', beam: 0 },
    }),
    (e: Error & { code: number }) => e.code === -32602 && /params\.config\.beam/.test(e.message),
  );
  // Checked before anything is recorded: the rollout budget must at least score the seed on the validation tasks.
  await assert.rejects(
    client.request('startTraining', {
      config: { algorithm: 'apo', command: agent, resource: 'prompt', dataset: 'sums', budgetRollouts: 3 },
    }),
    /params\.config\.budgetRollouts: 3 cannot even score the seed on the 4 validation tasks/,
  );
  // A stored secret is refused; one given for this start only is not stored (apoEditor.test.ts).
  await assert.rejects(
    client.request('startTraining', {
      config: {
        algorithm: 'apo',
        command: { ...agent, env: { OPENAI_API_KEY: 'sk-0123456789abcdef0123' } },
        resource: 'prompt',
        dataset: 'sums',
      },
    }),
    /params\.config\.command\.env: secrets are not stored with a run: set OPENAI_API_KEY/,
  );
  assert.equal((await client.request('listTrainingRuns', {})).items.length, 0, 'nothing recorded');
  await assert.rejects(
    client.requestRaw('lightning/resources/put', { name: 'prompt', kind: 'prompt_template', value: 5 }),
    (e: Error & { code: number }) => e.code === -32602 && /params\.value/.test(e.message),
  );
  await assert.rejects(
    client.request('putResource', {
      name: 'prompt',
      kind: 'prompt_template',
      value: 'Add {a}.',
      current: false,
      runId: 'run-x',
    }),
    /params\.value: a candidate must keep the placeholders \{a, b\}/,
  );
  await assert.rejects(
    client.request('putResource', { name: 'prompt', kind: 'json', value: 1 }),
    /params\.kind: resource prompt is a prompt_template/,
  );
});

test('apo: trainingRuns/cancel from another client stops the run and its agent workers; the run ends cancelled', async (t) => {
  const { cwd, upstream } = await setUp(t);
  // A daemon of its own, so that this test's client does not keep the run's daemon alive.
  const server = spawn(process.execPath, [CLI, 'serve', '--upstream', upstream.url], {
    cwd,
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  t.after(() => server.kill());
  await waitFor(() => findDaemon(path.join(cwd, '.lightning', 'store.db')), 'the daemon', 10_000);
  const child = spawn(
    process.execPath,
    [
      CLI,
      'train',
      '--algorithm',
      'apo',
      '--resource',
      'prompt',
      '--dataset',
      'sums',
      '--json',
      '--workers',
      '2',
      '--',
      process.execPath,
      AGENT,
    ],
    {
      cwd,
      env: {
        ...process.env,
        LIGHTNING_UPSTREAM_URL: upstream.url,
        OPENAI_BASE_URL: '',
        OPENAI_API_BASE: '',
        OPENAI_API_KEY: '',
        AGENT_DELAY_MS: '60000',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
  const live = await waitFor(() => findDaemon(path.join(cwd, '.lightning', 'store.db')), 'the daemon', 10_000);
  const client = await RpcClient.connect(live.info.url, live.token);
  t.after(() => client.dispose());
  const changes: string[] = [];
  client.onNotification('trainingRunChanged', ({ run }) =>
    changes.push(`${run.status}${run.cancelRequested ? '+cancel' : ''}`),
  );
  const running = await waitFor(
    async () => {
      const agents = await client.request('listRollouts', { mode: 'val', status: ['running'] });
      return agents.items.length > 0 ? (await client.request('listTrainingRuns', {})).items[0] : undefined;
    },
    'agents to run',
    15_000,
  );
  // Two workers run the seed's four validation rollouts; the cancel stops both.
  await waitFor(() => agentsIn(cwd).length === 2, 'two agent workers', 10_000);
  await client.request('cancelTrainingRun', { id: running.id });
  assert.equal(await exited, 130);
  await waitFor(() => agentsIn(cwd).length === 0, 'the agent workers to be stopped', 10_000);
  // Cancelled before the seed was scored: only the line saying the run started.
  assert.deepEqual(JSON.parse(stdout), { event: 'training-started', algorithm: 'apo', runId: running.id });
  const detail = await client.request('getTrainingRun', { id: running.id });
  assert.equal(detail.run.status, 'cancelled');
  assert.ok(detail.run.cancelRequested);
  assert.deepEqual(
    candidatesOf(detail).map((c) => [c.id, c.valScore]),
    [['seed', null]],
  );
  const left = await client.request('listRollouts', { mode: 'val', status: ['running', 'queued'] });
  assert.equal(left.items.length, 0);
  await waitFor(() => changes.includes('cancelled+cancel'), 'the cancelled notification');
});

test('apo in the daemon: its shutdown cancels the run with the best so far, candidates kept; resume is refused saying what to do instead', async (t) => {
  const { cwd, upstream } = await setUp(t);
  const storeFile = path.join(cwd, '.lightning', 'store.db');
  const env = { LIGHTNING_UPSTREAM_URL: upstream.url, OPENAI_BASE_URL: '', OPENAI_API_BASE: '', OPENAI_API_KEY: '' };
  const daemon = await startDaemon(storeFile, [], env);
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  const config = {
    algorithm: 'apo' as const,
    command: { argv: [process.execPath, AGENT], cwd },
    resource: 'prompt',
    dataset: 'sums',
    critiqueModel: 'critic',
    editModel: 'editor',
  };
  // Only APO takes variables for one start: GRPO's agents get the daemon's environment and config.command.env.
  await assert.rejects(
    client.request('startTraining', {
      config: { model: { kind: 'tiny' }, dataset: 'sums', command: config.command },
      env: { AGENT_DELAY_MS: '1' },
    }),
    /params\.env: only an APO run takes env \(AGENT_DELAY_MS\)/,
  );
  const run = await client.request('startTraining', { config, env: { AGENT_DELAY_MS: '200' } });
  assert.equal(run.status, 'running');
  await waitFor(
    async () => (await client.request('getTrainingRun', { id: run.id })).run.latest.best_val_score !== undefined,
    'the seed scored',
    60_000,
  );
  client.dispose();
  assert.equal(await daemon.stop('SIGTERM'), 0, daemon.stderr());

  const store = storeOf(cwd);
  const stopped = store.getTrainingRun(run.id);
  store.close();
  assert.equal(stopped.run.status, 'cancelled');
  assert.equal(stopped.run.algorithm === 'apo' && stopped.run.result?.stopReason, 'cancelled', 'the best so far');
  assert.equal(candidatesOf(stopped).find((c) => c.id === 'seed')?.valScore, 0.5, 'its candidates kept');

  const next = await startDaemon(storeFile, [], env);
  t.after(() => next.stop());
  const again = await RpcClient.connect(next.ready.url, next.ready.token);
  t.after(() => again.dispose());
  await assert.rejects(
    again.requestRaw('lightning/training/start', { resume: run.id }),
    (e: Error & { code: number }) =>
      e.code === -32602 &&
      new RegExp(`params\\.resume: training run ${run.id} is an APO run; APO runs are not resumed`).test(e.message) &&
      /start it again with `lightning train --algorithm apo`/.test(e.message),
  );
});
