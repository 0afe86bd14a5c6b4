import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { isProcessAlive } from '../../trainer-daemon/protocol/node/discovery';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { CLI, REPO_ROOT, runCli, startDaemon } from '../helpers/daemon';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import { batchOf, peakOverlap } from '../helpers/batch';
import { tempDir, waitFor } from '../helpers/tmp';

/**
 * A long-lived agent worker (docs/datasets.md, "Worker mode") on the real `openai` SDK: it keeps
 * LIGHTNING_RUNNER_CONCURRENCY rollouts going, each one LLM call, a reward from its task and a
 * `/finish`. On demand through the task: `crash` (the whole worker dies mid-rollout, once),
 * `hang` (never finishes; waits until its URL is revoked), `fail` (finishes as failed), `stuck` (the whole worker
 * blocks, once, where no revoked URL reaches it: a tool that never returns).
 */
const WORKER = `
const fs = require('node:fs');
const OpenAI = require(${JSON.stringify(path.join(REPO_ROOT, 'node_modules', 'openai'))});
const runner = process.env.LIGHTNING_RUNNER_URL;
const dir = process.env.AGENT_DIR;
const log = (event) => fs.appendFileSync(dir + '/events', JSON.stringify({ pid: process.pid, at: Date.now(), ...event }) + '\\n');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const post = (url, body) => fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
log({ what: 'worker-start' });
async function loop() {
  for (;;) {
    const next = await fetch(runner + '/next', { method: 'POST' });
    if (next.status === 204) return;
    if (!next.ok) throw new Error('next: HTTP ' + next.status + ' ' + (await next.text()));
    const { rolloutId, url, task } = await next.json();
    log({ id: rolloutId, what: 'start' });
    if (task.crash && !fs.existsSync(dir + '/crashed')) {
      fs.writeFileSync(dir + '/crashed', '');
      process.exit(7);
    }
    if (task.stuck && !fs.existsSync(dir + '/stuck')) {
      fs.writeFileSync(dir + '/stuck', '');
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 30000);
      log({ id: rolloutId, what: 'unstuck' });
    }
    if (task.hang) {
      while ((await fetch(url + '/task')).status === 200) await sleep(50);
      log({ id: rolloutId, what: 'revoked' });
      continue;
    }
    const client = new OpenAI({ baseURL: url + '/v1', apiKey: process.env.OPENAI_API_KEY });
    await client.chat.completions.create({ model: 'gpt-test', messages: [{ role: 'user', content: JSON.stringify(task) }] });
    await post(url + '/reward', { value: task.value ?? 1 });
    await sleep(task.ms ?? 0);
    const finish = await post(url + '/finish', task.fail ? { status: 'failed', error: 'wrong answer' } : { status: 'succeeded' });
    if (!finish.ok) throw new Error('finish: HTTP ' + finish.status);
    log({ id: rolloutId, what: 'end' });
  }
}
Promise.all(Array.from({ length: Number(process.env.LIGHTNING_RUNNER_CONCURRENCY) }, loop)).then(
  () => log({ what: 'worker-exit' }),
  (error) => { console.error(error); process.exit(1); },
);
`;

/** The same worker in Python's standard library only (urllib), one rollout at a time. */
const PY_WORKER = `
import json, os, urllib.request, urllib.error

def post(url, body=None):
    data = json.dumps(body).encode() if body is not None else b''
    req = urllib.request.Request(url, data=data, method='POST', headers={'content-type': 'application/json', 'authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})
    with urllib.request.urlopen(req) as res:
        return res.status, (json.loads(res.read() or b'null'))

runner = os.environ['LIGHTNING_RUNNER_URL']
while True:
    status, job = post(runner + '/next')
    if status == 204:
        break
    task = job['task']
    _, answer = post(job['url'] + '/v1/chat/completions', {'model': 'gpt-test', 'messages': [{'role': 'user', 'content': task['question']}]})
    ok = 'sunny' in answer['choices'][0]['message']['content']
    post(job['url'] + '/reward', {'value': 1.0 if ok else 0.0})
    post(job['url'] + '/finish', {'status': 'succeeded'})
`;

type Event = { pid: number; at: number; what: string; id?: string };

async function setUp(
  t: Parameters<typeof tempDir>[0],
  tasks: object[],
): Promise<{ cwd: string; env: NodeJS.ProcessEnv; upstream: ScriptedUpstream }> {
  const cwd = tempDir(t);
  fs.writeFileSync(path.join(cwd, 'worker.js'), WORKER);
  fs.writeFileSync(path.join(cwd, 'worker.py'), PY_WORKER);
  fs.writeFileSync(path.join(cwd, 'tasks.jsonl'), tasks.map((task) => JSON.stringify(task)).join('\n'));
  const upstream = await startScriptedUpstream();
  t.after(() => upstream.close());
  const imported = await runCli(['dataset', 'import', 'tasks.jsonl'], { cwd });
  assert.equal(imported.code, 0, imported.stderr);
  return { cwd, env: { AGENT_DIR: cwd, OPENAI_BASE_URL: '', OPENAI_API_BASE: '' }, upstream };
}

function events(cwd: string): Event[] {
  const file = path.join(cwd, 'events');
  // A worker may have created the file and not yet written its line: only whole lines count.
  return fs.existsSync(file)
    ? fs
        .readFileSync(file, 'utf8')
        .split('\n')
        .filter((line) => line.endsWith('}'))
        .map((line) => JSON.parse(line) as Event)
    : [];
}

function workerPids(cwd: string): number[] {
  return events(cwd)
    .filter((e) => e.what === 'worker-start')
    .map((e) => e.pid);
}

/** `dataset run tasks FLAGS --upstream URL -- node worker.js` in the test's folder. */
function runWorkers(
  { cwd, env, upstream }: { cwd: string; env: NodeJS.ProcessEnv; upstream: ScriptedUpstream },
  flags: string[],
): ReturnType<typeof runCli> {
  return runCli(
    ['dataset', 'run', 'tasks', ...flags, '--upstream', upstream.url, '--', process.execPath, 'worker.js'],
    {
      cwd,
      env,
    },
  );
}

test('dataset run --workers: every task × samples through 2 long-lived workers, rollouts overlapping, rewards, LLM calls recorded, 204 at the end', async (t) => {
  const { cwd, env, upstream } = await setUp(t, [
    { id: 'good', value: 1, ms: 150 },
    { id: 'bad', value: 0, ms: 150 },
    { id: 'half', value: 0.5, ms: 150 },
  ]);
  const run = await runCli(
    [
      'dataset',
      'run',
      'tasks',
      '--samples',
      '4',
      '--workers',
      '2',
      '--concurrency',
      '4',
      '--upstream',
      upstream.url,
      '--json',
      '--',
      process.execPath,
      'worker.js',
    ],
    { cwd, env },
  );
  assert.equal(run.code, 0, run.stderr);
  const summary = JSON.parse(run.stdout) as {
    batchId: string;
    tasks: Array<{ task: string; rollouts: number; succeeded: number; meanReward: number }>;
  };
  assert.deepEqual(
    summary.tasks.map((s) => [s.task, s.rollouts, s.succeeded, s.meanReward]),
    [
      ['good', 4, 4, 1],
      ['bad', 4, 4, 0],
      ['half', 4, 4, 0.5],
      ['(all)', 12, 12, 0.5],
    ],
  );
  const rollouts = batchOf(cwd);
  assert.equal(rollouts.length, 12);
  assert.ok(
    rollouts.every(
      (r) => r.batchId === summary.batchId && r.status === 'succeeded' && r.attemptCount === 1 && r.llmCalls === 1,
    ),
    'each rollout: one attempt, its LLM call recorded',
  );
  assert.equal(upstream.requests.filter((r) => r.path.endsWith('/chat/completions')).length, 12);
  // Two worker processes did it all, each kept two rollouts going, and both stopped on their 204.
  const log = events(cwd);
  assert.equal(new Set(workerPids(cwd)).size, 2);
  assert.equal(log.filter((e) => e.what === 'worker-exit').length, 2, 'both workers saw the batch end (204)');
  const peak = peakOverlap(log);
  assert.ok(peak > 2 && peak <= 4, `rollouts in flight at once: ${peak} (2 workers × 2)`);
  assert.match(run.stderr, /2 workers × 2/);
});

test('dataset run --workers: a worker that dies mid-rollout fails that attempt (retried) and is restarted; a hung rollout times out and loses its URL', async (t) => {
  const { cwd, env, upstream } = await setUp(t, [
    { id: 'crashes', crash: true },
    { id: 'hangs', hang: true },
    { id: 'fine' },
  ]);
  const run = await runWorkers({ cwd, env, upstream }, [
    '--workers',
    '1',
    '--concurrency',
    '2',
    '--retries',
    '1',
    '--timeout',
    '3',
  ]);
  assert.equal(run.code, 0, run.stderr);
  const [crashes, hangs, fine] = batchOf(cwd);
  assert.deepEqual([crashes!.status, crashes!.attemptCount], ['succeeded', 2]);
  assert.deepEqual([hangs!.status, hangs!.attemptCount, hangs!.error], ['timeout', 2, 'timed out after 3 s']);
  assert.deepEqual([fine!.status, fine!.reward], ['succeeded', 1]);
  assert.ok(workerPids(cwd).length >= 2, 'the crashed worker was replaced');
  // (Its first attempt may have died with the crashing worker; its last one timed out.)
  assert.ok(
    events(cwd).some((e) => e.what === 'revoked' && e.id === hangs!.id),
    'the timed-out attempt found its URL revoked (404)',
  );
  assert.match(run.stderr, /crashes failed \(retrying\)/);
  const detail = await runCli(['show', crashes!.id, '--json'], { cwd });
  assert.match(detail.stdout, /the agent worker exited with code 7/);
});

test('dataset run --workers: a worker that keeps dying fails the batch with its error after bounded restarts', async (t) => {
  const { cwd, env } = await setUp(t, [{ id: 'a' }, { id: 'b' }]);
  fs.writeFileSync(
    path.join(cwd, 'dies.js'),
    `require('node:fs').appendFileSync(process.env.AGENT_DIR + '/events', JSON.stringify({ pid: process.pid, at: Date.now(), what: 'worker-start' }) + '\\n'); process.exit(2);`,
  );
  const run = await runCli(['dataset', 'run', 'tasks', '--workers', '1', '--', process.execPath, 'dies.js'], {
    cwd,
    env,
  });
  assert.notEqual(run.code, 0);
  assert.match(run.stderr, /the agent worker exited with code 2; 3 restarts used up/);
  assert.equal(workerPids(cwd).length, 4, 'one start and 3 restarts');
  assert.ok(batchOf(cwd).every((r) => r.status === 'cancelled'));
  // A command that cannot start at all (executable, its interpreter missing) is not restarted; one that is not there
  // is refused before any batch.
  fs.writeFileSync(path.join(cwd, 'broken-agent'), '#!/nonexistent/interpreter\n', { mode: 0o755 });
  const broken = await runCli(['dataset', 'run', 'tasks', '--workers', '2', '--', path.join(cwd, 'broken-agent')], {
    cwd,
    env,
  });
  assert.notEqual(broken.code, 0);
  assert.match(broken.stderr, /the agent worker could not start \(.*broken-agent: spawn .* ENOENT\)/);
  assert.doesNotMatch(broken.stderr, /restarts used up/);
  const missing = await runCli(['dataset', 'run', 'tasks', '--workers', '2', '--', path.join(cwd, 'no-such-agent')], {
    cwd,
    env,
  });
  assert.equal(missing.code, 2, missing.stderr);
  assert.match(missing.stderr, /no-such-agent: no such file; check the agent command after --/);
});

test('dataset run --workers: a worker left holding nothing by a timeout is replaced: stopped when stuck, exiting by itself when only slow', async (t) => {
  const { cwd, env, upstream } = await setUp(t, [
    { id: 'stuck', stuck: true },
    { id: 'hangs', hang: true },
    { id: 'fine' },
  ]);
  const run = await runWorkers({ cwd, env, upstream }, [
    '--workers',
    '1',
    '--concurrency',
    '1',
    '--retries',
    '1',
    '--timeout',
    '2',
  ]);
  assert.equal(run.code, 0, run.stderr);
  const [stuck, hangs, fine] = batchOf(cwd);
  assert.deepEqual([stuck!.status, stuck!.attemptCount], ['succeeded', 2], 'retried on a replacement worker');
  assert.deepEqual([hangs!.status, hangs!.attemptCount], ['timeout', 2]);
  assert.equal(fine!.status, 'succeeded');
  const log = events(cwd);
  assert.ok(
    !log.some((e) => e.what === 'unstuck'),
    'the stuck worker was stopped, not waited for (it would have come back 30 s later, to a revoked URL)',
  );
  // The slow one (its rollout hung, its loop polling the revoked URL) saw the 404, was told 204 and exited by itself.
  const slow = log.find((e) => e.what === 'revoked' && e.id === hangs!.id)!;
  assert.ok(
    log.some((e) => e.what === 'worker-exit' && e.pid === slow.pid),
    'the slow worker exited on its 204',
  );
  // One worker to start and a replacement per timeout but the last (the batch was then done): none counted as a
  // restart.
  assert.equal(new Set(workerPids(cwd)).size, 3);
  assert.doesNotMatch(run.stderr, /restarts used up/);
});

test('dataset run --workers: Ctrl-C stops the workers and cancels the unfinished rollouts', async (t) => {
  const { cwd, env } = await setUp(t, [
    { id: 'a', hang: true },
    { id: 'b', hang: true },
    { id: 'c', hang: true },
  ]);
  const child = spawn(
    process.execPath,
    [CLI, 'dataset', 'run', 'tasks', '--workers', '2', '--', process.execPath, 'worker.js'],
    { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  // Two workers × two loops take all three rollouts, so the count of starts may pass 2 between polls: wait on the
  // workers.
  await waitFor(
    () =>
      new Set(
        events(cwd)
          .filter((e) => e.what === 'start')
          .map((e) => e.pid),
      ).size === 2,
    'both workers to hold a rollout',
    30_000,
  );
  child.kill('SIGINT');
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  assert.equal(code, 130, stderr);
  const pids = workerPids(cwd);
  await waitFor(() => pids.every((pid) => !isProcessAlive(pid)), 'no worker left', 10_000);
  assert.deepEqual(
    batchOf(cwd).map((r) => r.status),
    ['cancelled', 'cancelled', 'cancelled'],
  );
});

test('dataset run --workers: a Python standard-library worker (urllib) runs the batch', async (t) => {
  const { cwd, env, upstream } = await setUp(t, [
    { id: 'p1', question: 'weather in Paris?' },
    { id: 'p2', question: 'and in Oslo?' },
  ]);
  const run = await runCli(
    [
      'dataset',
      'run',
      'tasks',
      '--samples',
      '2',
      '--workers',
      '2',
      '--upstream',
      upstream.url,
      '--json',
      '--',
      '/usr/bin/python3',
      'worker.py',
    ],
    { cwd, env },
  );
  assert.equal(run.code, 0, run.stderr);
  const all = (
    JSON.parse(run.stdout) as {
      tasks: Array<{ task: string; rollouts: number; succeeded: number; meanReward: number }>;
    }
  ).tasks.at(-1)!;
  assert.deepEqual([all.rollouts, all.succeeded, all.meanReward], [4, 4, 1]);
  assert.ok(batchOf(cwd).every((r) => r.llmCalls === 1));
});

test('worker batch HTTP: /next hands out started rollouts up to the per-worker limit, /finish validates its body and revokes the URL, unknown keys are 404', async (t) => {
  const dir = tempDir(t);
  const upstream = await startScriptedUpstream();
  t.after(() => upstream.close());
  const daemon = await startDaemon(path.join(dir, 'store.db'));
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const ids: string[] = [];
  for (const value of [1, 2])
    ids.push(
      (
        await client.request('createRollout', {
          mode: 'train',
          task: { id: `t${value}`, input: { value } },
          batchId: 'batch-x',
        })
      ).id,
    );
  const batch = await client.request('openWorkerBatch', { rolloutIds: ids, upstream: upstream.url, timeoutMs: 60_000 });
  const post = (url: string, body?: string, type = 'application/json') =>
    fetch(url, { method: 'POST', headers: { 'content-type': type }, body });

  const first = await post(`${batch.url}/w0/next`);
  assert.equal(first.status, 200);
  const job = (await first.json()) as { rolloutId: string; url: string; task: unknown };
  assert.deepEqual([job.rolloutId, job.task], [ids[0], { value: 1 }]);
  assert.equal((await client.request('getRollout', { id: job.rolloutId })).rollout.status, 'running');
  const over = await post(`${batch.url}/w0/next`);
  assert.equal(over.status, 409, 'one rollout per worker unless told otherwise');
  assert.match(((await over.json()) as { error: { message: string } }).error.message, /LIGHTNING_RUNNER_CONCURRENCY/);

  for (const [body, field] of [
    ['{"status":"done"}', /body\.status/],
    ['{"status":"succeeded","extra":1}', /extra/],
    ['{"status":"failed","error":5}', /body\.error/],
    ['{}', /body\.status/],
  ] as const) {
    const bad = await post(`${job.url}/finish`, body);
    assert.equal(bad.status, 400, body);
    assert.match(((await bad.json()) as { error: { message: string } }).error.message, field);
  }
  assert.equal((await post(`${job.url}/finish`, 'status=succeeded', 'text/plain')).status, 415);
  assert.equal(
    (await client.request('getRollout', { id: job.rolloutId })).rollout.status,
    'running',
    'bad bodies change nothing',
  );

  const done = await post(`${job.url}/finish`, '{"status":"succeeded"}');
  assert.equal(done.status, 200);
  assert.equal((await client.request('getRollout', { id: job.rolloutId })).rollout.status, 'succeeded');
  assert.equal(
    (await post(`${job.url}/finish`, '{"status":"succeeded"}')).status,
    404,
    'a finished rollout key is revoked',
  );
  assert.equal((await fetch(`${job.url}/task`)).status, 404);
  assert.equal(
    (await post(`${batch.url.replace(/b\/[^/]+$/, 'b/AAAAAAAAAAAAAAAAAAAAAAAA')}/w0/next`)).status,
    404,
    'unknown runner key',
  );

  const second = (await (await post(`${batch.url}/w1/next`)).json()) as { url: string };
  const events = await client.request('workerBatchEvents', { id: batch.id, waitMs: 0 });
  assert.deepEqual([events.events.length, events.done], [1, false]);
  assert.equal((await post(`${second.url}/finish`, '{"status":"failed","error":"no answer"}')).status, 200);
  assert.equal((await post(`${batch.url}/w0/next`)).status, 204, 'the batch is done');
  const last = await client.request('workerBatchEvents', { id: batch.id, after: events.next });
  assert.equal(last.done, true);
  assert.deepEqual(
    last.events.map((e) => [e.rollout.status, e.rollout.error, e.retrying]),
    [['failed', 'no answer', false]],
  );

  // A batch is opened over queued rollouts only, each once.
  await assert.rejects(
    client.request('openWorkerBatch', { rolloutIds: [ids[0]!], timeoutMs: 1_000 }),
    /params\.rolloutIds: rollout ro-[0-9a-f]+ is succeeded, not queued/,
  );
  const fresh = (await client.request('createRollout', { batchId: 'batch-x' })).id;
  await assert.rejects(
    client.request('openWorkerBatch', { rolloutIds: [fresh, fresh], timeoutMs: 1_000 }),
    /listed twice/,
  );
  await assert.rejects(
    client.request('openWorkerBatch', { rolloutIds: ['ro-missing'], timeoutMs: 1_000 }),
    /does not exist/,
  );
});
