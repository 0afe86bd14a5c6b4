/**
 * A crashed agent's reason is kept with its rollout: a Node and a Python agent that crash under
 * `lightning run` and under `dataset run` (the process pool) — the exception leads the rollout's error,
 * its last output lines follow, `lightning show` prints both, and a token the agent printed is redacted.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { failureHeadline, failureOutput } from '../../trainer-daemon/protocol/failureText';
import { REPO_ROOT, runCli } from '../helpers/daemon';
import { batchOf } from '../helpers/batch';
import { runAgent } from '../helpers/runAgent';
import { startScriptedUpstream, type ScriptedUpstream } from '../helpers/scriptedUpstream';
import { tempDir } from '../helpers/tmp';

const AGENTS = path.join(REPO_ROOT, 'test', 'fixtures', 'agents');
const TOKEN = 'weather-token-5c1a9e7f3b';
const CRASHES = [
  {
    name: 'Node',
    command: [process.execPath, path.join(AGENTS, 'crash-agent.mjs')],
    exception: /^SyntaxError: Unexpected token .*is not valid JSON \(exited with code 1\)$/,
    frame: /at parseReply \(file:\/\/.*crash-agent\.mjs:6/,
  },
  {
    name: 'Python',
    command: ['python3', path.join(AGENTS, 'crash_agent.py')],
    exception: /^ZeroDivisionError: division by zero \(exited with code 1\)$/,
    frame: /crash_agent\.py", line 10, in average/,
  },
];

let upstream: ScriptedUpstream;
before(async () => {
  upstream = await startScriptedUpstream();
});
after(() => upstream.close());

describe('lightning run: a crashed agent', () => {
  for (const crash of CRASHES) {
    test(`${crash.name}: the exception and the last lines are in the rollout and in lightning show`, async (t) => {
      const run = await runAgent(t, upstream.url, crash.command, { WEATHER_SERVICE_TOKEN: TOKEN });
      assert.equal(run.code, 1);
      // What the agent wrote to stderr still reaches the terminal, before lightning's own last line.
      assert.match(run.stderr, new RegExp(`using token ${TOKEN}`));
      const { rollout } = run.detail;
      assert.equal(rollout.status, 'failed');
      assert.equal(rollout.exitCode, 1);
      assert.match(failureHeadline(rollout.error!), crash.exception);
      assert.match(failureOutput(rollout.error!), crash.frame);
      assert.match(failureOutput(rollout.error!), /weather agent: using token \[redacted\]/);
      assert.ok(!rollout.error!.includes(TOKEN), 'the token the agent printed is not stored');

      const shown = await runCli(['show', rollout.id], { cwd: run.cwd });
      assert.equal(shown.code, 0, shown.stderr);
      const status = shown.stdout.split('\n').find((line) => line.trimStart().startsWith('status'))!;
      assert.match(status, /failed \(exit 1\) — (SyntaxError|ZeroDivisionError): /);
      assert.match(shown.stdout, /\nOutput \(last lines\)\n/);
      assert.match(shown.stdout, crash.frame);
      assert.ok(!shown.stdout.includes(TOKEN));
    });
  }
});

test('dataset run: each crashed rollout of the batch carries its exception', async (t) => {
  const cwd = tempDir(t);
  fs.writeFileSync(path.join(cwd, 'tasks.jsonl'), ['{"id":"a","city":"Paris"}', '{"id":"b","city":"Oslo"}'].join('\n'));
  const imported = await runCli(['dataset', 'import', 'tasks.jsonl'], { cwd });
  assert.equal(imported.code, 0, imported.stderr);
  for (const crash of CRASHES) {
    const run = await runCli(['dataset', 'run', 'tasks', '--concurrency', '2', '--', ...crash.command], {
      cwd,
      env: { WEATHER_SERVICE_TOKEN: TOKEN, LIGHTNING_UPSTREAM_URL: upstream.url },
    });
    assert.notEqual(run.code, null, run.stderr);
  }
  const rollouts = batchOf(cwd);
  assert.equal(rollouts.length, 4);
  CRASHES.forEach((crash, index) => {
    for (const rollout of rollouts.slice(index * 2, index * 2 + 2)) {
      assert.equal(rollout.status, 'failed');
      assert.match(failureHeadline(rollout.error!), crash.exception);
      assert.match(failureOutput(rollout.error!), crash.frame);
      assert.ok(!rollout.error!.includes(TOKEN));
    }
  });
});
