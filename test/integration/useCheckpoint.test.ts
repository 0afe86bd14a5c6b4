// needs: torch
/**
 * Use Checkpoint end to end, with real parts: checkpoints saved by the real Python trainer worker
 * (the tiny built-in policy), the daemon (`lightning serve`) serving one with `policy/serve`, and the
 * demo's sample agent (the `openai` SDK) run by `lightning run --checkpoint` and `lightning dataset
 * run --checkpoint`, whose LLM calls the checkpoint answers; switching, stopping, a worker crash,
 * bad ids.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { Methods, type PolicyChanged, type Rollout } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { DaemonError } from '../../trainer-daemon/protocol/errors';
import { REPO_ROOT, runCli, startDaemon } from '../helpers/daemon';
import { storeWithCheckpoints } from '../helpers/checkpoints';
import { tempDir, waitFor } from '../helpers/tmp';
import { busyCheckpointMessage } from '../../extension/checkpoints/routing';
import { createLogger } from '../../trainer-daemon/log';
import { Store } from '../../trainer-daemon/store/store';
import { PolicyServing } from '../../trainer-daemon/training/policyServing';

const AGENT = path.join(REPO_ROOT, 'trainer-daemon', 'demo', 'sample-agent.mjs');
/** The agent's environment: no upstream or key of the user's own, so only the checkpoint can answer. */
const AGENT_ENV = {
  OPENAI_BASE_URL: '',
  OPENAI_API_BASE: '',
  OPENAI_API_KEY: '',
  LIGHTNING_UPSTREAM_URL: 'http://127.0.0.1:9/v1',
};
async function refused(client: RpcClient, method: string, params: unknown): Promise<DaemonError> {
  try {
    await client.requestRaw(method, params);
  } catch (error) {
    return error as DaemonError;
  }
  assert.fail(`${method} accepted ${JSON.stringify(params)}`);
}

/** The daemon's trainer worker processes (its children running lightning_trainer.worker). */
function workerPids(daemonPid: number): number[] {
  const out = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(daemonPid)], { encoding: 'utf8' });
  return out
    .split('\n')
    .filter((line) => line.includes('lightning_trainer.worker'))
    .map((line) => Number(line.trim().split(/\s+/)[0]));
}

async function setUp(t: Parameters<typeof tempDir>[0] & { after(fn: () => unknown): void }) {
  const cwd = tempDir(t);
  const made = await storeWithCheckpoints(cwd, [process.execPath, AGENT]);
  const daemon = await startDaemon(made.storeFile, [], AGENT_ENV);
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  const changes: PolicyChanged[] = [];
  client.onNotification('policyChanged', (change) => changes.push(change));
  t.after(async () => {
    client.dispose();
    await daemon.stop();
  });
  return { ...made, cwd, daemon, client, changes };
}

test('a checkpoint served by the daemon answers `lightning run --checkpoint` and `dataset run --checkpoint`; switching and stopping', async (t) => {
  const {
    cwd,
    storeFile,
    runId,
    ids: [a, b],
    client,
    daemon,
    changes,
  } = await setUp(t);
  assert.deepEqual(await client.request('currentPolicy', {}), { served: null });
  const listed = await runCli(['checkpoints', '--store', storeFile], { cwd });
  assert.equal(listed.code, 0, listed.stderr);
  assert.match(listed.stdout, new RegExp(`${b} +${runId} +2 +reward 0\\.500[^\n]*\n${a} +${runId} +1 +reward 0`));

  // `lightning run --checkpoint` against the daemon that owns the store: it serves A for the run.
  const run = await runCli(
    [
      'run',
      '--store',
      storeFile,
      '--checkpoint',
      a,
      '--task',
      JSON.stringify({ question: '2 plus 3', answer: 5 }),
      '--',
      process.execPath,
      AGENT,
    ],
    { cwd, env: AGENT_ENV },
  );
  assert.equal(run.code, 0, run.stderr);
  assert.match(
    run.stderr,
    // The policy server's capability path (/p/<key>) is part of the URL another tool would be given.
    new RegExp(`checkpoint ${a} \\(run ${runId}, step 1\\) serves at http://127\\.0\\.0\\.1:\\d+/p/[\\w-]{32} on cpu`),
  );
  const finished = JSON.parse(run.stderr.trim().split('\n').at(-1)!) as { id: string; status: string };
  assert.equal(finished.status, 'succeeded');
  const served = (await client.request('currentPolicy', {})).served!;
  assert.equal(served.checkpointId, a);
  assert.deepEqual([served.runId, served.step], [runId, 1]);

  const detail = await client.request('getRollout', { id: finished.id });
  assert.deepEqual(detail.servedBy, { runId, step: 1, checkpoint: path.join(cwd, 'ckpt', '1'), checkpointId: a });
  assert.equal(detail.resources.policy, served.policyVersion);
  const calls = detail.spans.filter((s) => s.category === 'llm');
  assert.ok(calls.length >= 1, 'the agent made LLM calls');
  for (const call of calls) {
    assert.equal(call.statusCode, 'ok', `the checkpoint answered: ${call.statusMessage}`);
    const response = call.attributes['lightning.response'] as {
      prompt_token_ids?: number[];
      choices: Array<{ token_ids?: number[] }>;
    };
    assert.ok(response.prompt_token_ids && response.prompt_token_ids.length > 0, 'prompt token ids recorded');
    assert.ok(
      response.choices[0]!.token_ids && response.choices[0]!.token_ids.length > 0,
      'response token ids recorded',
    );
  }
  const shown = await runCli(['show', finished.id, '--store', storeFile], { cwd });
  assert.match(shown.stdout, new RegExp(`policy +checkpoint ${a} \\(run ${runId}, step 1\\)`));

  // An ordinary rollout meanwhile is not recorded as served by the checkpoint.
  const plain = await client.request('createRollout', { label: 'plain' });
  assert.equal((await client.request('getRollout', { id: plain.id })).servedBy, null);

  // Asking for the checkpoint already served answers at once, with the same server.
  assert.deepEqual(await client.request('servePolicy', { checkpointId: a }), served);
  // Switching: B replaces A; A's server is gone.
  const switched = await client.request('servePolicy', { checkpointId: b, device: 'cpu' });
  assert.equal(switched.checkpointId, b);
  assert.notEqual(switched.url, served.url);
  await assert.rejects(fetch(`${served.url}/v1/models`), 'the old worker was stopped');
  assert.equal((await fetch(`${switched.url}/v1/models`)).status, 200);
  assert.equal(workerPids(daemon.process.pid!).length, 1, 'one checkpoint worker at a time');

  // A batch over the dataset, served by B (the daemon keeps serving it: nothing to load).
  const batch = await runCli(
    ['dataset', 'run', 'tools', '--store', storeFile, '--checkpoint', b, '--json', '--', process.execPath, AGENT],
    { cwd, env: AGENT_ENV },
  );
  assert.equal(batch.code, 0, batch.stderr);
  const { batchId } = JSON.parse(batch.stdout.trim().split('\n').at(-1)!) as { batchId: string };
  const rollouts: Rollout[] = (await client.request('listRollouts', { batchId })).items;
  assert.equal(rollouts.length, 2);
  for (const rollout of rollouts) {
    const one = await client.request('getRollout', { id: rollout.id });
    assert.equal(one.rollout.status, 'succeeded', one.rollout.error ?? '');
    assert.equal(one.servedBy?.checkpointId, b);
    assert.ok(one.spans.some((s) => s.category === 'llm' && s.statusCode === 'ok'));
  }

  assert.equal((await client.request('stopPolicy', {})).stopped?.checkpointId, b);
  assert.deepEqual(await client.request('currentPolicy', {}), { served: null });
  await assert.rejects(fetch(`${switched.url}/v1/models`));
  assert.deepEqual(await client.request('stopPolicy', {}), { stopped: null });
  await waitFor(() => changes.length >= 4 || undefined, 'policy/changed notifications');
  assert.deepEqual(
    changes.map((c) => [c.served?.checkpointId ?? null, c.error]),
    [
      [a, null],
      [null, null],
      [b, null],
      [null, null],
    ],
  );
});

test('a crashed checkpoint worker is reported and clears the state; bad ids and missing files are named', async (t) => {
  const {
    storeFile,
    ids: [a],
    missing,
    client,
    daemon,
    changes,
  } = await setUp(t);
  const unknown = await refused(client, Methods.servePolicy.method, { checkpointId: 'ckpt-nope' });
  assert.equal(unknown.code, -32004);
  assert.match(unknown.message, /checkpoint ckpt-nope does not exist/);
  const empty = await refused(client, Methods.servePolicy.method, {});
  assert.equal(empty.code, -32602);
  assert.match(empty.message, /params\.checkpointId/);
  const device = await refused(client, Methods.servePolicy.method, { checkpointId: a, device: 'tpu' });
  assert.equal(device.code, -32602);
  assert.match(device.message, /params\.device/);
  const gone = await refused(client, Methods.servePolicy.method, { checkpointId: missing });
  assert.equal(gone.code, -32004);
  assert.match(gone.message, new RegExp(`checkpoint ${missing}'s files are missing`));
  const noPython = await refused(client, Methods.servePolicy.method, {
    checkpointId: a,
    python: '/nonexistent/python3',
  });
  assert.match(noPython.message, /cannot run the trainer: not found\. Run `lightning doctor`/);
  assert.equal(
    (noPython as { data?: { kind?: string } }).data?.kind,
    'trainer_unavailable',
    'Set Up Trainer is offered on the kind',
  );
  assert.deepEqual(await client.request('currentPolicy', {}), { served: null });
  const cliUnknown = await runCli(
    ['run', '--store', storeFile, '--checkpoint', 'ckpt-nope', '--', process.execPath, AGENT],
    { env: AGENT_ENV },
  );
  assert.equal(cliUnknown.code, 3);
  assert.match(cliUnknown.stderr, /lightning: checkpoint ckpt-nope does not exist/);
  const both = await runCli(
    [
      'dataset',
      'run',
      'tools',
      '--store',
      storeFile,
      '--checkpoint',
      a,
      '--upstream',
      'http://127.0.0.1:9/v1',
      '--',
      process.execPath,
      AGENT,
    ],
    { env: AGENT_ENV },
  );
  assert.equal(both.code, 2);
  assert.match(both.stderr, /--upstream: give either --upstream or --checkpoint/);

  const served = await client.request('servePolicy', { checkpointId: a });
  const [pid] = workerPids(daemon.process.pid!);
  assert.ok(pid, 'the checkpoint runs in a worker of the daemon');
  process.kill(pid, 'SIGKILL');
  const crash = await waitFor(() => changes.find((c) => c.error !== null), 'the crash to be reported', 10_000);
  assert.equal(crash.served, null);
  assert.match(crash.error!, new RegExp(`checkpoint ${a}: the trainer worker exited unexpectedly \\(SIGKILL\\)`));
  assert.deepEqual(await client.request('currentPolicy', {}), { served: null });
  await assert.rejects(fetch(`${served.url}/v1/models`));
  // The daemon keeps working, and serves again on request.
  assert.equal((await client.request('servePolicy', { checkpointId: a })).checkpointId, a);
});

test('without a daemon, `lightning run --checkpoint` serves it in a daemon of its own, which stops the worker when the run ends', async (t) => {
  const cwd = tempDir(t);
  const {
    storeFile,
    ids: [a],
  } = await storeWithCheckpoints(cwd, [process.execPath, AGENT]);
  const run = await runCli(['run', '--store', storeFile, '--checkpoint', a, '--', process.execPath, AGENT], {
    cwd,
    env: AGENT_ENV,
  });
  assert.equal(run.code, 0, run.stderr);
  const url = /serves at (http:\/\/127\.0\.0\.1:\d+)/.exec(run.stderr)![1]!;
  await assert.rejects(fetch(`${url}/v1/models`), 'the checkpoint worker stopped with the run');
  const { id } = JSON.parse(run.stderr.trim().split('\n').at(-1)!) as { id: string };
  const shown = await runCli(['show', id, '--json', '--store', storeFile], { cwd });
  assert.equal((JSON.parse(shown.stdout) as { servedBy: { checkpointId: string } }).servedBy.checkpointId, a);
});

test('a checkpoint that queued or running rollouts are pinned to is not replaced (ConflictError naming it) unless with force; an idle one is', async (t) => {
  const {
    ids: [a, b],
    client,
  } = await setUp(t);
  const servedA = await client.request('servePolicy', { checkpointId: a });
  const pinned = await client.request('createRollout', {
    label: 'uses A',
    resources: { policy: servedA.policyVersion },
  });
  await client.request('transitionRollout', { id: pinned.id, to: 'running' });
  await client.request('createRollout', { label: 'uses A too', resources: { policy: servedA.policyVersion } });
  const conflict = await refused(client, Methods.servePolicy.method, { checkpointId: b });
  assert.equal(conflict.code, -32009);
  assert.match(
    conflict.message,
    new RegExp(
      `checkpoint ${a} \\(run [^)]+, step 1\\) is serving running rollouts \\(2 queued or running\\); wait for them to finish, or Stop Using Checkpoint .*force: true`,
    ),
  );
  // The editor says so in its words (its Replace Anyway button serves with force).
  assert.match(
    busyCheckpointMessage(b, conflict.message),
    new RegExp(
      `^cannot use checkpoint ${b} now: checkpoint ${a} \\(run [^)]+, step 1\\) is serving running rollouts \\(2 queued or running\\); wait for them to finish, or Stop Using Checkpoint where they were started \\(Replace Anyway stops them\\)$`,
    ),
  );
  // Another device for the one in use would restart it under them too.
  assert.equal((await refused(client, Methods.servePolicy.method, { checkpointId: a, device: 'cuda' })).code, -32009);
  assert.deepEqual((await client.request('currentPolicy', {})).served, servedA, 'A still serves');
  assert.equal((await fetch(`${servedA.url}/v1/models`)).status, 200);

  const forced = await client.request('servePolicy', { checkpointId: b, force: true });
  assert.equal(forced.checkpointId, b);
  await assert.rejects(fetch(`${servedA.url}/v1/models`), 'force replaced A');
  // Nothing uses B: going back to A needs no force.
  assert.equal((await client.request('servePolicy', { checkpointId: a })).checkpointId, a);
});

test("the daemon's shutdown stops a checkpoint being loaded, and serves none after it", async (t) => {
  const cwd = tempDir(t);
  const {
    storeFile,
    ids: [a],
  } = await storeWithCheckpoints(cwd, [process.execPath, AGENT]);
  const store = Store.open(storeFile);
  t.after(() => store.close());
  const logger = createLogger('test', { level: 'error' });
  // Shut down while the serve is only asked for (finding Python, before any worker), or once its worker runs
  // (loading the checkpoint): either way it fails, and leaves no worker. Each moment is waited for, not slept to.
  for (const moment of ['before the worker starts', 'while the worker loads'] as const) {
    const serving = new PolicyServing(store, logger);
    t.after(() => serving.dispose());
    const loading = serving.serve({ checkpointId: a });
    if (moment === 'while the worker loads')
      await waitFor(() => workerPids(process.pid).length > 0, 'the checkpoint worker to start', 60_000);
    await serving.shutdown();
    await assert.rejects(loading, `a shutdown ${moment} stops the serve`);
    assert.equal(serving.current, null);
    await assert.rejects(serving.serve({ checkpointId: a }), /the daemon is shutting down/);
    assert.equal(serving.current, null);
    assert.deepEqual(workerPids(process.pid), [], 'no checkpoint worker left running');
  }
});

test('`dataset run --resume` serves the checkpoint the batch was started with; another --checkpoint, or one for a batch without, is refused naming both', async (t) => {
  const {
    cwd,
    storeFile,
    ids: [a, b],
    client,
  } = await setUp(t);
  const { dataset, items: tasks } = await client.request('listTasks', { dataset: 'tools' });
  const { policyVersion } = await client.request('servePolicy', { checkpointId: a });
  await client.request('stopPolicy', {});
  // An interrupted batch pinned to A (as `dataset run --checkpoint A` creates it), and one without a checkpoint.
  for (const task of tasks) {
    await client.request('createRollout', {
      mode: 'train',
      label: 'tools',
      task: { id: task.id, input: task.input },
      datasetId: dataset.id,
      batchId: 'batch-on-a',
      resources: { policy: policyVersion },
    });
  }
  await client.request('createRollout', {
    mode: 'train',
    label: 'tools',
    task: { id: tasks[0]!.id, input: tasks[0]!.input },
    datasetId: dataset.id,
    batchId: 'batch-plain',
  });

  const other = await runCli(
    [
      'dataset',
      'run',
      'tools',
      '--store',
      storeFile,
      '--resume',
      'batch-on-a',
      '--checkpoint',
      b,
      '--',
      process.execPath,
      AGENT,
    ],
    { cwd, env: AGENT_ENV },
  );
  assert.equal(other.code, 2, other.stderr);
  assert.match(other.stderr, new RegExp(`--checkpoint ${b}: batch batch-on-a was started with checkpoint ${a}`));
  const none = await runCli(
    [
      'dataset',
      'run',
      'tools',
      '--store',
      storeFile,
      '--resume',
      'batch-plain',
      '--checkpoint',
      a,
      '--',
      process.execPath,
      AGENT,
    ],
    { cwd, env: AGENT_ENV },
  );
  assert.equal(none.code, 2, none.stderr);
  assert.match(none.stderr, new RegExp(`--checkpoint ${a}: batch batch-plain was started without a checkpoint`));
  assert.deepEqual(await client.request('currentPolicy', {}), { served: null }, 'a refused resume serves nothing');
  const untouched = (await client.request('listRollouts', { batchId: 'batch-on-a' })).items;
  assert.deepEqual(
    untouched.map((r) => r.status),
    ['queued', 'queued'],
    'a refused resume changes nothing',
  );

  const resumed = await runCli(
    [
      'dataset',
      'run',
      'tools',
      '--store',
      storeFile,
      '--resume',
      'batch-on-a',
      '--json',
      '--',
      process.execPath,
      AGENT,
    ],
    { cwd, env: AGENT_ENV },
  );
  assert.equal(resumed.code, 0, resumed.stderr);
  assert.match(resumed.stderr, new RegExp(`checkpoint ${a} \\(run [^)]+, step 1\\) serves at`));
  for (const rollout of untouched) {
    const one = await client.request('getRollout', { id: rollout.id });
    assert.equal(one.rollout.status, 'succeeded', one.rollout.error ?? '');
    assert.equal(one.servedBy?.checkpointId, a);
    const calls = one.spans.filter((s) => s.category === 'llm');
    assert.ok(
      calls.length >= 1 && calls.every((s) => s.statusCode === 'ok'),
      'the checkpoint answered the resumed rollouts',
    );
  }
});
