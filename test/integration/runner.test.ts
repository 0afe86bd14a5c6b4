import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { isProcessAlive } from '../../trainer-daemon/protocol/node/discovery';
import { Store } from '../../trainer-daemon/store/store';
import { CLI, runCli } from '../helpers/daemon';
import { batchOf, peakOverlap } from '../helpers/batch';
import { tempDir, waitFor } from '../helpers/tmp';
import { parsed } from '../helpers/params';

/**
 * A test agent: records when it starts and stops, can fail its first attempt, can start a child
 * of its own and hang, and posts a reward from its task.
 */
const AGENT = `
const fs = require('node:fs');
const { spawn } = require('node:child_process');
const task = JSON.parse(process.env.LIGHTNING_TASK);
const dir = process.env.AGENT_DIR;
fs.appendFileSync(dir + '/events', JSON.stringify({ id: process.env.LIGHTNING_ROLLOUT_ID, at: Date.now(), what: 'start' }) + '\\n');
if (task.failFirst && !fs.existsSync(dir + '/failed-' + process.env.LIGHTNING_ROLLOUT_ID)) {
  fs.writeFileSync(dir + '/failed-' + process.env.LIGHTNING_ROLLOUT_ID, '');
  process.exit(3);
}
if (task.hang) {
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  // Written whole or not at all (a rename): a test that sees the file reads both pids, even if this agent is killed now.
  fs.writeFileSync(dir + '/.pids-' + process.env.LIGHTNING_ROLLOUT_ID, process.pid + ' ' + child.pid);
  fs.renameSync(dir + '/.pids-' + process.env.LIGHTNING_ROLLOUT_ID, dir + '/pids-' + process.env.LIGHTNING_ROLLOUT_ID);
  setInterval(() => {}, 1000);
} else {
  setTimeout(async () => {
    await fetch(process.env.LIGHTNING_URL + '/reward', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ value: task.value ?? 1 }) });
    fs.appendFileSync(dir + '/events', JSON.stringify({ id: process.env.LIGHTNING_ROLLOUT_ID, at: Date.now(), what: 'end' }) + '\\n');
  }, task.ms ?? 200);
}
`;

function setUp(t: Parameters<typeof tempDir>[0], tasks: object[]): { cwd: string; env: NodeJS.ProcessEnv } {
  const cwd = tempDir(t);
  fs.writeFileSync(path.join(cwd, 'agent.js'), AGENT);
  fs.writeFileSync(path.join(cwd, 'tasks.jsonl'), tasks.map((task) => JSON.stringify(task)).join('\n'));
  return { cwd, env: { AGENT_DIR: cwd } };
}

async function importTasks(cwd: string): Promise<void> {
  const imported = await runCli(['dataset', 'import', 'tasks.jsonl'], { cwd });
  assert.equal(imported.code, 0, imported.stderr);
}

function events(cwd: string): Array<{ id: string; at: number; what: string }> {
  return fs
    .readFileSync(path.join(cwd, 'events'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));
}

test('dataset run: every task × samples, at most --concurrency at once, rewards and a per-task summary', async (t) => {
  const { cwd, env } = setUp(t, [
    { id: 'good', value: 1, ms: 300 },
    { id: 'bad', value: 0, ms: 300 },
    { id: 'half', value: 0.5, ms: 300 },
  ]);
  await importTasks(cwd);
  const run = await runCli(
    ['dataset', 'run', 'tasks', '--samples', '2', '--concurrency', '2', '--json', '--', process.execPath, 'agent.js'],
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
      ['good', 2, 2, 1],
      ['bad', 2, 2, 0],
      ['half', 2, 2, 0.5],
      ['(all)', 6, 6, 0.5],
    ],
  );
  const rollouts = batchOf(cwd);
  assert.equal(rollouts.length, 6);
  assert.ok(rollouts.every((r) => r.batchId === summary.batchId && r.mode === 'train' && r.datasetId !== null));
  // Overlap of agent lifetimes, from their own start/end records.
  const peak = peakOverlap(events(cwd));
  assert.equal(peak, 2, 'two agents ran at once, never more');
  assert.match(run.stderr, /\[6\/6\]/);
});

// The limit leaves the quick agents room on a loaded machine (a node start can take over a second).
test('dataset run: a timeout stops the agent and its children; a failure is retried as a new attempt', async (t) => {
  const { cwd, env } = setUp(t, [
    { id: 'hangs', hang: true },
    { id: 'flaky', failFirst: true },
  ]);
  await importTasks(cwd);
  const run = await runCli(
    [
      'dataset',
      'run',
      'tasks',
      '--timeout',
      '3',
      '--retries',
      '1',
      '--concurrency',
      '2',
      '--',
      process.execPath,
      'agent.js',
    ],
    { cwd, env },
  );
  assert.equal(run.code, 0, run.stderr);
  const [hangs, flaky] = batchOf(cwd);
  assert.deepEqual([hangs!.status, hangs!.attemptCount, hangs!.error], ['timeout', 2, 'timed out after 3 s']);
  assert.deepEqual([flaky!.status, flaky!.attemptCount, flaky!.reward], ['succeeded', 2, 1]);
  const pids = fs
    .readFileSync(path.join(cwd, `pids-${hangs!.id}`), 'utf8')
    .split(' ')
    .map(Number);
  await waitFor(() => pids.every((pid) => !isProcessAlive(pid)), 'the agent and its child to be gone');
  assert.match(run.stderr, /flaky failed \(retrying\)/);
});

test('dataset run: Ctrl-C stops every agent (no orphans) and cancels the rest; --resume finishes exactly what is missing', async (t) => {
  const { cwd, env } = setUp(t, [{ id: 'a', hang: true }, { id: 'b', hang: true }, { id: 'c' }, { id: 'd' }]);
  await importTasks(cwd);
  const child = spawn(
    process.execPath,
    [CLI, 'dataset', 'run', 'tasks', '--concurrency', '2', '--', process.execPath, 'agent.js'],
    { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const pidFiles = (): string[] => fs.readdirSync(cwd).filter((name) => name.startsWith('pids-'));
  await waitFor(() => pidFiles().length === 2, 'both hanging agents to start', 10_000);
  child.kill('SIGINT');
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  assert.equal(code, 130, stderr);
  const pids = pidFiles().flatMap((name) => fs.readFileSync(path.join(cwd, name), 'utf8').split(' ').map(Number));
  await waitFor(() => pids.every((pid) => !isProcessAlive(pid)), 'no agent process left', 5_000);
  const after = batchOf(cwd);
  assert.deepEqual(
    after.map((r) => r.status),
    ['cancelled', 'cancelled', 'cancelled', 'cancelled'],
  );

  // A batch interrupted harder: queued rollouts left behind are what --resume runs.
  // A batch interrupted harder: a queued rollout, an attempt a dead runner left running, a failed
  // attempt with one left, and one out of attempts. --resume runs exactly the first three.
  const store = Store.open(path.join(cwd, '.lightning', 'store.db'));
  const batchId = after[0]!.batchId!;
  const make = (id: string, maxAttempts: number): string =>
    store.createRollout(
      parsed('createRollout', {
        mode: 'train',
        task: { id, input: {} },
        batchId,
        datasetId: after[0]!.datasetId,
        maxAttempts,
        source: { kind: 'api' },
      }),
    ).id;
  const queued = make('e', 1);
  const orphan = make('f', 2);
  store.transitionRollout(parsed('transitionRollout', { id: orphan, to: 'running' }));
  const failedOnce = make('g', 2);
  store.transitionRollout(parsed('transitionRollout', { id: failedOnce, to: 'running' }));
  store.transitionRollout(parsed('transitionRollout', { id: failedOnce, to: 'failed', error: 'boom' }));
  const spent = make('h', 1);
  store.transitionRollout(parsed('transitionRollout', { id: spent, to: 'running' }));
  store.transitionRollout(parsed('transitionRollout', { id: spent, to: 'failed', error: 'boom' }));
  store.close();
  const resumed = await runCli(
    ['dataset', 'run', 'tasks', '--resume', batchId, '--json', '--', process.execPath, 'agent.js'],
    { cwd, env },
  );
  assert.equal(resumed.code, 0, resumed.stderr);
  const final = new Map(batchOf(cwd).map((r) => [r.id, r]));
  assert.deepEqual(
    [queued, orphan, failedOnce, spent].map((id) => [final.get(id)!.status, final.get(id)!.attemptCount]),
    [
      ['succeeded', 1],
      ['succeeded', 2],
      ['succeeded', 2],
      ['failed', 1],
    ],
  );
  assert.ok(
    after.every((r) => final.get(r.id)!.status === 'cancelled'),
    'cancelled rollouts are not run again',
  );
  const unknown = await runCli(
    ['dataset', 'run', 'tasks', '--resume', 'batch-000000000000', '--', process.execPath, 'agent.js'],
    { cwd, env },
  );
  assert.equal(unknown.code, 3);
  const exported = await runCli(['export', '--dataset', 'tasks', '--out', 'out.jsonl'], { cwd });
  assert.equal(exported.code, 0, exported.stderr);
  assert.equal(
    (JSON.parse(exported.stdout) as { exported: number }).exported,
    0,
    'the agents of this test make no LLM calls: nothing to train on',
  );
  assert.match((JSON.parse(exported.stdout) as { excludedNoCalls: number }).excludedNoCalls.toString(), /^[1-9]/);
});

test('dataset run: an agent command that cannot be found is refused before any batch (exit 2); one that cannot start stops its batch (exit 1), the rest left for --resume', async (t) => {
  const { cwd, env } = setUp(t, [{ id: 'a' }, { id: 'b' }, { id: 'c' }]);
  await importTasks(cwd);
  const typo = await runCli(['dataset', 'run', 'tasks', '--', 'no-such-agent-program', 'agent.js'], { cwd, env });
  assert.equal(typo.code, 2, typo.stderr);
  assert.match(typo.stderr, /cannot run no-such-agent-program: not found on PATH; check the agent command after --/);
  const notExecutable = await runCli(['dataset', 'run', 'tasks', '--', './tasks.jsonl'], { cwd, env });
  assert.equal(notExecutable.code, 2, notExecutable.stderr);
  assert.match(notExecutable.stderr, /cannot run \.\/tasks\.jsonl: not an executable file/);
  assert.deepEqual(batchOf(cwd), [], 'no batch made');
  // Executable, but its interpreter is missing: found only when it is started.
  fs.writeFileSync(path.join(cwd, 'broken-agent'), '#!/nonexistent/interpreter\n', { mode: 0o755 });
  const broken = await runCli(
    ['dataset', 'run', 'tasks', '--retries', '1', '--concurrency', '1', '--', './broken-agent'],
    { cwd, env },
  );
  assert.equal(broken.code, 1, broken.stderr);
  assert.match(
    broken.stderr,
    /the agent command could not start \(cannot run \.\/broken-agent: spawn \.\/broken-agent ENOENT\); check the command after --/,
  );
  const batch = batchOf(cwd);
  assert.deepEqual(
    batch.map((r) => r.status).sort(),
    ['failed', 'queued', 'queued'],
    'one attempt failed; the others never ran',
  );
  const resumed = await runCli(
    ['dataset', 'run', 'tasks', '--resume', batch[0]!.batchId!, '--json', '--', process.execPath, 'agent.js'],
    { cwd, env },
  );
  assert.equal(resumed.code, 0, resumed.stderr);
  assert.deepEqual(
    batchOf(cwd).map((r) => r.status),
    ['succeeded', 'succeeded', 'succeeded'],
  );
});

test('dataset run --resume: stops the agents a runner that died left running (their pids recorded), and nothing else', async (t) => {
  const { cwd, env } = setUp(t, [
    { id: 'a', hang: true },
    { id: 'b', hang: true },
  ]);
  await importTasks(cwd);
  const runner = spawn(
    process.execPath,
    [
      CLI,
      'dataset',
      'run',
      'tasks',
      '--concurrency',
      '2',
      '--timeout',
      '120',
      '--upstream',
      'http://127.0.0.1:9/v1',
      '--token-ids',
      '--',
      process.execPath,
      'agent.js',
    ],
    { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  runner.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const pidFiles = (): string[] => fs.readdirSync(cwd).filter((name) => name.startsWith('pids-'));
  await waitFor(() => pidFiles().length === 2, 'both hanging agents to start', 10_000);
  const batchId = /batch (batch-[0-9a-f]+)/.exec(stderr)![1]!;
  // While its runner runs it, the batch is not resumed: that would fail its attempts and stop its agents.
  const early = await runCli(['dataset', 'run', 'tasks', '--resume', batchId, '--', process.execPath, 'agent.js'], {
    cwd,
    env,
  });
  assert.equal(early.code, 4, early.stderr);
  assert.match(
    early.stderr,
    new RegExp(
      `batch ${batchId} is still being run \\(lightning dataset run, pid ${runner.pid}\\): --resume finishes a batch whose runner died; wait for that run to finish`,
    ),
  );
  // Where the runner could not be recorded (no /proc and no ps: runner.json is not written), its lock still refuses it.
  fs.rmSync(path.join(cwd, '.lightning', 'logs', batchId, 'runner.json'));
  const unrecorded = await runCli(
    ['dataset', 'run', 'tasks', '--resume', batchId, '--', process.execPath, 'agent.js'],
    { cwd, env },
  );
  assert.equal(unrecorded.code, 4, unrecorded.stderr);
  assert.match(
    unrecorded.stderr,
    new RegExp(
      `batch ${batchId} is still being run \\(lightning dataset run\\): --resume finishes a batch whose runner died`,
    ),
  );
  assert.deepEqual(
    batchOf(cwd).map((r) => r.status),
    ['running', 'running'],
  );
  // The runner dies without a chance to stop its agents (or to release its lock: the system does): they keep running.
  runner.kill('SIGKILL');
  await new Promise((resolve) => runner.on('close', resolve));
  const orphans = pidFiles().flatMap((name) => fs.readFileSync(path.join(cwd, name), 'utf8').split(' ').map(Number));
  assert.ok(
    orphans.every((pid) => isProcessAlive(pid)),
    'the orphaned agents still run',
  );
  // A process whose pid is in the record but which is not that agent (a recycled pid) is left alone.
  const bystander = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { detached: true, stdio: 'ignore' });
  t.after(() => bystander.kill('SIGKILL'));
  fs.appendFileSync(
    path.join(cwd, '.lightning', 'logs', batchId, 'agents.jsonl'),
    `${JSON.stringify({ pid: bystander.pid, identity: 'another process' })}\n`,
  );

  // The rest of the batch goes where its first calls went: another --upstream is refused, an omitted one is the
  // batch's.
  const elsewhere = await runCli(
    ['dataset', 'run', 'tasks', '--resume', batchId, '--upstream', 'http://127.0.0.1:8/v1', '--', 'node', 'agent.js'],
    { cwd, env },
  );
  assert.equal(elsewhere.code, 2, elsewhere.stderr);
  assert.match(
    elsewhere.stderr,
    new RegExp(
      `batch ${batchId}'s calls went to http://127\\.0\\.0\\.1:9/v1; this resume would send the rest to http://127\\.0\\.0\\.1:8/v1: resume it with --upstream http://127\\.0\\.0\\.1:9/v1`,
    ),
  );
  assert.ok(
    orphans.every((pid) => isProcessAlive(pid)),
    'a refused resume stops nothing',
  );
  const resumed = await runCli(['dataset', 'run', 'tasks', '--resume', batchId, '--', process.execPath, 'agent.js'], {
    cwd,
    env,
  });
  assert.equal(resumed.code, 0, resumed.stderr);
  assert.match(resumed.stderr, /resuming with the batch's upstream http:\/\/127\.0\.0\.1:9\/v1/);
  assert.match(resumed.stderr, /resuming with the batch's --token-ids/);
  assert.match(resumed.stderr, /stopped 2 agent processes left running/);
  await waitFor(
    () => orphans.every((pid) => !isProcessAlive(pid)),
    'the orphaned agents and their children to be gone',
    5_000,
  );
  assert.ok(isProcessAlive(bystander.pid!), 'a pid that no longer names the agent is not signalled');
  // No retries were allowed: the interrupted attempts are failed, not run again.
  assert.deepEqual(
    batchOf(cwd).map((r) => [r.status, r.error]),
    [
      ['failed', 'the runner stopped during this attempt'],
      ['failed', 'the runner stopped during this attempt'],
    ],
  );
});

test(
  'dataset run: on a terminal, progress is one bar redrawn in place',
  { skip: !fs.existsSync('/usr/bin/script') && 'needs util-linux script for a pseudo-terminal' },
  async (t) => {
    const { cwd, env } = setUp(t, [
      { id: 'a', ms: 10 },
      { id: 'b', ms: 10 },
    ]);
    await importTasks(cwd);
    // stdout goes to a file; stderr stays on the pseudo-terminal `script` provides.
    const command = `${process.execPath} ${CLI} dataset run tasks --samples 2 --json -- ${process.execPath} agent.js > out.json`;
    const run = await new Promise<{ code: number | null; output: string }>((resolve) => {
      const child = spawn('/usr/bin/script', ['-qec', command, '/dev/null'], {
        cwd,
        env: { ...process.env, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.on('close', (code) => resolve({ code, output }));
    });
    assert.equal(run.code, 0, run.output);
    // The progress line is redrawn with a carriage return and an erase-line escape.
    // eslint-disable-next-line no-control-regex
    assert.match(run.output, /\r\x1b\[K\[#{24}\] 4\/4 · 4 ok/);
    assert.doesNotMatch(run.output, /^\[\d\/4\] ro-/m, 'no per-attempt lines for attempts that succeeded');
    assert.equal(
      (
        JSON.parse(fs.readFileSync(path.join(cwd, 'out.json'), 'utf8')) as { tasks: Array<{ succeeded: number }> }
      ).tasks.at(-1)!.succeeded,
      4,
    );
  },
);
