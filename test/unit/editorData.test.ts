/**
 * The editor's data features, pure parts in plain Node: a launch configuration made into the
 * agent command of `lightning dataset run` (Run Dataset), the CLI's progress and summary lines
 * read back, and reviews of automatic rewards written and read back. The summary is checked
 * against the CLI's own `summarize`, so a change of its format fails here.
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, it } from 'node:test';
import { commandEnvironment, launchToCommand, type CommandContext } from '../../extension/debug/launchCommand';
import type { BatchStarted, RolloutFinished } from '../../trainer-daemon/protocol/cliLines';
import {
  BatchProgressText,
  describeSummary,
  parseBatchFinished,
  parseProgressLine,
  scoringErrorLines,
} from '../../extension/datasets/batchProgress';
import { isAutomatic } from '../../trainer-daemon/protocol/rewardSources';
import { reviewReason, reviewVerdicts } from '../../trainer-daemon/protocol/ui/rewardReview';
import { ExtensionToWebview, WebviewToExtension } from '../../trainer-daemon/protocol/ui/panelMessages';
import { matchesFilter } from '../../trainer-daemon/protocol/ui/rolloutText';
import { summarize } from '../../trainer-daemon/cli/commands/datasetRun';
import { Progress } from '../../trainer-daemon/cli/datasetRunProgress';
import type { LaunchConfig } from '../../extension/debug/launchConfig';
import type { Reward, Rollout, RolloutScore } from '../../trainer-daemon/protocol';

const context: CommandContext = {
  workspaceFolder: '/ws/proj',
  home: '/home/me',
  processEnv: { PYBIN: '/opt/py/bin/python', PATH: '/usr/bin' },
};
const launch = (config: Partial<LaunchConfig>): LaunchConfig => ({
  type: 'node',
  request: 'launch',
  name: 'Agent',
  ...config,
});

describe('Run Dataset: a launch configuration as an agent command', () => {
  it('node: runtimeExecutable, runtimeArgs, program, args; variables substituted; cwd resolved against the workspace', () => {
    const result = launchToCommand(
      launch({
        program: '${workspaceFolder}/agent.mjs',
        args: ['--model', '${env:MODEL_NAME}x'],
        runtimeArgs: ['--enable-source-maps'],
        cwd: 'sub',
        env: { A: '1', B: null, HOME_DIR: '${userHome}' },
      }),
      context,
    );
    assert.ok(result.ok);
    assert.deepEqual(result.command.argv, ['node', '--enable-source-maps', '/ws/proj/agent.mjs', '--model', 'x']);
    assert.equal(result.command.cwd, path.resolve('/ws/proj/sub'));
    assert.deepEqual(result.command.env, { A: '1', B: undefined, HOME_DIR: '/home/me' });
    assert.deepEqual(result.command.notes, []);
    const env = commandEnvironment(result.command, { B: 'unset me', PATH: '/usr/bin' });
    assert.deepEqual(env, { PATH: '/usr/bin', A: '1', HOME_DIR: '/home/me' }, 'null in launch.json unsets a variable');
  });

  it('node: a string args line is split; a preLaunchTask is noted, not run; pwa-node works', () => {
    const result = launchToCommand(
      launch({
        type: 'pwa-node',
        program: 'agent.js',
        args: '--a 1  --b',
        preLaunchTask: 'build',
        runtimeExecutable: '/usr/local/bin/node',
      }),
      context,
    );
    assert.ok(result.ok);
    assert.deepEqual(result.command.argv, ['/usr/local/bin/node', 'agent.js', '--a', '1', '--b']);
    assert.equal(result.command.cwd, '/ws/proj');
    assert.deepEqual(result.command.notes, ['its preLaunchTask "build" is not run']);
  });

  it('python and debugpy: program or module, the interpreter from "python"', () => {
    const program = launchToCommand(
      launch({ type: 'debugpy', program: '${workspaceFolder}/agent.py', args: ['-v'], python: '${env:PYBIN}' }),
      context,
    );
    assert.ok(program.ok);
    assert.deepEqual(program.command.argv, ['/opt/py/bin/python', '/ws/proj/agent.py', '-v']);
    const module = launchToCommand(launch({ type: 'python', module: 'agents.main' }), context);
    assert.ok(module.ok);
    assert.deepEqual(module.command.argv, ['python3', '-m', 'agents.main']);
  });

  it('says clearly why a configuration cannot become a command', () => {
    const refusals: Array<[Partial<LaunchConfig>, RegExp]> = [
      [{ request: 'attach' }, /"Agent" is an attach configuration: only a launch/],
      [{ type: 'go', program: 'main.go' }, /debug type "go": Lightning runs node and python launch configurations/],
      [{ program: '${file}' }, /program uses \$\{file\}, which has a value only inside a debug session/],
      [{ program: 'a.js', args: ['${input:question}'] }, /args uses \$\{input:question\}/],
      [
        { program: 'a.js', envFile: '/nowhere/.env' },
        /envFile \/nowhere\/\.env cannot be read \(ENOENT\); fix the path or remove "envFile"/,
      ],
      [{}, /cannot be run without the debugger: it has no "program"/],
      [{ type: 'python' }, /neither "program" nor "module"/],
      [{ program: 'a.js', args: [1, 2] as unknown }, /args must be a string or a list of strings/],
    ];
    for (const [config, expected] of refusals) {
      const result = launchToCommand(launch(config), context);
      assert.equal(result.ok, false, JSON.stringify(config));
      assert.match((result as { message: string }).message, expected);
    }
  });
});

describe('Run Dataset: the CLI lines read back', () => {
  it('reads the batch announcement and the progress lines the CLI writes with --json, and no human line', () => {
    const started: BatchStarted = { event: 'batch-started', batchId: 'batch-0a1b2c3d4e5f', total: 8, scored: false };
    assert.deepEqual(parseProgressLine(JSON.stringify(started)), {
      kind: 'batch',
      batchId: 'batch-0a1b2c3d4e5f',
      total: 8,
      scored: false,
    });
    assert.deepEqual(parseProgressLine(JSON.stringify({ ...started, scored: true })), {
      kind: 'batch',
      batchId: 'batch-0a1b2c3d4e5f',
      total: 8,
      scored: true,
    });
    const lines: string[] = [];
    const stderr = {
      write: (chunk: string) => lines.push(...chunk.split('\n').filter(Boolean)),
    } as unknown as NodeJS.WriteStream;
    new Progress(stderr, 8, false, true).attempt({
      rollout: {
        id: 'ro-1',
        task: { id: 'task-2', input: null },
        status: 'succeeded',
        reward: 1,
        error: null,
      } as Rollout,
      durationMs: 1_200,
      retrying: false,
    });
    assert.deepEqual(parseProgressLine(lines[0]!), {
      kind: 'rollout',
      done: 1,
      total: 8,
      text: 'ro-1 task-2 succeeded reward 1 1.20 s',
    });
    assert.equal(
      parseProgressLine('[3/8] ro-1 task-2 succeeded reward 1 1.2 s'),
      undefined,
      'human lines are not read',
    );
    assert.equal(parseProgressLine('lightning: cancelling the batch: stopping the running agents'), undefined);
    assert.equal(
      parseProgressLine('{"event":"rollout-finished","done":1}'),
      undefined,
      'a line that does not match its schema',
    );
  });

  it("the summary of `dataset run --json`, from the CLI's own summarize, told in one line", () => {
    const rollout = (
      task: string,
      status: Rollout['status'],
      reward: number | null,
      ms: number,
      tokens: number,
    ): Rollout =>
      ({
        id: `ro-${task}-${ms}`,
        task: { id: task, input: null },
        status,
        reward,
        startedAt: 1_000,
        endedAt: 1_000 + ms,
        promptTokens: tokens,
        completionTokens: 0,
      }) as Rollout;
    const tasks = summarize([
      rollout('t1', 'succeeded', 1, 1_000, 100),
      rollout('t1', 'failed', 0, 3_000, 300),
      rollout('t2', 'succeeded', 1, 2_000, 200),
      rollout('t2', 'succeeded', null, 4_000, 200),
    ]);
    const stdout = `not json\n${JSON.stringify({ event: 'batch-finished', batchId: 'batch-1', tasks })}\n`;
    const summary = parseBatchFinished(stdout)!;
    assert.equal(summary.batchId, 'batch-1');
    assert.equal(
      describeSummary(summary, false),
      'finished: 4 rollouts over 2 tasks · 75% succeeded · mean reward 0.667 · p50 2.00 s · p95 4.00 s · 200 tokens per rollout',
    );
    assert.match(describeSummary(summary, true), /^cancelled: /);
    assert.equal(parseBatchFinished('{"event":"other"}\n'), undefined);
  });

  it("reads the CLI's `scored` lines and says so while the batch is scored at its end", () => {
    const lines: string[] = [];
    const stderr = {
      write: (chunk: string) => lines.push(...chunk.split('\n').filter(Boolean)),
    } as unknown as NodeJS.WriteStream;
    const cli = new Progress(stderr, 2, false, true);
    const ran = (id: string): Rollout =>
      ({ id, task: { id: 't1', input: null }, status: 'succeeded', reward: null, error: null }) as Rollout;
    cli.attempt({ rollout: ran('ro-1'), durationMs: 1_000, retrying: false });
    cli.scored({ rolloutId: 'ro-1', value: 1, sources: [] });
    cli.attempt({ rollout: ran('ro-2'), durationMs: 1_000, retrying: false });
    cli.scored({
      rolloutId: 'ro-2',
      value: null,
      sources: [{ kind: 'error', name: 'judge', error: 'timed out after 2000 ms' }],
    });
    assert.deepEqual(
      lines.map((line) => parseProgressLine(line)?.kind),
      ['rollout', 'scored', 'rollout', 'scored'],
    );
    assert.deepEqual(parseProgressLine(lines[3]!), { kind: 'scored', rolloutId: 'ro-2' });

    const text = new BatchProgressText();
    const reports = [
      JSON.stringify({ event: 'batch-started', batchId: 'batch-1', total: 2, scored: true }),
      ...lines,
    ].map((line) => text.update(parseProgressLine(line)!));
    assert.deepEqual(
      reports.map((r) => r?.message),
      [
        undefined,
        '1/2 · ro-1 t1 succeeded reward - 1.00 s',
        undefined,
        '2/2 ran · scoring: 1/2 scored',
        '2/2 ran · scoring: 2/2 scored',
      ],
    );
    assert.deepEqual(
      reports.map((r) => r?.increment),
      [undefined, 50, undefined, 50, 0],
    );
    // Unscored, the last rollout's line is shown as it is.
    const plain = new BatchProgressText();
    plain.update(
      parseProgressLine(JSON.stringify({ event: 'batch-started', batchId: 'batch-2', total: 1, scored: false }))!,
    );
    const failed: RolloutFinished = {
      event: 'rollout-finished',
      done: 1,
      total: 1,
      rolloutId: 'ro-3',
      taskId: 't1',
      status: 'failed',
      retrying: false,
      reward: null,
      durationMs: 2_000,
      error: 'exit 1',
    };
    assert.deepEqual(plain.update(parseProgressLine(JSON.stringify(failed))!), {
      message: '1/1 · ro-3 t1 failed reward - 2.00 s',
      increment: 100,
    });
  });

  it('the summary counts the scoring errors of `dataset run --json`; their lines go to the log', () => {
    const rollout = (id: string): Rollout =>
      ({
        id,
        task: { id: 't1', input: null },
        status: 'succeeded',
        reward: 1,
        startedAt: 0,
        endedAt: 1_000,
        promptTokens: 10,
        completionTokens: 0,
      }) as Rollout;
    const scores = new Map<string, RolloutScore>([
      ['ro-1', { rolloutId: 'ro-1', value: 1, sources: [] }],
      [
        'ro-2',
        {
          rolloutId: 'ro-2',
          value: null,
          sources: [{ kind: 'error', name: 'judge', error: 'timed out after 2000 ms' }],
        },
      ],
    ]);
    const tasks = summarize([rollout('ro-1'), rollout('ro-2')], scores);
    const scoring = {
      rewardsFile: '/w/.lightning/rewards.json',
      scored: 1,
      errors: [{ rolloutId: 'ro-2', task: 't1', error: 'judge: timed out after 2000 ms' }],
    };
    const summary = parseBatchFinished(
      `${JSON.stringify({ event: 'batch-finished', batchId: 'batch-1', tasks, scoring })}\n`,
    )!;
    assert.match(describeSummary(summary, false), / · 10 tokens per rollout · 1 scoring error \(Show Logs\)$/);
    assert.deepEqual(scoringErrorLines(summary), ['score error: ro-2 (task t1): judge: timed out after 2000 ms']);
    const clean = parseBatchFinished(
      `${JSON.stringify({ event: 'batch-finished', batchId: 'batch-1', tasks, scoring: { ...scoring, errors: [] } })}\n`,
    )!;
    assert.doesNotMatch(describeSummary(clean, false), /scoring error/);
    assert.deepEqual(scoringErrorLines(clean), []);
  });
});

describe('Reviews of automatic rewards', () => {
  const reward = (id: number, source: Reward['source'], value: number, reason: string | null = null): Reward => ({
    id,
    rolloutId: 'r',
    spanId: null,
    name: 'reward',
    value,
    source,
    author: 'ann',
    comment: null,
    reason,
    createdAt: id,
  });
  it('each review names the reward it reviews; the latest review of each wins', () => {
    const rule = reward(3, 'rule', 1, 'exact match');
    const judge = reward(4, 'judge', 0.8, 'mostly right');
    assert.equal(reviewReason(rule, 'accept'), 'accepts rule reward #3');
    assert.equal(reviewReason(judge, 'correct'), 'corrects judge reward #4 (was 0.8)');
    assert.equal(reviewReason(rule, 'reject'), 'rejects rule reward #3 (was 1)');
    const verdicts = reviewVerdicts([
      rule,
      judge,
      reward(5, 'human', 1, reviewReason(rule, 'accept')),
      reward(6, 'human', 0.5, reviewReason(judge, 'correct')),
      reward(7, 'human', 0, reviewReason(rule, 'reject')),
      reward(8, 'agent', 1, 'rejects rule reward #4'),
    ]);
    assert.deepEqual([...verdicts].map(([id, v]) => [id, v.action, v.by.id]).sort(), [
      [3, 'reject', 7],
      [4, 'correct', 6],
    ]);
  });
});

describe("the panel's data messages", () => {
  it('accepts what each end sends, rejects a bad review action, and filters live rollouts by dataset and batch', () => {
    assert.ok(WebviewToExtension.safeParse({ type: 'listDatasets' }).success);
    assert.ok(WebviewToExtension.safeParse({ type: 'loadTransitions', rolloutId: 'ro-1' }).success);
    assert.ok(
      WebviewToExtension.safeParse({ type: 'reviewReward', rolloutId: 'ro-1', rewardId: 3, action: 'reject' }).success,
    );
    assert.ok(
      !WebviewToExtension.safeParse({ type: 'reviewReward', rolloutId: 'ro-1', rewardId: 3, action: 'delete' }).success,
    );
    assert.ok(
      !WebviewToExtension.safeParse({ type: 'reviewReward', rolloutId: 'ro-1', rewardId: 0, action: 'accept' }).success,
    );
    assert.ok(ExtensionToWebview.safeParse({ type: 'showBatch', batchId: 'batch-1' }).success);
    assert.ok(
      ExtensionToWebview.safeParse({
        type: 'datasets',
        items: [
          {
            dataset: { id: 'ds-1', name: 'math', source: null, taskCount: 3, createdAt: 1 },
            splits: { train: 2, val: 1, test: 0 },
          },
        ],
      }).success,
    );
    const rollout = {
      status: 'succeeded',
      mode: 'train',
      label: null,
      task: null,
      datasetId: 'ds-1',
      batchId: 'batch-1',
    } as unknown as Rollout;
    assert.equal(matchesFilter(rollout, { batchId: 'batch-1' }), true);
    assert.equal(matchesFilter(rollout, { batchId: 'batch-2' }), false);
    assert.equal(matchesFilter(rollout, { datasetId: 'ds-2' }), false);
    assert.deepEqual(
      (['human', 'agent', 'rule', 'judge', 'model'] as const).map((source) => isAutomatic({ source })),
      [false, false, true, true, true],
    );
  });
});
