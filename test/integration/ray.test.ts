// needs: ray
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { isProcessAlive } from '../../trainer-daemon/protocol/node/discovery';
import { CLI, runCli } from '../helpers/daemon';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import { attemptsOf, batchOf } from '../helpers/batch';
import { tempDir, waitFor } from '../helpers/tmp';
import { descendants, stillRunning } from '../helpers/processTree';
import { rayFixture, startRayHead } from '../helpers/ray';

/**
 * `lightning dataset run --ray`: the agents as Ray tasks on a real local Ray head (loopback, 2 CPUs,
 * so 2 Ray worker processes), their calls, rewards and logs coming back to the daemon. Needs a Python
 * with ray: LIGHTNING_TEST_PYTHON (PYTHON.md).
 */
const PYTHON = process.env.LIGHTNING_TEST_PYTHON;

/** One chat call through the daemon, a reward from the task; `fail` fails its first attempt, `hang` never ends. */
const AGENT = `
import json, os, sys, time, urllib.request
task = json.loads(os.environ['LIGHTNING_TASK'])
with open(os.path.join(os.getcwd(), 'pids'), 'a') as f:
    f.write(str(os.getpid()) + '\\n')
def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method='POST', headers={'content-type': 'application/json', 'authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})
    with urllib.request.urlopen(req, timeout=30) as res:
        return json.loads(res.read())
print('agent on task', task['name'], 'NOT_FORWARDED' in os.environ, flush=True)
if task.get('hang'):
    time.sleep(600)
marker = os.path.join(os.getcwd(), 'failed-' + task['name'])
if task.get('fail') and not os.path.exists(marker):
    open(marker, 'w').close()
    print('failing the first attempt', flush=True)
    sys.exit(4)
answer = post(os.environ['OPENAI_BASE_URL'] + '/chat/completions', {'model': 'gpt-test', 'messages': [{'role': 'user', 'content': task['name']}]})
post(os.environ['LIGHTNING_URL'] + '/reward', {'value': task.get('value', 1)})
print('answer', answer['choices'][0]['message']['content'], flush=True)
`;

/** A long-lived worker (docs/datasets.md, "Worker mode") in the standard library. */
const WORKER = `
import json, os, urllib.request
def post(url, body=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else b'', method='POST', headers={'content-type': 'application/json', 'authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})
    with urllib.request.urlopen(req, timeout=30) as res:
        return res.status, json.loads(res.read() or b'null')
print('worker up', flush=True)
while True:
    status, job = post(os.environ['LIGHTNING_RUNNER_URL'] + '/next')
    if status == 204:
        break
    post(job['url'] + '/v1/chat/completions', {'model': 'gpt-test', 'messages': [{'role': 'user', 'content': job['task']['name']}]})
    post(job['url'] + '/reward', {'value': job['task'].get('value', 1)})
    post(job['url'] + '/finish', {'status': 'succeeded'})
print('worker done', flush=True)
`;

const ray = rayFixture();

before(() => ray.start());
after(() => ray.stop());

async function setUp(
  t: Parameters<typeof tempDir>[0],
  tasks: object[],
): Promise<{ cwd: string; env: NodeJS.ProcessEnv; upstream: ScriptedUpstream }> {
  const cwd = tempDir(t);
  fs.writeFileSync(path.join(cwd, 'agent.py'), AGENT);
  fs.writeFileSync(path.join(cwd, 'worker.py'), WORKER);
  // `name` repeats the id inside the task input the agents read (LIGHTNING_TASK holds the input, not the id).
  fs.writeFileSync(
    path.join(cwd, 'tasks.jsonl'),
    tasks.map((task) => JSON.stringify({ ...task, name: (task as { id: string }).id })).join('\n'),
  );
  const upstream = await startScriptedUpstream();
  t.after(() => upstream.close());
  const imported = await runCli(['dataset', 'import', 'tasks.jsonl'], { cwd });
  assert.equal(imported.code, 0, imported.stderr);
  // The agents run in the same folder on the (only) node; only Lightning's variables travel with them.
  return {
    cwd,
    env: { NOT_FORWARDED: 'x', OPENAI_BASE_URL: '', OPENAI_API_BASE: '', LIGHTNING_RAY_PYTHON: PYTHON },
    upstream,
  };
}

test('dataset run --ray (process mode): each attempt a Ray task; calls and rewards recorded, a failed attempt retried with the node named, a hang timed out, logs brought back', async (t) => {
  const { cwd, env, upstream } = await setUp(t, [
    { id: 'good', value: 1 },
    { id: 'half', value: 0.5 },
    { id: 'flaky', fail: true },
    { id: 'stuck', hang: true },
  ]);
  const run = await runCli(
    [
      'dataset',
      'run',
      'tasks',
      '--samples',
      '1',
      '--concurrency',
      '2',
      '--retries',
      '1',
      '--timeout',
      '3',
      '--upstream',
      upstream.url,
      '--ray',
      ray.head.address,
      '--json',
      '--',
      PYTHON!,
      'agent.py',
    ],
    { cwd, env },
  );
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stderr, /on the Ray cluster 127\.0\.0\.1:\d+/);
  const summary = JSON.parse(run.stdout) as {
    batchId: string;
    tasks: Array<{ task: string; rollouts: number; succeeded: number; meanReward: number | null }>;
  };
  assert.deepEqual(
    summary.tasks.map((s) => [s.task, s.succeeded, s.meanReward]),
    [
      ['good', 1, 1],
      ['half', 1, 0.5],
      ['flaky', 1, 1],
      ['stuck', 0, null],
      ['(all)', 3, 0.8333333333333334],
    ],
  );
  const rollouts = batchOf(cwd);
  const byTask = new Map(rollouts.map((r) => [r.task!.id, r]));
  assert.equal(byTask.get('good')!.llmCalls, 1);
  assert.equal(byTask.get('flaky')!.attemptCount, 2, 'the failed attempt ran again');
  const stuck = byTask.get('stuck')!;
  assert.equal(stuck.status, 'timeout');
  assert.match(stuck.error ?? '', /timed out after 3 s on Ray node \S+ \(/, 'the timeout names the node');
  assert.equal(upstream.requests.filter((r) => r.path.endsWith('/chat/completions')).length, 3);
  // Per-attempt logs, as locally: headed by the node, then the agent's own output.
  const logs = path.join(cwd, '.lightning', 'logs', summary.batchId);
  const flaky = byTask.get('flaky')!;
  const first = fs.readFileSync(path.join(logs, `${flaky.id}.1.log`), 'utf8');
  assert.match(first, /^\[lightning\] running on Ray node \S+ \(.+\), node id [0-9a-f]+\n/);
  assert.match(
    first,
    /agent on task flaky False\nfailing the first attempt/,
    "the runner's own environment stays on this machine",
  );
  assert.match(fs.readFileSync(path.join(logs, `${flaky.id}.2.log`), 'utf8'), /answer /);
  // Each attempt (the retried failure and timeout: 2 each) records the node it ran on, the one its log names;
  // `lightning show` names it.
  const attempts = [...attemptsOf(cwd).values()].flat();
  assert.equal(attempts.length, 6);
  const [, ip = '', host, nodeId] = /^\[lightning\] running on Ray node (\S+) \((.+)\), node id ([0-9a-f]+)\n/.exec(
    first,
  )!;
  assert.ok(
    attempts.every((a) => a.node && a.node.ip === ip && a.node.host === host && a.node.nodeId === nodeId),
    JSON.stringify(attempts),
  );
  const shown = await runCli(['show', flaky.id], { cwd });
  assert.equal(shown.code, 0, shown.stderr);
  assert.ok(shown.stdout.includes(`\n  node      Ray node ${ip} (${host}), node id ${nodeId}\n`), shown.stdout);
  assert.match(
    shown.stdout,
    new RegExp(
      `#\\s+STATUS\\s+STARTED\\s+NODE\\s+ERROR\\n1\\s+failed\\s+.+\\s+${ip.replace(/\./g, '\\.')} \\(.+\\)\\s+\\S+ exited with code 4 on Ray node ${ip.replace(/\./g, '\\.')} `,
    ),
  );
});

test('dataset run --ray (process mode): a command the node cannot start stops the batch at its first attempt (exit 1), naming the node; the rest stays queued', async (t) => {
  const { cwd, env, upstream } = await setUp(t, [{ id: 'a' }, { id: 'b' }, { id: 'c' }]);
  // Not checked on this machine (the agents run on the cluster's nodes): the node finds it missing.
  const run = await runCli(
    [
      'dataset',
      'run',
      'tasks',
      '--concurrency',
      '1',
      '--retries',
      '1',
      '--upstream',
      upstream.url,
      '--ray',
      ray.head.address,
      '--',
      './no-such-agent',
    ],
    { cwd, env },
  );
  assert.equal(run.code, 1, run.stderr);
  assert.match(
    run.stderr,
    /the agent command could not start \(cannot run \.\/no-such-agent on node [\d.]+: .*No such file.*\); check the command after --/,
  );
  assert.deepEqual(
    batchOf(cwd)
      .map((r) => r.status)
      .sort(),
    ['failed', 'queued', 'queued'],
    'one attempt failed, not retried; the others never ran',
  );
});

test('dataset run --ray --workers 2: long-lived workers as Ray tasks pull every rollout and stop on their 204', async (t) => {
  const tasks = Array.from({ length: 6 }, (_, i) => ({ id: `t${i}`, value: i % 2 }));
  const { cwd, env, upstream } = await setUp(t, tasks);
  const run = await runCli(
    [
      'dataset',
      'run',
      'tasks',
      '--samples',
      '2',
      '--workers',
      '2',
      '--concurrency',
      '2',
      '--upstream',
      upstream.url,
      '--ray',
      ray.head.address,
      '--json',
      '--',
      PYTHON!,
      'worker.py',
    ],
    { cwd, env },
  );
  assert.equal(run.code, 0, run.stderr);
  const summary = JSON.parse(run.stdout) as {
    batchId: string;
    tasks: Array<{ task: string; rollouts: number; succeeded: number; meanReward: number | null }>;
  };
  assert.deepEqual(summary.tasks.at(-1), {
    ...summary.tasks.at(-1)!,
    task: '(all)',
    rollouts: 12,
    succeeded: 12,
    meanReward: 0.5,
  });
  assert.ok(batchOf(cwd).every((r) => r.llmCalls === 1));
  assert.equal(upstream.requests.filter((r) => r.path.endsWith('/chat/completions')).length, 12);
  const logs = path.join(cwd, '.lightning', 'logs', summary.batchId);
  for (const worker of ['w0', 'w1']) {
    const log = fs.readFileSync(path.join(logs, `worker-${worker}.log`), 'utf8');
    assert.match(log, /^\[lightning\] running on Ray node .*\nworker up\n(.|\n)*worker done\n$/);
  }
  // Each rollout's attempt records the node of the worker that ran it.
  const attempts = [...attemptsOf(cwd).values()].flat();
  assert.equal(attempts.length, 12);
  const ip = /^\[lightning\] running on Ray node (\S+) /.exec(
    fs.readFileSync(path.join(logs, 'worker-w0.log'), 'utf8'),
  )![1];
  assert.ok(
    attempts.every((a) => a.node?.ip === ip),
    JSON.stringify(attempts),
  );
});

/**
 * A long-lived worker whose agent speaks the Anthropic Messages API (its calls go under the rollout URL, as the SDK's
 * ANTHROPIC_BASE_URL).
 */
const MESSAGES_WORKER = `
import json, os, urllib.request
def post(url, body=None, headers=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else b'', method='POST', headers={'content-type': 'application/json', **(headers or {})})
    with urllib.request.urlopen(req, timeout=30) as res:
        return res.status, json.loads(res.read() or b'null')
while True:
    status, job = post(os.environ['LIGHTNING_RUNNER_URL'] + '/next')
    if status == 204:
        break
    post(job['url'] + '/v1/messages', {'model': 'claude-test', 'max_tokens': 64, 'messages': [{'role': 'user', 'content': job['task']['name']}]}, {'x-api-key': 'sk-ant-test', 'anthropic-version': '2023-06-01'})
    post(job['url'] + '/finish', {'status': 'succeeded'})
`;

test("dataset run --ray --workers: an Anthropic agent's calls go to the runner's own ANTHROPIC_BASE_URL, as locally", async (t) => {
  const { cwd, env, upstream } = await setUp(t, [{ id: 'a' }, { id: 'b' }]);
  const anthropic = await startScriptedUpstream();
  t.after(() => anthropic.close());
  fs.writeFileSync(path.join(cwd, 'messages-worker.py'), MESSAGES_WORKER);
  const run = await runCli(
    [
      'dataset',
      'run',
      'tasks',
      '--workers',
      '1',
      '--upstream',
      upstream.url,
      '--ray',
      ray.head.address,
      '--json',
      '--',
      PYTHON!,
      'messages-worker.py',
    ],
    { cwd, env: { ...env, ANTHROPIC_BASE_URL: anthropic.origin } },
  );
  assert.equal(run.code, 0, run.stderr);
  assert.ok(
    batchOf(cwd).every((r) => r.status === 'succeeded' && r.llmCalls === 1),
    JSON.stringify(batchOf(cwd)),
  );
  assert.equal(
    anthropic.requests.filter((r) => r.path.endsWith('/v1/messages')).length,
    2,
    'the Messages calls reached ANTHROPIC_BASE_URL',
  );
  assert.equal(upstream.requests.length, 0, 'none went to the OpenAI upstream');
});

test('dataset run --ray: Ctrl-C cancels the Ray tasks, the agents on the node stop, the rollouts become cancelled', async (t) => {
  const { cwd, env, upstream } = await setUp(t, [
    { id: 'a', hang: true },
    { id: 'b', hang: true },
  ]);
  const child = spawn(
    process.execPath,
    [
      CLI,
      'dataset',
      'run',
      'tasks',
      '--concurrency',
      '2',
      '--upstream',
      upstream.url,
      '--ray',
      ray.head.address,
      '--json',
      '--',
      PYTHON!,
      'agent.py',
    ],
    { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk.toString()));
  const pidFile = path.join(cwd, 'pids');
  const pids = await waitFor(
    () => {
      const list = fs.existsSync(pidFile)
        ? fs.readFileSync(pidFile, 'utf8').trim().split('\n').filter(Boolean).map(Number)
        : [];
      return list.length === 2 ? list : null;
    },
    'both agents to start on the Ray node',
    90_000,
  );
  const code = new Promise<number | null>((resolve) => child.once('close', resolve));
  child.kill('SIGINT');
  assert.equal(await code, 130, stderr);
  await waitFor(() => pids.every((pid) => !isProcessAlive(pid)), 'the agents on the node to be stopped', 20_000);
  const rollouts = batchOf(cwd);
  assert.deepEqual(
    rollouts.map((r) => r.status),
    ['cancelled', 'cancelled'],
  );
  assert.match(stderr, /cancelling the batch/);
});

test('a stopped Ray head leaves none of its processes running, its workers (in sessions of their own) included', async () => {
  const head = await startRayHead(ray.python);
  let stopped = false;
  try {
    // A driver's task: the head starts worker processes for it, each in a session of its own.
    execFileSync(
      ray.python,
      ['-c', `import ray; ray.init(address='${head.address}'); assert ray.get(ray.remote(lambda: 1).remote()) == 1`],
      { stdio: 'pipe' },
    );
    const own = descendants(head.pid);
    // A process may end between the listing and the read.
    const commandLine = (pid: number): string => {
      try {
        return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim().slice(0, 120);
      } catch {
        return '';
      }
    };
    assert.ok(
      own.some(({ pid }) => commandLine(pid).startsWith('ray::')),
      'the head started Ray workers',
    );
    await head.stop();
    stopped = true;
    // A SIGKILL takes effect as the process next runs: a moment for the last of them.
    await waitFor(() => !own.some(stillRunning), "the head's processes to end", 5_000).catch(() => undefined);
    assert.deepEqual(
      own.filter(stillRunning).map(({ pid }) => `${pid}: ${commandLine(pid)}`),
      [],
    );
  } finally {
    if (!stopped) await head.stop();
  }
});
