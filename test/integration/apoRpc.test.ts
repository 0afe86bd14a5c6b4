import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { findDaemon } from '../../trainer-daemon/discovery';
import { RpcClient } from '../../trainer-daemon/protocol/connection';
import { AGENT, setUp, storeOf, train } from '../helpers/apo';
import { CLI, runCli } from '../helpers/daemon';
import { waitFor } from '../helpers/tmp';

test('apo: bad parameters are refused naming the flag or field, nothing started', async (t) => {
  const { cwd, upstream } = await setUp(t);
  for (const [flags, message] of [
    [['--beam', '0'], /--beam: .*(>=|≥|at least|too small).*\(got 0\)/i],
    [['--temperature', 'hot'], /--temperature: .*"hot"/],
    [['--val', 'nope'], /dataset nope does not exist/],
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
  await assert.rejects(
    client.requestRaw('lightning/trainingRuns/create', {
      algorithm: 'apo',
      config: { resource: 'prompt', dataset: 'sums', beam: 0 },
    }),
    (e: Error & { code: number }) => e.code === -32602 && /params\.config\.beam/.test(e.message),
  );
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

test('apo: trainingRuns/cancel from another client stops the run and its agents; the run ends cancelled', async (t) => {
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
  await client.request('cancelTrainingRun', { id: running.id });
  assert.equal(await exited, 130);
  // Cancelled before the seed was scored: only the line saying the run started.
  assert.deepEqual(JSON.parse(stdout), { event: 'training-started', algorithm: 'apo', runId: running.id });
  const detail = await client.request('getTrainingRun', { id: running.id });
  assert.equal(detail.run.status, 'cancelled');
  assert.ok(detail.run.cancelRequested);
  assert.deepEqual(
    (await client.request('apoLeaderboard', { runId: running.id })).items.map((c) => [c.id, c.valScore]),
    [['seed', null]],
  );
  const left = await client.request('listRollouts', { mode: 'val', status: ['running', 'queued'] });
  assert.equal(left.items.length, 0);
  await waitFor(() => changes.includes('cancelled+cancel'), 'the cancelled notification');
});
