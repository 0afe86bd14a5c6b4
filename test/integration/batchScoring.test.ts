import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import type { Reward, Rollout } from '../../trainer-daemon/protocol';
import { Store } from '../../trainer-daemon/store/store';
import { runCli, startCli, startDaemon } from '../helpers/daemon';
import { tempDir, waitFor } from '../helpers/tmp';

/**
 * An agent that reports its final answer as the span attribute `lightning.answer` (OTLP/JSON), after
 * `ms`; it posts no reward itself, so every reward comes from the scoring pipeline. Process mode
 * reads LIGHTNING_TASK; worker mode loops over LIGHTNING_RUNNER_URL.
 */
const AGENT = `
const hex = (n) => [...Array(n)].map(() => Math.floor(Math.random() * 16).toString(16)).join('');
async function report(url, task) {
  await new Promise((resolve) => setTimeout(resolve, task.ms ?? 50));
  const now = String(Date.now() * 1e6);
  const span = { traceId: hex(32), spanId: hex(16), name: 'answer', kind: 1, startTimeUnixNano: now, endTimeUnixNano: now,
    attributes: [{ key: 'lightning.answer', value: { stringValue: task.answer } }] };
  const body = { resourceSpans: [{ resource: { attributes: [] }, scopeSpans: [{ scope: { name: 'agent' }, spans: [span] }] }] };
  const res = await fetch(url + '/v1/traces', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (!res.ok) throw new Error('traces: ' + res.status);
}
async function worker() {
  for (;;) {
    const res = await fetch(process.env.LIGHTNING_RUNNER_URL + '/next', { method: 'POST' });
    if (res.status === 204) return;
    const job = await res.json();
    await report(job.url, job.task);
    await fetch(job.url + '/finish', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ status: 'succeeded' }) });
  }
}
if (process.env.LIGHTNING_RUNNER_URL) worker();
else report(process.env.LIGHTNING_URL, JSON.parse(process.env.LIGHTNING_TASK));
`;

/** A reward function that cannot score one answer: its error belongs to that rollout only. */
const PICKY = `export default (trajectory) => {
  if (trajectory.finalAnswer === 'boom') throw new Error('cannot score an explosion');
  return trajectory.finalAnswer.length <= 2 ? 1 : 0;
};
`;

const TASKS = [
  { id: 'right', answer: '4', expected: '4' },
  { id: 'wrong', answer: '8', expected: '7' },
  { id: 'boom', answer: 'boom', expected: 'bang' },
  { id: 'slow', answer: '9', expected: '9', ms: 4_000 },
];

const RULES = {
  datasets: {
    tasks: {
      sources: [
        { type: 'rule', name: 'correct', rule: { rule: 'exact' } },
        { type: 'function', name: 'short', module: 'picky.mjs', weight: 0.5 },
      ],
    },
  },
};

function setUp(t: Parameters<typeof tempDir>[0]): string {
  const cwd = tempDir(t);
  fs.writeFileSync(path.join(cwd, 'agent.js'), AGENT);
  fs.writeFileSync(path.join(cwd, 'tasks.jsonl'), TASKS.map((task) => JSON.stringify(task)).join('\n'));
  return cwd;
}

function storeState(cwd: string): { rollouts: Rollout[]; rewards: Map<string, Reward[]> } {
  const store = Store.open(path.join(cwd, '.lightning', 'store.db'));
  try {
    const rollouts = store.listRollouts({ order: 'oldest', limit: 500 }).items;
    return { rollouts, rewards: new Map(rollouts.map((r) => [r.task?.id ?? r.id, store.listRewards(r.id)])) };
  } finally {
    store.close();
  }
}

interface BatchSummary {
  tasks: Array<{ task: string; meanReward: number | null; scoreErrors: number }>;
  scoring: { rewardsFile: string; scored: number; errors: Array<{ rolloutId: string; task: string; error: string }> };
}

test('dataset run with the default rewards file: each rollout is scored as it finishes, a reward function’s error is that rollout’s, a human annotation stays the reward', async (t) => {
  const cwd = setUp(t);
  const imported = await runCli(['dataset', 'import', 'tasks.jsonl'], { cwd });
  assert.equal(imported.code, 0, imported.stderr);
  fs.writeFileSync(path.join(cwd, '.lightning', 'rewards.json'), JSON.stringify(RULES));
  fs.writeFileSync(path.join(cwd, '.lightning', 'picky.mjs'), PICKY);

  const running = runCli(
    ['dataset', 'run', 'tasks', '--concurrency', '4', '--json', '--', process.execPath, 'agent.js'],
    { cwd },
  );
  // While the slow agent still runs, a person annotates it: scoring must not displace that.
  const slow = await waitFor(
    () => storeState(cwd).rollouts.find((r) => r.task?.id === 'slow' && r.status === 'running'),
    'the slow rollout to run',
    15_000,
  );
  const annotated = await runCli(['reward', slow.id, '0.25'], { cwd });
  assert.equal(annotated.code, 0, annotated.stderr);
  const run = await running;
  assert.equal(run.code, 0, run.stderr);

  const summary = JSON.parse(run.stdout.trim().split('\n').at(-1)!) as BatchSummary;
  const { rollouts, rewards } = storeState(cwd);
  const byTask = new Map(rollouts.map((r) => [r.task!.id!, r]));
  // Combined: 1×correct + 0.5×short; the function failed on "boom", so that rollout has only the rule's part.
  assert.deepEqual(
    summary.tasks.map((s) => [s.task, s.meanReward, s.scoreErrors]),
    [
      ['right', 1.5, 0],
      ['wrong', 0.5, 0],
      ['boom', 0, 1],
      ['slow', 0.25, 0],
      ['(all)', 0.5625, 1],
    ],
  );
  assert.deepEqual(
    summary.scoring.errors.map((e) => [e.rolloutId, e.task]),
    [[byTask.get('boom')!.id, 'boom']],
  );
  assert.match(summary.scoring.errors[0]!.error, /^short: .*cannot score an explosion/);
  assert.equal(summary.scoring.scored, 4);
  assert.equal(summary.scoring.rewardsFile, path.join(fs.realpathSync(cwd), '.lightning', 'rewards.json'));

  // Rows carry their source and reason, as `lightning score` writes them.
  const rows = (task: string) => rewards.get(task)!.map((r) => [r.name, r.value, r.source, r.reason]);
  assert.deepEqual(rows('right'), [
    ['correct', 1, 'rule', 'answer matches'],
    ['short', 1, 'rule', null],
    ['reward', 1.5, 'rule', '1×correct(1) + 0.5×short(1)'],
  ]);
  assert.deepEqual(rows('boom'), [
    ['correct', 0, 'rule', 'answer does not match'],
    ['reward', 0, 'rule', '1×correct(0)'],
  ]);
  // The person's annotation came first and is still there, unchanged, and still the episode reward.
  assert.deepEqual(
    rewards.get('slow')!.map((r) => [r.name, r.value, r.source]),
    [
      ['reward', 0.25, 'human'],
      ['correct', 1, 'rule'],
      ['short', 1, 'rule'],
      ['reward', 1.5, 'rule'],
    ],
  );
  assert.equal(byTask.get('slow')!.reward, 0.25);

  // As it finishes: the quick rollouts were scored while the slow agent was still running.
  const slowEnded = byTask.get('slow')!.endedAt!;
  for (const task of ['right', 'wrong', 'boom'])
    assert.ok(
      rewards.get(task)!.every((r) => r.createdAt < slowEnded),
      `${task} scored before the slow agent ended`,
    );
  assert.match(run.stderr, /scored with .*rewards\.json/);
  assert.match(run.stderr, /scored ro-\S+: reward 1\.5/);
});

test('dataset run --rewards FILE in worker mode scores every rollout; a bad rewards file is refused before any agent runs', async (t) => {
  const cwd = setUp(t);
  const imported = await runCli(['dataset', 'import', 'tasks.jsonl'], { cwd });
  assert.equal(imported.code, 0, imported.stderr);
  fs.writeFileSync(
    path.join(cwd, 'bad.json'),
    JSON.stringify({ default: { sources: [{ type: 'rule', rule: { rule: 'exactly' } }] } }),
  );
  const refused = await runCli(
    ['dataset', 'run', 'tasks', '--rewards', 'bad.json', '--', process.execPath, 'agent.js'],
    { cwd },
  );
  assert.equal(refused.code, 2, refused.stderr);
  assert.match(refused.stderr, /bad\.json: default\.sources\.0\.rule/);
  assert.equal(storeState(cwd).rollouts.length, 0, 'nothing ran');

  fs.writeFileSync(
    path.join(cwd, 'rules.json'),
    JSON.stringify({ default: { sources: [{ type: 'rule', rule: { rule: 'exact' } }] } }),
  );
  const run = await runCli(
    [
      'dataset',
      'run',
      'tasks',
      '--rewards',
      'rules.json',
      '--workers',
      '2',
      '--concurrency',
      '4',
      '--json',
      '--',
      process.execPath,
      'agent.js',
    ],
    { cwd },
  );
  assert.equal(run.code, 0, run.stderr);
  const summary = JSON.parse(run.stdout.trim().split('\n').at(-1)!) as BatchSummary;
  assert.deepEqual(
    summary.tasks.map((s) => [s.task, s.meanReward]),
    [
      ['right', 1],
      ['wrong', 0],
      ['boom', 0],
      ['slow', 1],
      ['(all)', 0.5],
    ],
  );
  assert.deepEqual([summary.scoring.scored, summary.scoring.errors], [4, []]);
  const { rewards } = storeState(cwd);
  assert.deepEqual(
    rewards.get('right')!.map((r) => [r.name, r.value, r.source, r.author]),
    [
      ['rule.exact', 1, 'rule', 'lightning'],
      ['reward', 1, 'rule', 'lightning'],
    ],
  );
});

/** A folder with the agent and the dataset `tasks` of two quick tasks (right, wrong), imported. */
async function twoTaskDataset(t: Parameters<typeof tempDir>[0]): Promise<string> {
  const cwd = tempDir(t);
  fs.writeFileSync(path.join(cwd, 'agent.js'), AGENT);
  fs.writeFileSync(
    path.join(cwd, 'tasks.jsonl'),
    TASKS.filter((task) => task.id === 'right' || task.id === 'wrong')
      .map((task) => JSON.stringify(task))
      .join('\n'),
  );
  const imported = await runCli(['dataset', 'import', 'tasks.jsonl'], { cwd });
  assert.equal(imported.code, 0, imported.stderr);
  return cwd;
}

test('dataset run --resume scores the rollouts its batch ended without scoring (a runner stopped first, or no rewards file then), once', async (t) => {
  const cwd = await twoTaskDataset(t);
  // No rewards file yet: the batch ends with nothing scored.
  const first = await runCli(['dataset', 'run', 'tasks', '--json', '--', process.execPath, 'agent.js'], { cwd });
  assert.equal(first.code, 0, first.stderr);
  const batchId = (JSON.parse(first.stdout.trim().split('\n').at(-1)!) as { batchId: string }).batchId;
  assert.deepEqual(
    [...storeState(cwd).rewards.values()].map((rows) => rows.length),
    [0, 0],
  );

  fs.writeFileSync(path.join(cwd, '.lightning', 'rewards.json'), JSON.stringify(RULES));
  fs.writeFileSync(path.join(cwd, '.lightning', 'picky.mjs'), PICKY);
  const resume = ['dataset', 'run', 'tasks', '--resume', batchId, '--json', '--', process.execPath, 'agent.js'];
  const resumed = await runCli(resume, { cwd });
  assert.equal(resumed.code, 0, resumed.stderr);
  assert.match(resumed.stderr, /scoring 2 rollouts of the batch that ended unscored before the resume/);
  const summary = JSON.parse(resumed.stdout.trim().split('\n').at(-1)!) as BatchSummary;
  assert.deepEqual(
    summary.tasks.map((s) => [s.task, s.meanReward]),
    [
      ['right', 1.5],
      ['wrong', 0.5],
      ['(all)', 1],
    ],
  );
  assert.equal(summary.scoring.scored, 2);
  const rows = (): number[] => [...storeState(cwd).rewards.values()].map((list) => list.length);
  const scoredRows = rows();
  assert.ok(
    scoredRows.every((n) => n > 0),
    'each rollout has its scores',
  );

  // Scored now: another resume scores nothing again.
  const again = await runCli(resume, { cwd });
  assert.equal(again.code, 0, again.stderr);
  assert.doesNotMatch(again.stderr, /ended unscored/);
  assert.deepEqual(rows(), scoredRows);
});

/**
 * A reward function that waits for a file to exist (then scores the answer's length): the scoring job of a runner
 * killed meanwhile still runs in the daemon, until the test lets it go on.
 */
const gatedReward = (gate: string): string => `import fs from 'node:fs';
export default async (trajectory) => {
  while (!fs.existsSync(${JSON.stringify(gate)})) await new Promise((resolve) => setTimeout(resolve, 20));
  return trajectory.finalAnswer.length;
};
`;

test('dataset run --resume right after its runner was killed while scoring: the rollouts get one set of reward rows', async (t) => {
  const cwd = await twoTaskDataset(t);
  const gate = path.join(cwd, 'go-on');
  fs.writeFileSync(
    path.join(cwd, '.lightning', 'rewards.json'),
    JSON.stringify({
      default: { sources: [{ type: 'function', name: 'length', module: 'gated.mjs', timeoutMs: 120_000 }] },
    }),
  );
  fs.writeFileSync(path.join(cwd, '.lightning', 'gated.mjs'), gatedReward(gate));
  // A daemon of its own (as the editor's or `lightning serve`): the runner's scoring job outlives the runner there.
  const daemon = await startDaemon(path.join(cwd, '.lightning', 'store.db'));
  t.after(() => daemon.stop());
  const runCommand = (args: string[]) =>
    startCli(['dataset', 'run', 'tasks', ...args, '--', process.execPath, 'agent.js'], { cwd });
  const runner = runCommand(['--progress', 'json']);
  await waitFor(() => runner.output.stderr.split('"rollout-finished"').length === 3, 'both rollouts to end', 30_000);
  runner.child.kill('SIGKILL');
  await runner.done;
  assert.doesNotMatch(runner.output.stderr, /rollout-scored/, 'killed before its scores came back');
  const batchId = /"batchId":"(batch-[0-9a-f]+)"/.exec(runner.output.stderr)![1]!;

  const resume = runCommand(['--resume', batchId, '--json', '--progress', 'json']);
  await waitFor(
    () => /scoring 2 rollouts of the batch that ended unscored before the resume/.test(resume.output.stderr),
    'the resume to find both rollouts unscored',
    30_000,
  );
  // Both jobs have the rollouts to score now: the killed runner's job, in the daemon, goes first.
  fs.writeFileSync(gate, '');
  assert.equal((await resume.done).code, 0, resume.output.stderr);
  const summary = JSON.parse(resume.output.stdout.trim().split('\n').at(-1)!) as BatchSummary;
  assert.equal(summary.scoring.scored, 2);
  const scored = resume.output.stderr
    .split('\n')
    .filter((line) => line.includes('"rollout-scored"'))
    .map((line) => (JSON.parse(line) as { reward: number | null }).reward);
  assert.deepEqual(scored, [1, 1]);
  assert.deepEqual(
    [...storeState(cwd).rewards.entries()].map(([task, rows]) => [task, rows.map((r) => [r.name, r.value])]),
    [
      [
        'right',
        [
          ['length', 1],
          ['reward', 1],
        ],
      ],
      [
        'wrong',
        [
          ['length', 1],
          ['reward', 1],
        ],
      ],
    ],
  );
});
